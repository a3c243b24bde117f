//! The run world's shared state: what lives outside every simulated node
//! and survives their deaths (the oracle, the digest, the coverage, each
//! stage's slot), behind one lock that is never held across an `await`.

use conformance::Violation;
use conformance::coverage::Coverage;
use conformance::run::{RunCase, RunFault};
use core_fsm::agent;
use core_fsm::digest::Digest;
use core_fsm::ids::LeaseId;
use core_fsm::pipeline;
use core_fsm::port::{self, JournalRecord, LeaseFacts};
use sim::run_world::kit::RunOracle;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedSender;

/// Steps after which a run is declared runaway (as in tier 1).
pub const STEP_MAX: u64 = 200_000;

/// The orchestrator's address.
pub const ORCHESTRATOR_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// The control plane's port on the orchestrator.
pub const CONTROL_PORT: u16 = 7000;
/// The token-out edge's port on the orchestrator.
pub const TOKEN_PORT: u16 = 7001;
/// The inbound activation edge's port on every agent.
pub const EDGE_PORT: u16 = 7100;

/// The address of stage `stage`'s agent of generation `generation`.
pub fn agent_ip(stage: u32, generation: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        10,
        2,
        stage as u8,
        (generation % 250 + 1) as u8,
    ))
}

/// A pipeline input, as the composite takes it.
pub fn pipe(input: pipeline::Input) -> port::Input {
    port::Input::Pipeline(Box::new(input))
}

/// What a node asks of the supervisor (who holds the madsim handles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// Kill stage `stage`'s agent of generation `generation` (a death
    /// fault, the drill, or a Dead verdict whose lease is destroyed).
    Kill {
        /// The stage.
        stage: u32,
        /// Its agent's generation.
        generation: u32,
    },
    /// Start stage `stage`'s agent for lease `lease` (a start command
    /// carrying its join binding): a new node with a new identity; a
    /// live agent of the stage's node is killed first.
    Boot {
        /// The stage.
        stage: u32,
        /// The lease the agent runs on.
        lease: LeaseId,
    },
    /// Kill the orchestrator now and start it again a little later.
    CrashOrchestrator,
    /// Incarnation `inc`'s prompt service is open: its clients submit.
    Serving {
        /// The orchestrator's incarnation.
        inc: u32,
    },
}

/// One stage's node as the world knows it.
#[derive(Clone, Debug)]
pub struct Slot {
    /// 0 for the first agent, one more per start command.
    pub generation: u32,
    /// Agents started for the stage so far.
    pub starts: u32,
    /// The lease the current agent runs on.
    pub lease: Option<LeaseId>,
    /// The agent's pipeline side, started again on each rejoin.
    pub incarnation: u32,
    /// Whether the agent's node runs.
    pub alive: bool,
    /// The agent machine after its last step (for the end checks).
    pub agent: Option<agent::Machine>,
    /// Steps the current agent generation executed.
    pub stage_steps: u64,
}

/// Everything the nodes and the supervisor share.
pub struct State {
    /// The case.
    pub case: RunCase,
    /// The faults by kind: (target, argument).
    pub faults: BTreeMap<RunFault, Vec<(u32, u64)>>,
    /// Faults that strike once and have struck.
    pub fired: BTreeSet<RunFault>,
    /// The oracle (tier 1's).
    pub oracle: RunOracle,
    /// The digest of every transition so far.
    pub digest: Digest,
    /// The digest after each step.
    pub step_digests: Vec<u64>,
    /// Steps so far, every machine.
    pub step: u64,
    /// The time of the last step, in ms.
    pub now_ms: u64,
    /// Phases, labels and faults seen.
    pub coverage: Coverage,
    /// Transcript lines, when asked for.
    pub transcript: Option<Vec<String>>,
    /// The first broken invariant.
    pub violation: Option<Violation>,
    /// The orchestrator's incarnation (1 for the first).
    pub inc: u32,
    /// The current incarnation's inbox.
    pub inbox: Option<UnboundedSender<port::Input>>,
    /// The composite's pipeline host after its last step.
    pub host: Option<pipeline::Machine>,
    /// The orchestrator's journal (the driver's disk), for its restart.
    pub journal: Vec<JournalRecord>,
    /// The simulated provider's leases, by id: the stage each was
    /// created for, its facts, and whether it is destroyed.
    pub leases: BTreeMap<LeaseId, (u32, LeaseFacts, bool)>,
    /// Creates asked for replacements (a stage's create after its first).
    pub replacement_creates: u32,
    /// Each replacement lease's place among them (from 0).
    pub replacement_leases: BTreeMap<LeaseId, u32>,
    /// Each stage's node.
    pub slots: Vec<Slot>,
    /// Steps executed, every stage (the step faults' index).
    pub steps_executed: u32,
    /// Clients that submitted.
    pub submitted: u32,
    /// Whether the operator's stop was sent in this incarnation.
    pub shutdown_sent: bool,
    /// When the run reached its terminal phase, in ms.
    pub ended_at: Option<u64>,
    /// Whether the fault phase is over.
    pub healed: bool,
    /// The supervisor's channel.
    pub control: Option<UnboundedSender<Control>>,
}

impl State {
    /// Whether `fault` is planned for `target`; its argument if so.
    pub fn planned(&self, fault: RunFault, target: u32) -> Option<u64> {
        self.faults
            .get(&fault)?
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, a)| *a)
    }

    /// Whether a fault keyed on the run's step count strikes at step `nth`
    /// (tier 1's rule, `kit::due_once`).
    pub fn due_once(&mut self, fault: RunFault, nth: u32) -> bool {
        sim::run_world::kit::due_once(&self.faults, &mut self.fired, fault, nth)
    }

    /// `fault` strikes: the oracle and the transcript hear of it.
    pub fn inject(&mut self, fault: RunFault) {
        self.oracle.injected.insert(fault.name());
        let at = self.now_ms;
        self.note(at, &format!("fault: {}", fault.name()));
    }

    /// A transcript line.
    pub fn note(&mut self, at_ms: u64, text: &str) {
        if let Some(t) = self.transcript.as_mut() {
            t.push(format!("{at_ms:>8} {text}"));
        }
    }

    /// Folds `what` into the digest (and the transcript).
    pub fn record<T: std::fmt::Debug>(&mut self, at_ms: u64, who: &str, what: &T) {
        self.digest.update_debug(&(at_ms, who, what));
        if let Some(t) = self.transcript.as_mut() {
            t.push(format!("{at_ms:>8} {who} {what:?}"));
        }
    }

    /// Records the first broken invariant.
    pub fn violate(&mut self, id: &'static str, message: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                id,
                step: self.step,
                at_ms: self.now_ms,
                message,
            });
        }
    }

    /// Asks the supervisor for `control`.
    pub fn ask(&self, control: Control) {
        if let Some(tx) = &self.control {
            let _ = tx.send(control);
        }
    }

    /// Sends `input` to the current orchestrator's pipeline host, if it
    /// runs.
    pub fn to_host(&self, input: pipeline::Input) {
        self.to_orchestrator(pipe(input));
    }

    /// Sends `input` to the current orchestrator, if it runs.
    pub fn to_orchestrator(&self, input: port::Input) {
        if let Some(tx) = &self.inbox {
            let _ = tx.send(input);
        }
    }

    /// The stage whose node is `node`.
    pub fn stage_of(&self, node: &core_fsm::ids::LogicalNodeId) -> Option<u32> {
        (0..self.slots.len() as u32).find(|s| sim::run_world::node_id(*s) == *node)
    }
}

/// The shared state and the supervisor's wake-up.
pub struct Shared {
    state: Mutex<State>,
    /// Notified after every step.
    pub wake: Notify,
}

impl Shared {
    /// Shares `state`.
    pub fn new(state: State) -> Shared {
        Shared {
            state: Mutex::new(state),
            wake: Notify::new(),
        }
    }

    /// The state (a panic elsewhere never poisons the world for good).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
