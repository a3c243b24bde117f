//! The agent composite on a node: boot readiness (SPEC.md "Node boot readiness", [`crate::boot`]),
//! the node's stage controllers by stage index ([`crate::stage`], SPEC.md "The stage
//! controller") and supervision of the worker process.
//!
//! The agent owns one worker process. It asks for it once, on start; the
//! worker's readiness is the boot's worker fact, and its crash (with the
//! supervisor's reason) is reported to the boot and becomes a worker-crash
//! fault in every stage controller. The agent never restarts a worker: a
//! crash is reported and the run decides (SPEC.md "Node manager": nothing repairs a
//! node after handoff).
//!
//! Once boot says the node may accept provisioning, the agent reports its
//! runtime as ready to the orchestrator (resent, bounded, until
//! acknowledged), answers every acknowledgement, heartbeats for the
//! membership, and routes provisions, stage facts and stops to the stage
//! controllers, creating one per provisioned stage index (bounded). A
//! provision for a stage whose controller has stopped (a repair rebuilds
//! the pipeline) starts a new controller life on the same worker.

mod transitions;

use crate::boot;
use crate::ids::{AgentId, LogicalNodeId, OpId, RunId};
use crate::stage::{self, StageIndex};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the agent is and whom it obeys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The boot policy; its node is the agent's node.
    pub boot: boot::Config,
    /// The run the node joined for.
    pub run_id: RunId,
    /// The agent's own control-plane identity.
    pub agent: AgentId,
    /// The only orchestrator identity the agent obeys.
    pub orchestrator: AgentId,
    /// The stage the plan assigned to this node (named in readiness reports).
    pub stage: StageIndex,
    /// Most stage controllers on the node.
    pub stages_max: usize,
    /// Interval between runtime-ready reports until one is acknowledged.
    pub ready_resend_interval: Duration,
    /// Runtime-ready reports sent at most, the first included.
    pub ready_reports_max: u32,
    /// Interval between heartbeats while the node is available.
    pub heartbeat_interval: Duration,
    /// Each stage controller's stop-step timeout.
    pub stop_step_timeout: Duration,
    /// Each stage controller's inbound ring (steps that may wait).
    pub stage_ring: u64,
}

/// The agent's own state: its worker process. Boot and the stage controllers
/// hold theirs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Not started yet.
    Idle,
    /// The worker process was asked for.
    Spawning {
        /// The spawn operation.
        op: OpId,
    },
    /// The worker process runs but has not said it is ready.
    Starting {
        /// The spawn operation.
        op: OpId,
    },
    /// The worker process is ready.
    Running {
        /// The spawn operation.
        op: OpId,
    },
    /// The worker process failed to start or crashed. Only a repair's new
    /// provision of a stopped stage starts another.
    Gone {
        /// Why, as the supervisor saw it.
        reason: String,
    },
}

/// The node's readiness report to the orchestrator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Readiness {
    /// Not reported: boot does not allow provisioning yet.
    Unreported,
    /// Reported, not acknowledged yet.
    Reporting {
        /// The report's id.
        readiness_id: u64,
        /// Reports sent so far.
        sent: u32,
    },
    /// Acknowledged by the orchestrator.
    Acknowledged {
        /// The report's id.
        readiness_id: u64,
    },
    /// Withdrawn: the worker went away before the acknowledgement.
    Withdrawn,
}

/// What the agent is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer may have expired.
    Tick,
    /// The node process runs: boot starts and the worker is asked for.
    Start,
    /// A local resource outcome for the boot. Worker outcomes come through
    /// supervision ([`Input::WorkerReady`], [`Input::WorkerExited`]) and are
    /// ignored here.
    Boot(boot::Input),
    /// Answer to [`Effect::SpawnWorker`].
    WorkerSpawned {
        /// The operation.
        op: OpId,
        /// Started, or why not.
        result: Result<(), String>,
    },
    /// The worker process says it is ready.
    WorkerReady {
        /// The spawn operation.
        op: OpId,
    },
    /// The worker process exited or crashed.
    WorkerExited {
        /// The spawn operation.
        op: OpId,
        /// Why (exit status, signal), as the supervisor saw it.
        reason: String,
    },
    /// The orchestrator acknowledges a runtime-ready report.
    ReadyAck {
        /// The authenticated sender.
        from: AgentId,
        /// The run.
        run_id: RunId,
        /// The report acknowledged.
        readiness_id: u64,
    },
    /// A stage provision, with its authenticated sender.
    Provision {
        /// Who sent it.
        from: AgentId,
        /// What it says.
        provision: stage::Provision,
    },
    /// A local fact for one stage controller (edges, weights, worker role,
    /// steps, stop answers).
    Stage {
        /// The stage.
        stage: StageIndex,
        /// The fact.
        input: stage::Input,
    },
    /// The orchestrator stops a stage.
    StopStage {
        /// The authenticated sender.
        from: AgentId,
        /// The run.
        run_id: RunId,
        /// The stage.
        stage: StageIndex,
    },
}

/// What the agent reports to the orchestrator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// The node's runtime is ready (SPEC.md "The agent").
    RuntimeReady {
        /// The run.
        run_id: RunId,
        /// The node.
        node: LogicalNodeId,
        /// The stage the plan assigned.
        stage: StageIndex,
        /// The agent's identity.
        agent: AgentId,
        /// The report's id.
        readiness_id: u64,
    },
    /// The node received the acknowledgement of its report.
    ReadyAcked {
        /// The run.
        run_id: RunId,
        /// The node.
        node: LogicalNodeId,
        /// The stage.
        stage: StageIndex,
        /// The agent's identity.
        agent: AgentId,
        /// The report acknowledged.
        readiness_id: u64,
    },
    /// A stage controller's report.
    Stage(stage::Report),
}

/// What the agent asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Start the worker process; answered by [`Input::WorkerSpawned`].
    SpawnWorker {
        /// The operation.
        op: OpId,
    },
    /// A boot announcement (observational; availability, faults).
    Boot(boot::Effect),
    /// Send to the orchestrator.
    Report(Report),
    /// A stage controller's request to the node's local machinery.
    Stage {
        /// The stage.
        stage: StageIndex,
        /// The request.
        effect: stage::Effect,
    },
    /// Tell the membership the node is alive.
    Heartbeat {
        /// The node.
        node: LogicalNodeId,
        /// The agent.
        agent: AgentId,
    },
}

/// The agent's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimerKind {
    /// Resend the runtime-ready report.
    ReadyResend,
    /// Send a heartbeat.
    Heartbeat,
}

crate::timer::timer_kinds!(TimerKind: ReadyResend, Heartbeat);

/// Inputs the agent ignored, by reason (its children count their own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// A worker answer for another operation, or after the worker was gone.
    pub stale_worker: u64,
    /// A worker outcome sent as a boot input (supervision owns those).
    pub worker_via_boot: u64,
    /// A command from an identity that is not the orchestrator, or for another run.
    pub unauthorised: u64,
    /// A provision before boot allowed provisioning.
    pub not_ready: u64,
    /// An acknowledgement of another report, or when none is outstanding.
    pub stale_ack: u64,
    /// A fact for a stage with no controller.
    pub unknown_stage: u64,
    /// A provision refused because `stages_max` controllers exist.
    pub over_capacity: u64,
    /// A second start.
    pub duplicate_start: u64,
}

/// A report as the run machine takes it.
impl From<Report> for crate::run::Input {
    fn from(report: Report) -> crate::run::Input {
        match report {
            Report::RuntimeReady {
                run_id,
                node,
                stage,
                agent,
                readiness_id,
            } => crate::run::Input::RuntimeReady {
                run_id,
                node,
                stage,
                agent,
                readiness_id,
            },
            Report::ReadyAcked {
                run_id,
                node,
                stage,
                agent,
                readiness_id,
            } => crate::run::Input::ReadyAcked {
                run_id,
                node,
                stage,
                agent,
                readiness_id,
            },
            Report::Stage(report) => crate::run::Input::Stage(report),
        }
    }
}

/// The agent composite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    config: Config,
    phase: Phase,
    boot: boot::Machine,
    stages: BTreeMap<StageIndex, stage::Machine>,
    readiness: Readiness,
    timers: Timers,
    ignored: Ignored,
    next_id: crate::ids::Counter,
    /// Worker processes asked for: the first, then one per respawn.
    spawns: u32,
    /// Workers started again after a crash, each for a repair's new
    /// provision of a stopped stage.
    #[serde(default)]
    respawns: u32,
    /// Stopped stages provisioned again (a repair rebuilds the pipeline).
    reprovisions: u64,
}

impl Machine {
    /// An agent whose node process starts at `now` (boot's clock starts).
    pub fn new(config: Config, now: Instant) -> Machine {
        assert!(config.stages_max > 0, "agent: stages_max must be positive");
        assert!(
            config.ready_reports_max > 0,
            "agent: ready_reports_max must be positive"
        );
        assert!(
            config.heartbeat_interval > Duration::ZERO,
            "agent: heartbeat interval"
        );
        let boot = boot::Machine::new(config.boot.clone(), now);
        Machine {
            config,
            phase: Phase::Idle,
            boot,
            stages: BTreeMap::new(),
            readiness: Readiness::Unreported,
            timers: Timers::new(),
            ignored: Ignored::default(),
            next_id: crate::ids::Counter::starting_at(1),
            spawns: 0,
            respawns: 0,
            reprovisions: 0,
        }
    }

    /// The worker supervision state.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The boot machine.
    pub fn boot(&self) -> &boot::Machine {
        &self.boot
    }

    /// The stage controllers, by stage index.
    pub fn stages(&self) -> &BTreeMap<StageIndex, stage::Machine> {
        &self.stages
    }

    /// The readiness report's state.
    pub fn readiness(&self) -> Readiness {
        self.readiness
    }

    /// Workers started again after a crash so far.
    pub fn respawns(&self) -> u32 {
        self.respawns
    }

    /// Stopped stages provisioned again so far.
    pub fn reprovisions(&self) -> u64 {
        self.reprovisions
    }

    /// Inputs the agent itself ignored.
    pub fn ignored(&self) -> &Ignored {
        &self.ignored
    }

    fn node(&self) -> &LogicalNodeId {
        &self.config.boot.node
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        self.step(now, input, &mut out);
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        let children = self
            .stages
            .values()
            .filter_map(crate::Machine::next_deadline)
            .chain(crate::Machine::next_deadline(&self.boot));
        children.chain(self.timers.next_deadline()).min()
    }

    fn check_invariants(&self) {
        transitions::check(self);
    }
}
