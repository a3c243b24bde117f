//! The orchestrator's node: `driver::Driver` over the orchestrator
//! composite (`core_fsm::orchestrator`), which owns the pipeline host (run
//! and membership), as `drover up` drives it: `Start` brings the plan's
//! nodes up through the provisioning effects ([`provision`]), each stage's
//! agent joins on its node's lease, and once the composite is settled with
//! every node ready the run begins. The pipeline's effects are carried out
//! as `runtime-real/src/pipeline/host.rs` does: a control connection per
//! agent (its join an `AgentJoined`, its end reported), the token edges,
//! the prompt service. A restart runs [`incarnation`] again: the composite
//! is restored from its journal, the agents rejoin, the run begins afresh.

mod accept;
mod provision;

use super::net::{EdgeOpen, Inbox, Msg, dial, send};
use super::seen::HostSeen;
use super::shared::{CONTROL_PORT, Control, EDGE_PORT, Shared, TOKEN_PORT, agent_ip, pipe};
use crate::orch::SimClock;
use conformance::run::RunFault;
use core_fsm::agent;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::membership;
use core_fsm::orchestrator::Orchestrator;
use core_fsm::pipeline::{self, Effect};
use core_fsm::port;
use core_fsm::run::{self, RequestId, TokenEndpoint};
use core_fsm::time::Instant;
use driver::{Driver, EffectSink, Ports};
use madsim::net::{Endpoint, Sender};
use sim::run_world::kit::{Frame, prefill_chunks};
use sim::run_world::{RUN, model, orchestrator_id};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// How long a dial of an edge may take.
const DIAL_FOR: Duration = Duration::from_secs(10);

/// One joined agent's control connection.
struct Joined {
    agent: AgentId,
    conn: u64,
    sender: Rc<Sender>,
}

/// The host side's I/O state.
#[derive(Default)]
struct Io {
    agents: BTreeMap<u32, Joined>,
    conns: u64,
    token_in: Option<Rc<Sender>>,
    token_out_open: bool,
    token_out: Option<u64>,
    next_step: u64,
}

type Shelf = Rc<RefCell<Io>>;

/// Runs one incarnation of the orchestrator until its node is killed.
pub(crate) async fn incarnation(shared: Arc<Shared>, clock: SimClock) {
    let (tx, rx) = unbounded_channel();
    let (inc, config, journal, hop) = {
        let mut w = shared.lock();
        w.inc += 1;
        if w.inc > 1 {
            w.oracle.orchestrator_crashed();
            w.shutdown_sent = false;
        }
        w.inbox = Some(tx.clone());
        w.host = None;
        let at = clock_ms(clock);
        let line = format!("world: orchestrator #{} starts", w.inc);
        w.note(at, &line);
        let p = &w.case.profile;
        let journal = (w.inc > 1).then(|| w.journal.clone());
        let hop = Duration::from_millis((p.latency_ms / 2).max(1));
        (w.inc, provision::config(p), journal, hop)
    };
    let built = catch_unwind(AssertUnwindSafe(|| match &journal {
        None => Orchestrator::new(config),
        Some(records) => Orchestrator::restore(config, records),
    }));
    let composite = match built {
        Ok(composite) => composite,
        Err(panic) => {
            let message = format!(
                "the composite's restore panicked: {}",
                conformance::backend::panic_text(&*panic)
            );
            shared.lock().violate("RW0", message);
            shared.wake.notify_one();
            return std::future::pending().await;
        }
    };
    let io: Shelf = Rc::default();
    let control = Endpoint::bind((std::net::Ipv4Addr::UNSPECIFIED, CONTROL_PORT))
        .await
        .expect("the control port is free on a fresh node");
    let tokens = Endpoint::bind((std::net::Ipv4Addr::UNSPECIFIED, TOKEN_PORT))
        .await
        .expect("the token port is free on a fresh node");
    madsim::task::spawn_local(accept::accept_agents(control, Rc::clone(&io), tx.clone()));
    madsim::task::spawn_local(accept::accept_token_out(
        Arc::clone(&shared),
        tokens,
        Rc::clone(&io),
        tx.clone(),
    ));
    let sink = HostSink {
        shared: Arc::clone(&shared),
        io,
        tx: tx.clone(),
        inc,
        hop,
    };
    let machine = HostSeen {
        machine: composite,
        shared: Arc::clone(&shared),
        inc,
        begun: false,
    };
    let ports = Ports {
        clock,
        source: Inbox { rx, clock },
        disk: provision::Journal(Arc::clone(&shared)),
        sink,
    };
    let _ = tx.send(port::Input::Start);
    let _ = Driver::new(machine, ports).run_until(|_| false).await;
    std::future::pending::<()>().await;
}

fn clock_ms(clock: SimClock) -> u64 {
    use driver::Clock as _;
    clock.now().as_millis()
}

/// The host's effect side.
struct HostSink {
    shared: Arc<Shared>,
    io: Shelf,
    tx: UnboundedSender<port::Input>,
    inc: u32,
    /// How long a provisioning answer takes.
    hop: Duration,
}

impl EffectSink for HostSink {
    async fn dispatch(&mut self, _now: Instant, effect: port::Effect) {
        match effect {
            port::Effect::Pipeline(effect) => self.pipeline(*effect),
            other => self.provision(other),
        }
    }
}

impl HostSink {
    /// Carries out a pipeline host's effect.
    fn pipeline(&mut self, effect: Effect) {
        let effect = match effect {
            Effect::Liveness {
                node,
                agent,
                liveness,
            } => {
                if liveness == membership::Liveness::Dead {
                    self.dead(&node, &agent);
                }
                return;
            }
            // The drill: the agent exits at once (`transport/agent.rs`).
            Effect::KillAgent { node, agent } => return self.dead(&node, &agent),
            Effect::Run(effect) => effect,
        };
        let from = orchestrator_id();
        match effect {
            run::Effect::SendReadyAck {
                node,
                agent,
                run_id,
                stage,
                readiness_id,
            } => {
                let ack = agent::Input::ReadyAck {
                    from,
                    run_id,
                    readiness_id,
                };
                self.control(&node, stage, Some(&agent), ack);
            }
            run::Effect::ProvisionStage {
                node,
                agent,
                provision,
            } => {
                let s = provision.stage;
                let (lost, twice) = {
                    let mut w = self.shared.lock();
                    let lost = w.planned(RunFault::ProvisionLost, s).is_some();
                    let twice = w.planned(RunFault::ProvisionDuplicated, s).is_some();
                    if lost {
                        w.inject(RunFault::ProvisionLost);
                    } else if twice {
                        w.inject(RunFault::ProvisionDuplicated);
                    }
                    (lost, twice)
                };
                if lost {
                    return;
                }
                let order = agent::Input::Provision { from, provision };
                if twice {
                    self.control(&node, s, Some(&agent), order.clone());
                }
                self.control(&node, s, Some(&agent), order);
            }
            run::Effect::StopStage { node, stage } => {
                let stop = agent::Input::StopStage {
                    from,
                    run_id: RUN,
                    stage,
                };
                self.control(&node, stage, None, stop);
            }
            run::Effect::OpenTokenEndpoints => self.open_token_endpoints(),
            run::Effect::OpenPromptService { op } => {
                let opened = run::Input::PromptServiceOpened { op, result: Ok(()) };
                let _ = self.tx.send(pipe(pipeline::Input::Run(opened)));
                self.shared.lock().ask(Control::Serving { inc: self.inc });
            }
            run::Effect::Inject {
                request,
                seq,
                pos,
                tokens,
            } => self.inject(request, seq, pos, &tokens),
            run::Effect::CloseTokenEndpoints => {
                let mut io = self.io.borrow_mut();
                io.token_in = None;
                io.token_out = None;
                io.token_out_open = false;
                let closed = run::Input::TokenEndpointsClosed { run_id: RUN };
                let _ = self.tx.send(pipe(pipeline::Input::Run(closed)));
            }
            run::Effect::Enlist { stage, agent, .. } => {
                let mut w = self.shared.lock();
                let slot = &w.slots[stage as usize];
                let current =
                    slot.alive && agent == sim::run_world::agent_id_of(stage, slot.generation);
                let label = match (current, slot.generation) {
                    (false, _) => "run:enlist/stale",
                    (true, 0) => "run:enlist/first",
                    (true, _) => "run:enlist/replacement",
                };
                w.coverage.labels.insert(label.to_owned());
            }
            run::Effect::Repaired { resumed, .. } => {
                let label = sim::run_world::kit::repaired_label(resumed);
                self.shared.lock().coverage.labels.insert(label.to_owned());
            }
            // Observational: the oracle saw them.
            run::Effect::Repairing { .. }
            | run::Effect::Prompt { .. }
            | run::Effect::Finished(_) => {}
        }
    }

    /// A Dead agent's node is gone for good (the composite fails it, and
    /// destroys its lease when it replaces it); the drill kills it too.
    fn dead(&self, node: &LogicalNodeId, agent: &AgentId) {
        let w = self.shared.lock();
        if let Some(stage) = w.stage_of(node) {
            let slot = &w.slots[stage as usize];
            let generation = slot.generation;
            if slot.alive && *agent == sim::run_world::agent_id_of(stage, generation) {
                w.ask(Control::Kill { stage, generation });
            }
        }
    }

    /// A control frame to stage `stage`'s joined agent (`to`, when given,
    /// must be it); a send that cannot be made fails at once.
    fn control(&self, node: &LogicalNodeId, stage: u32, to: Option<&AgentId>, input: agent::Input) {
        let io = self.io.borrow();
        let joined = io
            .agents
            .get(&stage)
            .filter(|j| to.is_none_or(|a| *a == j.agent));
        let sent = joined.is_some_and(|j| send(&j.sender, Msg::ToAgent(input)));
        if !sent {
            let reason = "the agent is not connected".to_owned();
            let failed = run::Input::SendFailed {
                node: node.clone(),
                reason,
            };
            let _ = self.tx.send(pipe(pipeline::Input::Run(failed)));
        }
    }

    /// Accepts the last stage's token-out and dials stage 0 for token-in.
    fn open_token_endpoints(&self) {
        {
            let mut io = self.io.borrow_mut();
            io.next_step = 0;
            io.token_out_open = true;
            io.token_in = None;
        }
        let generation = self.shared.lock().slots[0].generation;
        let (io, tx) = (Rc::clone(&self.io), self.tx.clone());
        madsim::task::spawn_local(async move {
            let to = SocketAddr::new(agent_ip(0, generation), EDGE_PORT);
            let input = match dial(to, EdgeOpen { from: None }, DIAL_FOR).await {
                Some(sender) => {
                    io.borrow_mut().token_in = Some(Rc::new(sender));
                    run::Input::TokenEndpointReady {
                        run_id: RUN,
                        endpoint: TokenEndpoint::In,
                    }
                }
                None => run::Input::EndpointFault {
                    run_id: RUN,
                    reason: "dialing edge 0: unreachable".to_owned(),
                },
            };
            let _ = tx.send(pipe(pipeline::Input::Run(input)));
        });
    }

    /// A prompt (or a fed-back token) to stage 0, in chunks.
    fn inject(&self, request: RequestId, seq: u64, pos: u32, tokens: &[u32]) {
        let mut io = self.io.borrow_mut();
        let chunks = prefill_chunks(tokens.len());
        let count = chunks.len();
        let mut at = 0;
        let mut sent = true;
        for (i, len) in chunks.into_iter().enumerate() {
            let frame = Frame::Step {
                step: io.next_step,
                request: request.0,
                seq,
                pos: pos + at as u32,
                rows: tokens[at..at + len]
                    .iter()
                    .map(|t| model::embed(*t))
                    .collect(),
                last: i + 1 == count,
            };
            io.next_step += 1;
            at += len;
            sent = sent && io.token_in.as_ref().is_some_and(|s| send(s, frame));
        }
        if !sent {
            let reason = "the token-in edge is closed".to_owned();
            let fault = run::Input::EndpointFault {
                run_id: RUN,
                reason,
            };
            let _ = self.tx.send(pipe(pipeline::Input::Run(fault)));
        }
    }
}
