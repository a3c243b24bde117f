//! The StageController (SPEC.md "The stage controller"): one pipeline stage on a node.
//!
//! It accepts a provision only from the expected orchestrator and only for its
//! own node, asks for the two edges, the worker role and the weights, and
//! declares the stage ready once all four facts are in, in any order. It then
//! executes steps one at a time, in sequence. Faults are sticky: a faulted
//! stage executes nothing more and only stops. A stop is an ordered walk
//! (edges, rings, device objects, worker role), each step answered by an input
//! and bounded by a timeout, ending in `StageStopped`.
//!
//! Each preparation and stop action is asked at most once per controller
//! life, so its kind is its correlation key: a second answer of a kind is a
//! duplicate and is counted, never acted on.

mod wire;

pub(crate) use wire::OneLine;
pub use wire::{Edge, EdgeKind, Fault, LayerRange, Provision, Report, StageIndex};

use crate::ids::{AgentId, LogicalNodeId, RunId};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// Who this stage controller obeys and where it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The run the node joined for.
    pub run_id: RunId,
    /// The local node.
    pub node: LogicalNodeId,
    /// The only orchestrator identity whose provisions are accepted.
    pub orchestrator: AgentId,
    /// How long one stop step may take before the stop moves on without it.
    pub stop_step_timeout: Duration,
    /// Inbound objects that may wait, in sequence, behind the step
    /// executing (the inbound ring); one more is an overrun. 0: none may.
    pub ring: u64,
}

/// The readiness facts a provisioned stage waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyFacts {
    /// The worker runs the stage's role.
    pub worker: bool,
    /// The stage's weights are loaded.
    pub weights: bool,
    /// The inbound edge is established.
    pub inbound: bool,
    /// The outbound edge is established.
    pub outbound: bool,
}

impl ReadyFacts {
    /// Whether every fact is in.
    pub fn all(&self) -> bool {
        self.worker && self.weights && self.inbound && self.outbound
    }
}

/// The ordered steps of a stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StopStep {
    /// Local edges are being stopped.
    LocalEdges,
    /// The worker's rings are being quiesced.
    Rings,
    /// Device objects are being released.
    DeviceObjects,
    /// The worker's role is being reset.
    WorkerRole,
}

impl StopStep {
    fn effect(self) -> Effect {
        match self {
            StopStep::LocalEdges => Effect::StopLocalEdges,
            StopStep::Rings => Effect::QuiesceRings,
            StopStep::DeviceObjects => Effect::ReleaseDeviceObjects,
            StopStep::WorkerRole => Effect::ResetWorkerRole,
        }
    }

    fn next(self) -> Option<StopStep> {
        match self {
            StopStep::LocalEdges => Some(StopStep::Rings),
            StopStep::Rings => Some(StopStep::DeviceObjects),
            StopStep::DeviceObjects => Some(StopStep::WorkerRole),
            StopStep::WorkerRole => None,
        }
    }
}

/// The controller's state (SPEC.md "The stage controller" logical states).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// No provision accepted yet.
    Unprovisioned,
    /// Provisioned; preparation asked; waiting for the four readiness facts.
    AwaitingReady {
        /// The accepted provision.
        provision: Box<Provision>,
        /// The facts seen so far.
        facts: ReadyFacts,
    },
    /// Ready and idle; `StageReady` was reported.
    Ready {
        /// The accepted provision.
        provision: Box<Provision>,
        /// The sequence number the next inbound object must carry.
        next_seq: u64,
    },
    /// Executing step `seq`.
    Busy {
        /// The accepted provision.
        provision: Box<Provision>,
        /// The step executing.
        seq: u64,
        /// Steps `seq + 1 ..= seq + queued` arrived and wait, in order.
        queued: u64,
    },
    /// Faulted for good; executes nothing more.
    Faulted {
        /// The accepted provision, if one was.
        provision: Option<Box<Provision>>,
        /// The first fault.
        fault: Fault,
    },
    /// Stopping: waiting for `step` to be confirmed.
    Stopping {
        /// The accepted provision.
        provision: Box<Provision>,
        /// The stop step in progress.
        step: StopStep,
        /// Whether every earlier step was confirmed (not timed out).
        clean: bool,
    },
    /// Stopped; `StageStopped` was reported.
    Stopped,
}

/// What the stage controller is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer may have expired.
    Tick,
    /// A provision, with its authenticated sender.
    Provision {
        /// Who sent it.
        from: AgentId,
        /// What it says.
        provision: Provision,
    },
    /// The worker runs the stage's role.
    WorkerReady,
    /// The weights are loaded.
    WeightsReady,
    /// The inbound edge is established.
    InboundReady,
    /// The outbound edge is established.
    OutboundReady,
    /// The worker could not configure its role or load the weights.
    LoadFailed {
        /// Why.
        reason: String,
    },
    /// An inbound object for step `seq` arrived.
    StepArrived {
        /// Its step sequence number.
        seq: u64,
    },
    /// The worker finished step `seq`.
    StepCompleted {
        /// The step.
        seq: u64,
    },
    /// The worker failed step `seq`.
    StepFailed {
        /// The step.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// The worker process crashed (from the agent's supervision).
    WorkerCrashed {
        /// Why.
        reason: String,
    },
    /// An edge failed.
    EdgeFault {
        /// Why.
        reason: String,
    },
    /// The orchestrator stops the run.
    Stop {
        /// The run to stop.
        run_id: RunId,
    },
    /// Answer to [`Effect::StopLocalEdges`].
    LocalEdgesStopped,
    /// Answer to [`Effect::QuiesceRings`].
    RingsQuiesced,
    /// Answer to [`Effect::ReleaseDeviceObjects`].
    DeviceObjectsReleased,
    /// Answer to [`Effect::ResetWorkerRole`].
    WorkerRoleReset,
}

/// What the stage controller asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Establish the inbound edge.
    EstablishInbound(Edge),
    /// Establish the outbound edge.
    EstablishOutbound(Edge),
    /// Configure the worker to run this stage.
    ConfigureWorker {
        /// The stage.
        stage: StageIndex,
        /// The pipeline's stage count.
        stage_count: u32,
        /// The layers it computes.
        layers: LayerRange,
    },
    /// Load the stage's weights.
    LoadWeights {
        /// The model.
        model_id: String,
        /// The layers to load.
        layers: LayerRange,
    },
    /// Execute step `seq` on the worker.
    ExecuteStep {
        /// The step.
        seq: u64,
    },
    /// Tell the orchestrator.
    Report(Report),
    /// Stop this node's edges of the stage.
    StopLocalEdges,
    /// Drain and quiesce the worker's rings.
    QuiesceRings,
    /// Release the worker's device objects.
    ReleaseDeviceObjects,
    /// Reset the worker's role.
    ResetWorkerRole,
}

/// The stage controller's only timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimerKind {
    /// The current stop step took too long.
    StopStep,
}

crate::timer::timer_kinds!(TimerKind: StopStep);

/// Inputs that were ignored, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// An answer or report the current phase does not expect (late, early).
    pub unexpected: u64,
    /// A readiness fact already seen, or a second valid provision.
    pub duplicate: u64,
    /// A stop for another run.
    pub wrong_run: u64,
    /// A fault or fact after the stage had faulted (the first fault stands).
    pub after_fault: u64,
    /// A completion or failure for a step that is not executing.
    pub wrong_step: u64,
}

mod transitions;

/// The stage controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    config: Config,
    phase: Phase,
    timers: Timers,
    ignored: Ignored,
    /// Steps executed to completion; a measure, never a decision input.
    steps_completed: u64,
}

impl Machine {
    /// An unprovisioned stage controller.
    pub fn new(config: Config) -> Machine {
        assert!(
            config.stop_step_timeout > Duration::ZERO,
            "stage: stop_step_timeout must be positive"
        );
        Machine {
            config,
            phase: Phase::Unprovisioned,
            timers: Timers::new(),
            ignored: Ignored::default(),
            steps_completed: 0,
        }
    }

    /// The controller's state.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Inputs ignored so far.
    pub fn ignored(&self) -> &Ignored {
        &self.ignored
    }

    /// Steps executed to completion.
    pub fn steps_completed(&self) -> u64 {
        self.steps_completed
    }

    /// Whether the stage stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        if matches!(input, Input::Tick) {
            for kind in self.timers.take_expired(now) {
                self.step(now, transitions::Event::Fire(kind), &mut out);
            }
        } else {
            self.step(now, transitions::Event::In(input), &mut out);
        }
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    fn check_invariants(&self) {
        // ST5: the stop timer is armed exactly while a stop step is pending.
        assert_eq!(
            matches!(self.phase, Phase::Stopping { .. }),
            self.timers.is_set(&TimerKind::StopStep),
            "stage: stop timer out of step with {:?}",
            self.phase
        );
        match &self.phase {
            // ST2: readiness waits only while some fact is missing.
            Phase::AwaitingReady { facts, .. } => assert!(!facts.all()),
            // ST3: a step executes only in sequence after the ones before it;
            // ST6: no more wait behind it than the ring holds.
            Phase::Busy { seq, queued, .. } => {
                assert_eq!(*seq, self.steps_completed);
                assert!(*queued <= self.config.ring, "ST6: {queued} queued");
            }
            Phase::Ready { next_seq, .. } => assert_eq!(*next_seq, self.steps_completed),
            _ => {}
        }
    }
}
