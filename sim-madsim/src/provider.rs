//! The Vast-like provider API as a madsim node, and the orchestrator's port
//! that calls it.
//!
//! The service keeps its leases in the world's shared state (tier 1's
//! `Provider`, so both tiers rent the same way) and applies the kit's
//! provider faults by request ordinal: 429/5xx, offer gone, double rent,
//! invisible leases, and the ambiguous creates, which here are real: the
//! answer is simply never sent, and the port's own timeout reports it.

use crate::state::{Control, PROVIDER_IP, World, WorldState};
use crate::wire::{
    PROVIDER_PORT, ProviderAnswer, ProviderCall, ProviderReply, ProviderRequest, TAG_ANSWER,
    TAG_REQUEST,
};
use conformance::case::{HostFault, LeaseFault, NetFault, OpFault, OpKind};
use conformance::oracle::Observation;
use core_fsm::port::{
    CreateLeaseRequest, Effect, Input, LeaseFacts, LeaseGranted, ProviderError, ProviderErrorKind,
};
use core_fsm::time::Instant;
use madsim::net::Endpoint;
use sim::world::provider::{CreateMode, Provider};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

/// How long the port waits for an answer (an HTTP client timeout). Shorter
/// than every machine deadline, so the port always answers first.
pub(crate) const PORT_TIMEOUT: Duration = Duration::from_secs(10);

type Waiting = Rc<RefCell<BTreeMap<u64, oneshot::Sender<ProviderReply>>>>;

/// The orchestrator's provider port.
pub(crate) struct ProviderPort {
    ep: Rc<Endpoint>,
    waiting: Waiting,
    tx: UnboundedSender<Input>,
    next_id: u64,
}

impl ProviderPort {
    /// Binds the port's endpoint and starts reading answers.
    pub(crate) async fn bind(_world: Arc<World>, tx: UnboundedSender<Input>, inc: u32) -> Self {
        let ep = Rc::new(
            Endpoint::bind("0.0.0.0:0")
                .await
                .expect("an ephemeral port is free"),
        );
        let waiting: Waiting = Rc::default();
        let (reader, map) = (Rc::clone(&ep), Rc::clone(&waiting));
        madsim::task::spawn_local(async move {
            while let Ok((payload, _from)) = reader.recv_from_raw(TAG_ANSWER).await {
                let Ok(answer) = payload.downcast::<ProviderAnswer>() else {
                    continue;
                };
                // An answer after the timeout, or a second copy of one, has
                // no waiter any more: a real HTTP client never sees it.
                if let Some(waiter) = map.borrow_mut().remove(&answer.id) {
                    let _ = waiter.send(answer.reply);
                }
            }
        });
        ProviderPort {
            ep,
            waiting,
            tx,
            next_id: u64::from(inc) << 32,
        }
    }

    /// Starts the call of `effect`; its answer (or the timeout's error)
    /// comes back through the inbox.
    pub(crate) fn dispatch(&mut self, effect: Effect) {
        let (op, call) = match effect {
            Effect::CreateLease { op, request } => (op, ProviderCall::Create(request)),
            Effect::LookupEndpoint { op, lease } => (op, ProviderCall::Lookup(lease)),
            Effect::DestroyLease { op, lease } => (op, ProviderCall::Destroy(lease)),
            Effect::ListLeases {
                op,
                run_id,
                provider,
            } => (op, ProviderCall::List { run_id, provider }),
            other => unreachable!("not a provider effect: {other:?}"),
        };
        self.next_id += 1;
        let id = self.next_id;
        let (waiter, answer) = oneshot::channel();
        self.waiting.borrow_mut().insert(id, waiter);
        let (ep, waiting, tx) = (
            Rc::clone(&self.ep),
            Rc::clone(&self.waiting),
            self.tx.clone(),
        );
        madsim::task::spawn_local(async move {
            let timed_out = timeout_error(&call);
            let request = ProviderRequest { id, call };
            let to = SocketAddr::new(PROVIDER_IP, PROVIDER_PORT);
            // A send into a clogged link is lost, like a request whose
            // connection never came up; the timeout covers both.
            let _ = ep.send_to_raw(to, TAG_REQUEST, Box::new(request)).await;
            let reply = match madsim::time::timeout(PORT_TIMEOUT, answer).await {
                Ok(Ok(reply)) => reply,
                _ => {
                    waiting.borrow_mut().remove(&id);
                    timed_out
                }
            };
            let _ = tx.send(input_of(op, reply));
        });
    }
}

/// What the port reports when no answer came: a create may have taken
/// effect (ambiguous), anything else is safe to retry.
fn timeout_error(call: &ProviderCall) -> ProviderReply {
    let error = |kind| ProviderError {
        kind,
        message: "no answer within the client timeout".to_owned(),
    };
    match call {
        ProviderCall::Create(_) => ProviderReply::Created(Err(error(ProviderErrorKind::Ambiguous))),
        ProviderCall::Lookup(_) => ProviderReply::Looked(Err(error(ProviderErrorKind::Transient))),
        ProviderCall::Destroy(_) => {
            ProviderReply::Destroyed(Err(error(ProviderErrorKind::Transient)))
        }
        ProviderCall::List { .. } => {
            ProviderReply::Listed(Err(error(ProviderErrorKind::Transient)))
        }
    }
}

fn input_of(op: core_fsm::ids::OpId, reply: ProviderReply) -> Input {
    match reply {
        ProviderReply::Created(result) => Input::LeaseCreated { op, result },
        ProviderReply::Looked(result) => Input::EndpointLooked { op, result },
        ProviderReply::Destroyed(result) => Input::LeaseDestroyed { op, result },
        ProviderReply::Listed(result) => Input::LeasesListed {
            op,
            result: result.map(|leases| leases.into_iter().map(Into::into).collect()),
        },
    }
}

/// The provider node's service loop.
pub(crate) async fn serve(world: Arc<World>, clock: crate::orch::SimClock) {
    let ep = Rc::new(
        Endpoint::bind((std::net::Ipv4Addr::UNSPECIFIED, PROVIDER_PORT))
            .await
            .expect("the provider port is free"),
    );
    while let Ok((payload, from)) = ep.recv_from_raw(TAG_REQUEST).await {
        let Ok(request) = payload.downcast::<ProviderRequest>() else {
            continue;
        };
        let now = clock_now(clock);
        let (kind, nth, reply, work, controls) = {
            let mut w = world.lock();
            handle(&mut w, now, request.call)
        };
        for control in controls {
            world.control(control);
        }
        let net = world.lock().net_fault(kind, nth);
        let (ep, id) = (Rc::clone(&ep), request.id);
        madsim::task::spawn_local(answer(ep, from, id, reply, work, net));
    }
}

fn clock_now(clock: crate::orch::SimClock) -> Instant {
    use driver::Clock as _;
    clock.now()
}

/// Sends one answer after the call's work time, as the network fault says.
async fn answer(
    ep: Rc<Endpoint>,
    to: SocketAddr,
    id: u64,
    reply: Option<ProviderReply>,
    work: Duration,
    net: Option<NetFault>,
) {
    let Some(reply) = reply else { return };
    let extra = match net {
        Some(NetFault::Drop) => return,
        Some(NetFault::Delay { ms }) => Duration::from_millis(ms),
        _ => Duration::ZERO,
    };
    madsim::time::sleep(work + extra).await;
    let copies = if net == Some(NetFault::Duplicate) {
        2
    } else {
        1
    };
    for _ in 0..copies {
        let answer = ProviderAnswer {
            id,
            reply: reply.clone(),
        };
        let _ = ep.send_to_raw(to, TAG_ANSWER, Box::new(answer)).await;
    }
}

type Handled = (OpKind, u32, Option<ProviderReply>, Duration, Vec<Control>);

/// Serves one call against the shared lease table. `None` as the reply
/// means the answer is lost (an ambiguous create).
fn handle(w: &mut WorldState, now: Instant, call: ProviderCall) -> Handled {
    match call {
        ProviderCall::Create(request) => create(w, now, &request),
        ProviderCall::Lookup(lease) => {
            let nth = w.ordinal(OpKind::Lookup);
            let result = match w.op_fault(now, OpKind::Lookup, nth) {
                Some(f) => Err(blip(f)),
                None => Ok(w.provider.lookup(&lease.lease_id, now)),
            };
            let reply = Some(ProviderReply::Looked(result));
            (OpKind::Lookup, nth, reply, Duration::ZERO, Vec::new())
        }
        ProviderCall::Destroy(lease) => destroy(w, now, &lease),
        ProviderCall::List { .. } => {
            let nth = w.ordinal(OpKind::List);
            let result = match w.op_fault(now, OpKind::List, nth) {
                Some(f) => Err(blip(f)),
                None => Ok(w.provider.list(now)),
            };
            let reply = Some(ProviderReply::Listed(result));
            (OpKind::List, nth, reply, Duration::ZERO, Vec::new())
        }
    }
}

fn blip(fault: OpFault) -> ProviderError {
    let message = match fault {
        OpFault::RateLimited => "429 too many requests",
        _ => "503 service unavailable",
    };
    ProviderError {
        kind: ProviderErrorKind::Transient,
        message: message.to_owned(),
    }
}

fn create(w: &mut WorldState, now: Instant, request: &CreateLeaseRequest) -> Handled {
    let nth = w.ordinal(OpKind::Create);
    let fault = w.op_fault(now, OpKind::Create, nth);
    let host = w
        .provider
        .pick_host(&w.case.profile, &request.excluded_hosts);
    let (mode, answer_lost) = match fault {
        Some(OpFault::DoubleRent) => (Some(CreateMode::DoubleRent), false),
        Some(OpFault::Invisible { ms }) => (
            Some(CreateMode::Invisible(
                core_fsm::time::Duration::from_millis(ms),
            )),
            false,
        ),
        Some(OpFault::AmbiguousCreated) => (Some(CreateMode::Plain), true),
        Some(OpFault::AmbiguousNotCreated) => (None, true),
        Some(OpFault::RateLimited | OpFault::ServerError | OpFault::OfferGone) => (None, false),
        _ => (Some(CreateMode::Plain), false),
    };
    let created = match (mode, host) {
        (Some(mode), Some(host)) => Some(create_lease(w, now, request, host, mode)),
        _ => None,
    };
    w.observe(
        now,
        Observation::CreateReceived {
            nonce: request.nonce,
            created: created.as_ref(),
        },
    );
    let controls = created
        .as_ref()
        .and_then(|lease| w.provider.get(&lease.lease_id))
        .map(|l| Control::Created { ordinal: l.ordinal })
        .into_iter()
        .collect();
    let result = match (fault, created) {
        (Some(f @ (OpFault::RateLimited | OpFault::ServerError)), _) => Err(blip(f)),
        (Some(OpFault::OfferGone), _) => Err(ProviderError {
            kind: ProviderErrorKind::Rejected,
            message: "404 no_such_ask".to_owned(),
        }),
        _ if answer_lost => {
            let note = format!(
                "provider: create {} {} answer lost",
                request.node, request.nonce
            );
            w.note(now, || note);
            return (OpKind::Create, nth, None, Duration::ZERO, controls);
        }
        (_, None) => Err(ProviderError {
            kind: ProviderErrorKind::Rejected,
            message: "no offer fits".to_owned(),
        }),
        (_, Some(lease)) => {
            let endpoint = if w.case.profile.endpoint_on_create {
                w.provider.get(&lease.lease_id).map(Provider::endpoint)
            } else {
                None
            };
            Ok(LeaseGranted {
                lease: lease.into(),
                endpoint,
            })
        }
    };
    let reply = Some(ProviderReply::Created(result));
    (
        OpKind::Create,
        nth,
        reply,
        Duration::from_millis(1_000),
        controls,
    )
}

fn create_lease(
    w: &mut WorldState,
    now: Instant,
    request: &CreateLeaseRequest,
    host: u32,
    mode: CreateMode,
) -> LeaseFacts {
    let ordinal = w.provider.next_ordinal();
    let lease_faults: Vec<LeaseFault> = if w.faulty() {
        w.faults.lease.get(&ordinal).cloned().unwrap_or_default()
    } else {
        Vec::new()
    };
    for fault in &lease_faults {
        let item = conformance::case::Item::Lease {
            nth: ordinal,
            fault: *fault,
        };
        if !conformance::fault::is_agent_fault(fault) {
            w.injected(conformance::fault::name_of(&item));
        }
    }
    let host_fault: Option<HostFault> = w.faults.host.get(&host).copied();
    if host_fault.is_some() {
        w.injected("bad-host");
    }
    let profile = w.case.profile.clone();
    let facts = w.provider.create(
        now,
        &profile,
        request,
        host,
        mode,
        &lease_faults,
        host_fault,
    );
    if let Some(lease) = w.provider.get(&facts.lease_id) {
        let endpoint = Provider::endpoint(lease);
        w.nat
            .insert((endpoint.host.to_string(), endpoint.port), ordinal);
    }
    facts
}

fn destroy(w: &mut WorldState, now: Instant, lease: &LeaseFacts) -> Handled {
    let nth = w.ordinal(OpKind::Destroy);
    let mut controls = Vec::new();
    let result = match w.op_fault(now, OpKind::Destroy, nth) {
        Some(f) => Err(blip(f)),
        None => {
            let result = w.provider.destroy(&lease.lease_id);
            if result.is_ok() {
                w.observe(now, Observation::LeaseGone(&lease.lease_id));
                let id = lease.lease_id.clone();
                w.note(now, || format!("provider: destroyed {id}"));
                if let Some(l) = w.provider.get(&lease.lease_id) {
                    controls.push(Control::Destroyed { ordinal: l.ordinal });
                }
            }
            result
        }
    };
    let reply = Some(ProviderReply::Destroyed(result));
    (
        OpKind::Destroy,
        nth,
        reply,
        Duration::from_millis(500),
        controls,
    )
}
