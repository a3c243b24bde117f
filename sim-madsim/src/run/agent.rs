//! A stage's node: `driver::Driver` over `core_fsm::agent`, with the
//! effect side of `runtime-real/src/pipeline/node.rs`: the control
//! connection to the orchestrator (dialed again after it breaks, and then
//! the pipeline side starts afresh, as `transport/agent.rs` restarts it on
//! a rejoin), the worker child ([`super::worker`]), the edges.

use super::net::{EdgeOpen, Inbox, Msg, dial, send};
use super::seen::AgentSeen;
use super::shared::{
    CONTROL_PORT, Control, EDGE_PORT, ORCHESTRATOR_IP, Shared, TOKEN_PORT, agent_ip,
};
use super::worker::{self, Job, WorkerHandle};
use crate::orch::SimClock;
use conformance::run::RunFault;
use core_fsm::agent::{self, Effect, Input, Report};
use core_fsm::ids::LeaseId;
use core_fsm::pipeline;
use core_fsm::stage::{self, Provision};
use core_fsm::time::Instant;
use driver::{Clock as _, Driver, EffectSink, NoJournal, Ports};
use madsim::net::{Endpoint, Receiver, Sender};
use madsim::task::JoinHandle;
use sim::run_world::kit::{Frame, agent_config, boot_inputs, run_input};
use sim::run_world::{agent_id_of, node_id};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// How long a dial of the next stage keeps trying (`edges::DIAL_FOR`).
const DIAL_FOR: Duration = Duration::from_secs(30);
/// The pause between two dials of the control plane.
const REJOIN: Duration = Duration::from_millis(500);

/// One pipeline side of the agent (one per control connection).
pub(super) struct Side {
    pub(super) stage: u32,
    pub(super) shared: Arc<Shared>,
    pub(super) clock: SimClock,
    pub(super) tx: UnboundedSender<Input>,
    host: Sender,
    pub(super) st: RefCell<SideState>,
    tasks: RefCell<Vec<JoinHandle<()>>>,
}

#[derive(Default)]
pub(super) struct SideState {
    pub(super) worker: Option<WorkerHandle>,
    pub(super) order: Option<Provision>,
    pub(super) fetched_at: Option<Instant>,
    pub(super) pending: BTreeMap<u64, Frame>,
    claiming: bool,
    reader: Option<u64>,
    arrived: Option<(Receiver, Option<u32>)>,
    pub(super) outbound: Option<Sender>,
    conns: u64,
}

type Current = Rc<RefCell<Option<Rc<Side>>>>;

/// Runs stage `stage`'s agent of generation `generation`, started on
/// lease `lease`, until its node is killed.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    clock: SimClock,
    stage: u32,
    generation: u32,
    lease: LeaseId,
) {
    let edges = Endpoint::bind((std::net::Ipv4Addr::UNSPECIFIED, EDGE_PORT))
        .await
        .expect("the edge port is free on a fresh node");
    let current: Current = Rc::default();
    madsim::task::spawn_local(accept_edges(edges, Rc::clone(&current)));
    let mut first = true;
    loop {
        let (host, mut control) = join(stage, generation, &lease).await;
        let incarnation = {
            let mut w = shared.lock();
            let slot = &mut w.slots[stage as usize];
            if !std::mem::replace(&mut first, false) {
                slot.incarnation += 1;
            }
            slot.incarnation
        };
        let (tx, rx) = unbounded_channel();
        let side = Rc::new(Side {
            stage,
            shared: Arc::clone(&shared),
            clock,
            tx: tx.clone(),
            host,
            st: RefCell::default(),
            tasks: RefCell::default(),
        });
        *current.borrow_mut() = Some(Rc::clone(&side));
        let machine = AgentSeen {
            machine: agent::Machine::new(agent_config(stage, generation), clock.now()),
            shared: Arc::clone(&shared),
            stage,
            generation,
            incarnation,
        };
        let ports = Ports {
            clock,
            source: Inbox { rx, clock },
            disk: NoJournal,
            sink: AgentSink(Rc::clone(&side)),
        };
        for input in boot_inputs(stage) {
            let _ = tx.send(input);
        }
        let effect_loop = madsim::task::spawn_local(async move {
            let _ = Driver::new(machine, ports).run_until(|_| false).await;
        });
        while let Ok(payload) = control.recv().await {
            if let Ok(msg) = payload.downcast::<Msg>()
                && let Msg::ToAgent(input) = *msg
            {
                side.heard(input);
            }
        }
        // The orchestrator is gone: this pipeline side ends with its
        // worker and edges; the next connection starts a new one.
        effect_loop.abort();
        side.end();
        *current.borrow_mut() = None;
    }
}

/// Dials the orchestrator's control plane until it answers, and says who
/// this agent is and on which lease it runs.
async fn join(stage: u32, generation: u32, lease: &LeaseId) -> (Sender, Receiver) {
    let to = SocketAddr::new(ORCHESTRATOR_IP, CONTROL_PORT);
    loop {
        if let Ok(ep) = Endpoint::bind("0.0.0.0:0").await
            && let Ok((sender, receiver)) = ep.connect1(to).await
        {
            let hello = Msg::Hello {
                stage,
                node: node_id(stage),
                lease_id: lease.clone(),
                agent: agent_id_of(stage, generation),
            };
            if send(&sender, hello) {
                return (sender, receiver);
            }
        }
        madsim::time::sleep(REJOIN).await;
    }
}

/// Inbound edges: each waits, under who dialed it, until the stage claims
/// it; a newer one replaces an unclaimed older one.
async fn accept_edges(ep: Endpoint, current: Current) {
    while let Ok((_sender, mut receiver, _)) = ep.accept1().await {
        let Ok(first) = receiver.recv().await else {
            continue;
        };
        let Ok(open) = first.downcast::<EdgeOpen>() else {
            continue;
        };
        let side = current.borrow().clone();
        if let Some(side) = side {
            side.arrived(receiver, open.from);
        }
    }
}

impl Side {
    /// Spawns a task that ends with this side.
    pub(super) fn spawn(&self, task: impl std::future::Future<Output = ()> + 'static) {
        self.tasks
            .borrow_mut()
            .push(madsim::task::spawn_local(task));
    }

    fn end(&self) {
        for task in self.tasks.borrow_mut().drain(..) {
            task.abort();
        }
        let mut st = self.st.borrow_mut();
        if let Some(w) = st.worker.take() {
            w.task.abort();
        }
        st.outbound = None;
        st.arrived = None;
        st.reader = None;
    }

    /// Stage `self.stage`'s machinery answers.
    pub(super) fn answer(&self, input: stage::Input) {
        let _ = self.tx.send(Input::Stage {
            stage: self.stage,
            input,
        });
    }

    fn to_host(&self, input: pipeline::Input) {
        let _ = send(&self.host, Msg::ToHost(input));
    }

    /// Asks the supervisor to kill this node (a death fault).
    pub(super) fn die(&self, fault: RunFault) {
        let mut w = self.shared.lock();
        w.inject(fault);
        let generation = w.slots[self.stage as usize].generation;
        w.ask(Control::Kill {
            stage: self.stage,
            generation,
        });
    }

    fn heard(&self, input: Input) {
        let s = self.stage;
        match &input {
            Input::ReadyAck { .. } => {
                let dies = self.shared.lock().planned(RunFault::AgentDiesBeforeLoad, s);
                if dies.is_some() {
                    return self.die(RunFault::AgentDiesBeforeLoad);
                }
            }
            Input::Provision { provision, .. } => {
                let fetch = self.shared.lock().case.profile.fetch_ms;
                let mut st = self.st.borrow_mut();
                st.order = Some(provision.clone());
                let at = self.clock.now() + core_fsm::time::Duration::from_millis(fetch);
                st.fetched_at.get_or_insert(at);
            }
            _ => {}
        }
        let _ = self.tx.send(input);
    }

    fn arrived(self: &Rc<Self>, receiver: Receiver, from: Option<u32>) {
        let claim = {
            let st = self.st.borrow();
            st.claiming && st.reader.is_none()
        };
        if claim {
            self.claim(receiver, from);
        } else {
            self.st.borrow_mut().arrived = Some((receiver, from));
        }
    }

    /// The stage takes an inbound connection, if it comes from upstream.
    fn claim(self: &Rc<Self>, mut receiver: Receiver, from: Option<u32>) {
        let expected = self.stage.checked_sub(1);
        if from != expected {
            let reason = format!("edge came from {from:?}, not the upstream stage");
            return self.answer(stage::Input::EdgeFault { reason });
        }
        let conn = {
            let mut st = self.st.borrow_mut();
            st.conns += 1;
            st.reader = Some(st.conns);
            st.conns
        };
        self.answer(stage::Input::InboundReady);
        let side = Rc::clone(self);
        self.spawn(async move {
            while let Ok(payload) = receiver.recv().await {
                if side.st.borrow().reader != Some(conn) {
                    return;
                }
                if let Ok(frame) = payload.downcast::<Frame>()
                    && let Frame::Step { step, .. } = *frame
                {
                    side.st.borrow_mut().pending.insert(step, *frame);
                    side.answer(stage::Input::StepArrived { seq: step });
                }
            }
            let mut st = side.st.borrow_mut();
            if st.reader == Some(conn) {
                st.reader = None;
                drop(st);
                let reason = "the inbound edge closed".to_owned();
                side.answer(stage::Input::EdgeFault { reason });
            }
        });
    }
}

/// The agent's effect side.
struct AgentSink(Rc<Side>);

impl EffectSink<Effect> for AgentSink {
    async fn dispatch(&mut self, _now: Instant, effect: Effect) {
        let side = &self.0;
        match effect {
            Effect::SpawnWorker { op } => worker::spawn(side, op),
            Effect::Boot(_) => {}
            Effect::Heartbeat { node, agent } => {
                let beat = core_fsm::membership::Input::Heartbeat { node, agent };
                side.to_host(pipeline::Input::Membership(beat));
            }
            Effect::Report(report) => side.report(report),
            Effect::Stage { effect, .. } => side.stage_effect(effect),
        }
    }
}

impl Side {
    fn report(&self, report: Report) {
        let loaded = matches!(report, Report::Stage(stage::Report::WeightsReady { .. }));
        self.to_host(run_input(report.into()));
        let dies = self
            .shared
            .lock()
            .planned(RunFault::AgentDiesLoaded, self.stage);
        if loaded && dies.is_some() {
            self.die(RunFault::AgentDiesLoaded);
        }
    }

    fn stage_effect(self: &Rc<Self>, effect: stage::Effect) {
        match effect {
            stage::Effect::EstablishInbound(_) => {
                let arrived = {
                    let mut st = self.st.borrow_mut();
                    st.claiming = true;
                    st.arrived.take()
                };
                if let Some((receiver, from)) = arrived {
                    self.claim(receiver, from);
                }
            }
            stage::Effect::EstablishOutbound(edge) => self.dial_outbound(edge.id),
            stage::Effect::ConfigureWorker { .. } => self.answer(stage::Input::WorkerReady),
            stage::Effect::LoadWeights { .. } => {
                let dies = self
                    .shared
                    .lock()
                    .planned(RunFault::AgentDiesLoading, self.stage);
                if dies.is_some() {
                    return self.die(RunFault::AgentDiesLoading);
                }
                worker::submit(self, Job::Load);
            }
            stage::Effect::ExecuteStep { seq } => worker::execute(self, seq),
            stage::Effect::Report(report) => self.report(Report::Stage(report)),
            stage::Effect::StopLocalEdges => {
                {
                    let mut st = self.st.borrow_mut();
                    st.claiming = false;
                    // Dropping the sender ends the stream; a dropped reader
                    // fails the sender's next write.
                    st.outbound = None;
                    st.reader = None;
                    st.arrived = None;
                    st.pending.clear();
                }
                self.answer(stage::Input::LocalEdgesStopped);
            }
            stage::Effect::QuiesceRings => self.answer(stage::Input::RingsQuiesced),
            stage::Effect::ReleaseDeviceObjects => self.answer(stage::Input::DeviceObjectsReleased),
            // The worker keeps its process and its slice (`node/sink.rs`).
            stage::Effect::ResetWorkerRole => self.answer(stage::Input::WorkerRoleReset),
        }
    }

    /// Dials the next stage's agent, or the orchestrator's token-out from
    /// the last stage.
    fn dial_outbound(self: &Rc<Self>, edge: u32) {
        let to = {
            let w = self.shared.lock();
            let next = self.stage + 1;
            match w.slots.get(next as usize) {
                Some(slot) => SocketAddr::new(agent_ip(next, slot.generation), EDGE_PORT),
                None => SocketAddr::new(ORCHESTRATOR_IP, TOKEN_PORT),
            }
        };
        let side = Rc::clone(self);
        self.spawn(async move {
            let open = EdgeOpen {
                from: Some(side.stage),
            };
            let dialed = dial(to, open, DIAL_FOR).await;
            match dialed {
                Some(sender) => {
                    side.st.borrow_mut().outbound = Some(sender);
                    side.answer(stage::Input::OutboundReady);
                }
                None => {
                    let reason = format!("dialing edge {edge}: unreachable");
                    side.answer(stage::Input::EdgeFault { reason });
                }
            }
        });
    }
}
