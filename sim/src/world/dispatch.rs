//! The effect loop's dispatch: each effect reaches the simulated provider,
//! SSH host, transport or disk, and its answer is scheduled as an input.

use super::provider::CreateMode;
use super::{Event, World};
use conformance::System;
use conformance::case::{LeaseFault, NetFault, OpFault, OpKind};
use conformance::oracle::Observation;
use core_fsm::ids::{OpId, SessionId};
use core_fsm::port::{
    CreateLeaseRequest, Effect, EndpointStatus, Input, JournalRecord, LeaseFacts, ProviderError,
    ProviderErrorKind,
};
use core_fsm::time::Duration;

fn transient(message: &str) -> ProviderError {
    ProviderError {
        kind: ProviderErrorKind::Transient,
        message: message.to_owned(),
    }
}

/// An answer to an operation nobody asked for.
pub(super) fn unknown_answer(op: OpId, n: u64) -> Input {
    match n % 6 {
        0 => Input::LeaseDestroyed { op, result: Ok(()) },
        1 => Input::SshExited { op, result: Ok(0) },
        2 => Input::LeaseCreated {
            op,
            result: Err(transient("unknown")),
        },
        3 => Input::EndpointLooked {
            op,
            result: Ok(EndpointStatus::Gone),
        },
        4 => Input::SshClosed { op },
        _ => Input::SshConnected { op, result: Ok(()) },
    }
}

impl<S: System> World<'_, S> {
    /// The next ordinal of `kind`.
    pub(super) fn ordinal(&mut self, kind: OpKind) -> u32 {
        let n = self.ordinals.entry(kind).or_insert(0);
        *n += 1;
        *n - 1
    }

    /// The request fault of this ordinal, if faults are on.
    pub(super) fn op_fault(&mut self, kind: OpKind, nth: u32) -> Option<OpFault> {
        if !self.faulty() {
            return None;
        }
        if kind.is_provider() && self.now < self.storm_until {
            return Some(OpFault::RateLimited);
        }
        self.faults.op.get(&(kind, nth)).copied()
    }

    /// Schedules the answer `inputs` of request (kind, nth), through the
    /// network: usual latency plus `extra`, then the plan's network fault.
    pub(super) fn answer(&mut self, kind: OpKind, nth: u32, inputs: Vec<Input>, extra: Duration) {
        self.answer_on(None, kind, nth, inputs, extra);
    }

    /// Like `answer`; answers on one SSH connection keep their order (one
    /// TCP stream), so a delayed answer also delays the later ones.
    pub(super) fn answer_on(
        &mut self,
        session: Option<SessionId>,
        kind: OpKind,
        nth: u32,
        inputs: Vec<Input>,
        extra: Duration,
    ) {
        let net = if self.faulty() {
            self.faults.net.get(&(kind, nth)).copied()
        } else {
            None
        };
        let mut at = self.now + Duration::from_millis(self.case.profile.latency_ms) + extra;
        match net {
            Some(NetFault::Drop) => {
                self.injected("answer-dropped");
                return;
            }
            Some(NetFault::Delay { ms }) => {
                self.injected("latency");
                at += Duration::from_millis(ms);
            }
            _ => {}
        }
        if let Some(session) = session {
            let last = self.session_clock.entry(session).or_insert(at);
            at = at.max(*last);
            *last = at;
        }
        let inc = self.inc;
        let last = inputs.last().cloned();
        for input in inputs {
            self.schedule(at, Event::Deliver { inc, input });
        }
        if let (Some(NetFault::Duplicate), Some(input)) = (net, last) {
            self.injected("answer-duplicated");
            self.schedule(at + Duration::from_millis(1), Event::Deliver { inc, input });
        }
    }

    /// Remembers which node an operation concerns (for coverage pairs).
    pub(super) fn track(&mut self, effect: &Effect) {
        self.coverage.effects.insert(effect.kind());
        match effect {
            Effect::CreateLease { op, request } => {
                self.op_node.insert(*op, request.node.clone());
            }
            Effect::LookupEndpoint { op, lease } | Effect::DestroyLease { op, lease } => {
                if let Some(l) = self.provider.get(&lease.lease_id) {
                    self.op_node.insert(*op, l.node.clone());
                }
            }
            Effect::SshConnect {
                op,
                session,
                lease_id,
                ..
            } => {
                if let Some(l) = self.provider.get(lease_id) {
                    self.session_node
                        .insert(*session, (l.node.clone(), lease_id.clone()));
                    self.op_node.insert(*op, l.node.clone());
                }
            }
            Effect::SshExec { op, session, .. } | Effect::SshClose { op, session } => {
                if let Some((node, _)) = self.session_node.get(session) {
                    self.op_node.insert(*op, node.clone());
                }
            }
            Effect::NodeChanged { stage, .. } => {
                self.coverage.stages.insert(*stage);
            }
            _ => {}
        }
    }

    /// Dispatches one effect of the running incarnation.
    pub(super) fn dispatch(&mut self, effect: Effect) {
        match effect {
            Effect::Persist(record) => return self.persist(record),
            Effect::CreateLease { op, request } => self.create(op, &request),
            Effect::LookupEndpoint { op, lease } => self.lookup(op, &lease),
            Effect::DestroyLease { op, lease } => self.destroy(op, &lease),
            Effect::ListLeases { op, .. } => {
                let nth = self.ordinal(OpKind::List);
                let result = match self.op_fault(OpKind::List, nth) {
                    Some(f) => Err(self.provider_blip(OpKind::List, f)),
                    None => Ok(self
                        .provider
                        .list(self.now)
                        .into_iter()
                        .map(Into::into)
                        .collect()),
                };
                self.answer(
                    OpKind::List,
                    nth,
                    vec![Input::LeasesListed { op, result }],
                    Duration::ZERO,
                );
            }
            Effect::SshConnect {
                op,
                session,
                endpoint,
                lease_id,
            } => self.connect(op, session, &endpoint, lease_id),
            Effect::SshExec {
                op,
                session,
                purpose,
                join,
                ..
            } => self.exec(op, session, purpose, join),
            Effect::SshClose { op, session } => {
                let nth = self.ordinal(OpKind::Close);
                let mut inputs = self.close_connection(session);
                inputs.push(Input::SshClosed { op });
                self.answer_on(Some(session), OpKind::Close, nth, inputs, Duration::ZERO);
            }
            Effect::RevokeJoin(binding) => {
                if let Some(token) = self.ssh.tokens.get_mut(&binding) {
                    token.revoked = true;
                }
            }
            // This world says a lost agent with `AgentLost`: its composite
            // has no pipeline host.
            Effect::Log(_) | Effect::NodeChanged { .. } | Effect::Pipeline(_) => {}
        }
        self.after_dispatch();
    }

    fn after_dispatch(&mut self) {
        let nth = self.effects_dispatched;
        self.effects_dispatched += 1;
        if let Some(restart) = self.faults.crash_after_effect.get(&nth).copied() {
            self.crash(restart, "crash-after-effect");
        }
    }

    fn persist(&mut self, record: JournalRecord) {
        let nth = self.writes;
        self.writes += 1;
        self.disk.unsynced = Some(record);
        if let Some(orch) = self.orch.as_mut() {
            orch.syncing = true;
        }
        let inc = self.inc;
        self.schedule(
            self.now + Duration::from_millis(self.case.profile.fsync_ms),
            Event::SyncDone { inc },
        );
        self.after_dispatch();
        if let Some(restart) = self.faults.crash_before_sync.get(&nth).copied() {
            self.crash(restart, "crash-before-sync");
        }
    }

    fn provider_blip(&mut self, kind: OpKind, fault: OpFault) -> ProviderError {
        let name = conformance::fault::name_of(&conformance::case::Item::Op {
            op: kind,
            nth: 0,
            fault,
        });
        if self.now < self.storm_until {
            self.injected("storm-429");
        } else {
            self.injected(name);
        }
        match fault {
            OpFault::RateLimited => transient("429 too many requests"),
            _ => transient("503 service unavailable"),
        }
    }

    fn create(&mut self, op: OpId, request: &CreateLeaseRequest) {
        let nth = self.ordinal(OpKind::Create);
        let fault = self.op_fault(OpKind::Create, nth);
        let profile = &self.case.profile;
        let host = self.provider.pick_host(profile, &request.excluded_hosts);
        let (mode, answer_lost) = match fault {
            Some(OpFault::DoubleRent) => (Some(CreateMode::DoubleRent), false),
            Some(OpFault::Invisible { ms }) => (
                Some(CreateMode::Invisible(Duration::from_millis(ms))),
                false,
            ),
            Some(OpFault::AmbiguousCreated) => (Some(CreateMode::Plain), true),
            Some(OpFault::AmbiguousNotCreated) => (None, true),
            Some(OpFault::RateLimited | OpFault::ServerError | OpFault::OfferGone) => (None, false),
            _ => (Some(CreateMode::Plain), false),
        };
        let created = match (mode, host) {
            (Some(mode), Some(host)) => Some(self.create_lease(request, host, mode)),
            _ => None,
        };
        self.observe(Observation::CreateReceived {
            nonce: request.nonce,
            created: created.as_ref(),
        });
        if let Some(f) = fault {
            let item = conformance::case::Item::Op {
                op: OpKind::Create,
                nth,
                fault: f,
            };
            self.injected(conformance::fault::name_of(&item));
        }
        let result = match (fault, created) {
            (Some(f @ (OpFault::RateLimited | OpFault::ServerError)), _) => {
                Err(self.provider_blip(OpKind::Create, f))
            }
            (Some(OpFault::OfferGone), _) => Err(ProviderError {
                kind: ProviderErrorKind::Rejected,
                message: "404 no_such_ask".to_owned(),
            }),
            _ if answer_lost => Err(ProviderError {
                kind: ProviderErrorKind::Ambiguous,
                message: "connection dropped before the answer".to_owned(),
            }),
            (_, None) => Err(ProviderError {
                kind: ProviderErrorKind::Rejected,
                message: "no offer fits".to_owned(),
            }),
            (_, Some(lease)) => {
                let endpoint = self
                    .case
                    .profile
                    .endpoint_on_create
                    .then(|| {
                        self.provider
                            .get(&lease.lease_id)
                            .map(super::provider::Provider::endpoint)
                    })
                    .flatten();
                Ok(core_fsm::port::LeaseGranted {
                    lease: lease.into(),
                    endpoint,
                })
            }
        };
        self.note(|| {
            format!(
                "provider: create {} {} -> {}",
                request.node,
                request.nonce,
                match &result {
                    Ok(g) => g.lease.lease_id.to_string(),
                    Err(e) => format!("{:?}", e.kind),
                }
            )
        });
        self.answer(
            OpKind::Create,
            nth,
            vec![Input::LeaseCreated { op, result }],
            Duration::from_millis(1_000),
        );
    }

    fn create_lease(
        &mut self,
        request: &CreateLeaseRequest,
        host: u32,
        mode: CreateMode,
    ) -> LeaseFacts {
        let ordinal = self.provider.next_ordinal();
        let lease_faults: Vec<LeaseFault> = if self.faulty() {
            self.faults.lease.get(&ordinal).cloned().unwrap_or_default()
        } else {
            Vec::new()
        };
        for f in &lease_faults {
            let item = conformance::case::Item::Lease {
                nth: ordinal,
                fault: *f,
            };
            if !conformance::fault::is_agent_fault(f) {
                self.injected(conformance::fault::name_of(&item));
            }
        }
        let host_fault = self.faults.host.get(&host).copied();
        if host_fault.is_some() {
            self.injected("bad-host");
        }
        let profile = &self.case.profile;
        self.provider.create(
            self.now,
            profile,
            request,
            host,
            mode,
            &lease_faults,
            host_fault,
        )
    }

    fn lookup(&mut self, op: OpId, lease: &LeaseFacts) {
        let nth = self.ordinal(OpKind::Lookup);
        let result = match self.op_fault(OpKind::Lookup, nth) {
            Some(f) => Err(self.provider_blip(OpKind::Lookup, f)),
            None => Ok(self.provider.lookup(&lease.lease_id, self.now)),
        };
        self.answer(
            OpKind::Lookup,
            nth,
            vec![Input::EndpointLooked { op, result }],
            Duration::ZERO,
        );
    }

    fn destroy(&mut self, op: OpId, lease: &LeaseFacts) {
        let nth = self.ordinal(OpKind::Destroy);
        let result = match self.op_fault(OpKind::Destroy, nth) {
            Some(f) => Err(self.provider_blip(OpKind::Destroy, f)),
            None => {
                let r = self.provider.destroy(&lease.lease_id);
                if r.is_ok() {
                    self.observe(Observation::LeaseGone(&lease.lease_id));
                    self.note(|| format!("provider: destroyed {}", lease.lease_id));
                }
                r
            }
        };
        self.answer(
            OpKind::Destroy,
            nth,
            vec![Input::LeaseDestroyed { op, result }],
            Duration::from_millis(500),
        );
    }
}
