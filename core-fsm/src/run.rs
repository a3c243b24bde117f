//! The OrchestratorRun (SPEC.md "The run, OrchestratorRun"): one run of a pipeline, from the
//! readiness barrier to a terminal outcome.
//!
//! The run waits until every planned node has a runtime-ready report for this
//! run, from the agent the membership says is Alive for that node; it then
//! acknowledges each report (retried, bounded), provisions the stages one at
//! a time (stage `i + 1` only after stage `i` reports its weights loaded),
//! waits for every stage and both token endpoints, opens the prompt service
//! and serves requests one at a time. Every report is filtered by run,
//! node, stage and request; a mismatch is ignored and counted. Any failure or
//! a stop ends in a teardown that always reaches `Stopped` or `Failed`: every
//! stage is stopped and awaited, bounded by a stop timeout.

mod errors;
mod invariants;
mod planning;
mod repair;
mod serving;
mod startup;
mod teardown;
mod transitions;
mod types;

pub use errors::{PhaseName, RunError, exit_code};
pub use planning::{PlanningError, StageAssignment, plan_split, plan_stages, prefill_chunks};
pub use types::{
    Acks, Active, Barrier, Carry, DoneReason, Ignored, Input, PromptEvent, PromptFault, Queued,
    Repair, RequestId, Serving, StageProgress, Teardown, TimerKind, TokenEndpoint, Worker,
};

use crate::ids::{AgentId, LogicalNodeId, OpId, RunId};
use crate::membership::Liveness;
use crate::stage::{Provision, StageIndex};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use types::Timers;

/// What a run needs to know before it starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The run.
    pub run_id: RunId,
    /// The orchestrator's own identity, written into every provision.
    pub orchestrator: AgentId,
    /// The model's identity.
    pub model_id: String,
    /// How many layers the model has.
    pub layers: u32,
    /// How many pipeline stages to run.
    pub stages: u32,
    /// The node of each stage, in stage order.
    pub nodes: Vec<LogicalNodeId>,
    /// Layers per stage, in stage order (empty: balanced).
    pub split: Vec<u32>,
    /// How long every node may take to pass the readiness barrier.
    pub readiness_timeout: Duration,
    /// Interval between resends of unanswered acknowledgements.
    pub ack_retry_interval: Duration,
    /// Acknowledgement sends per node, the first included.
    pub ack_attempts_max: u32,
    /// How long the acknowledgements may take, all together.
    pub ack_timeout: Duration,
    /// How long one stage may take to load its weights.
    pub weights_timeout: Duration,
    /// How long, after the last weights, every stage and endpoint may take.
    pub stage_ready_timeout: Duration,
    /// How long the prompt service may take to open.
    pub prompt_open_timeout: Duration,
    /// Longest wait for the next token of the active request.
    pub token_timeout: Duration,
    /// More time the first token of an injection may take, per token
    /// injected: a long prompt's prefill (or a resume's) is work in
    /// proportion to its length, and a slow machine is not a stuck one.
    #[serde(default)]
    pub prefill_per_token: Duration,
    /// Most requests waiting behind the active one.
    pub queue_max: usize,
    /// The model's context in positions; a request ends when its next token
    /// would not fit (0: no limit).
    pub context: u32,
    /// How long teardown may wait for stop facts.
    pub stop_timeout: Duration,
    /// Repairs the run may make: a stage lost while serving (its node dead
    /// or replaced, a stage or token endpoint faulted) rebuilds the
    /// pipeline on the nodes' current agents and resumes the active
    /// request. 0: a loss fails the run (replacement policy `none`).
    #[serde(default)]
    pub repairs_max: u32,
    /// How long one repair may wait for the stops and for every lost
    /// stage's replacement to report ready.
    #[serde(default)]
    pub repair_timeout: Duration,
}

/// The run's state (SPEC.md "The run, OrchestratorRun" logical states).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Waiting until every node passes the readiness barrier.
    AwaitingReadiness(Barrier),
    /// Acknowledging every node's runtime-ready report.
    Acknowledging(Acks),
    /// Stage `stage` was provisioned and is loading its weights; the earlier
    /// stages have theirs.
    LoadingWeights {
        /// The stage loading.
        stage: StageIndex,
        /// Stage and endpoint readiness seen so far.
        progress: StageProgress,
    },
    /// Every stage has its weights; waiting for every stage and both token
    /// endpoints to be ready.
    AwaitingStageReady(StageProgress),
    /// Waiting for the prompt service to open.
    OpeningPrompt {
        /// The open operation.
        op: OpId,
    },
    /// Serving requests, one at a time.
    Serving(Serving),
    /// A stage was lost while serving: stopping what is left and waiting
    /// for replacements; the startup phases follow and serving resumes
    /// (the request and the queue are in the machine's carry meanwhile).
    Repairing(Repair),
    /// Stopping every stage and the token endpoints.
    TearingDown(Teardown),
    /// Ended by a controlled stop; every stop fact arrived.
    Stopped,
    /// Ended by a failure (the first one).
    Failed(RunError),
}

impl Phase {
    /// Whether the run has ended.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Phase::Stopped | Phase::Failed(_))
    }
}

/// What the run asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Acknowledge a node's runtime-ready report (SPEC.md "The run, OrchestratorRun").
    SendReadyAck {
        /// The node.
        node: LogicalNodeId,
        /// Its agent.
        agent: AgentId,
        /// The run.
        run_id: RunId,
        /// The node's stage.
        stage: StageIndex,
        /// The report being acknowledged.
        readiness_id: u64,
    },
    /// Open the orchestrator's token-in and token-out endpoints.
    OpenTokenEndpoints,
    /// Send a stage its provision.
    ProvisionStage {
        /// The node.
        node: LogicalNodeId,
        /// Its agent.
        agent: AgentId,
        /// The provision.
        provision: Provision,
    },
    /// Open the prompt service (SPEC.md "The run, OrchestratorRun"); answered by
    /// [`Input::PromptServiceOpened`].
    OpenPromptService {
        /// The operation.
        op: OpId,
    },
    /// Feed tokens into the token-in edge of stage 0.
    Inject {
        /// The request.
        request: RequestId,
        /// The sequence number of the token this input produces: 0 for the
        /// prompt, `k + 1` for generated token `k` fed back, `k` for a
        /// resume (the prompt and the `k` tokens generated before it).
        seq: u64,
        /// The position of the first token (0 for a prompt or a resume).
        pos: u32,
        /// The tokens.
        tokens: Vec<u32>,
    },
    /// Tell a node's new agent (a replacement) which stage it runs, so that
    /// it reports its runtime ready for this run.
    Enlist {
        /// The node.
        node: LogicalNodeId,
        /// Its new agent.
        agent: AgentId,
        /// The node's stage.
        stage: StageIndex,
    },
    /// A repair began (observational: the operator is told why).
    Repairing {
        /// What was lost.
        cause: RunError,
        /// This repair's number, from 1.
        repair: u32,
        /// The request that will resume, if one was active.
        request: Option<RequestId>,
    },
    /// The pipeline is rebuilt and serving again (observational).
    Repaired {
        /// The repair's number.
        repair: u32,
        /// The request resumed, and the sequence number of its next token.
        resumed: Option<(RequestId, u64)>,
    },
    /// Tell the request's client.
    Prompt {
        /// The request.
        request: RequestId,
        /// What happened.
        event: PromptEvent,
    },
    /// Stop a stage.
    StopStage {
        /// The node.
        node: LogicalNodeId,
        /// The stage.
        stage: StageIndex,
    },
    /// Close the token endpoints.
    CloseTokenEndpoints,
    /// The run ended; the process exits with [`exit_code`] of this.
    Finished(Result<(), RunError>),
}

/// The OrchestratorRun.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    config: Config,
    plan: Vec<StageAssignment>,
    phase: Phase,
    timers: Timers,
    ignored: Ignored,
    /// What membership last said of each planned node.
    members: BTreeMap<LogicalNodeId, (AgentId, Liveness)>,
    /// The agents that passed the barrier, by stage; empty before.
    workers: BTreeMap<StageIndex, Worker>,
    /// Stages sent a provision (they must be stopped).
    provisioned: BTreeSet<StageIndex>,
    /// The highest request id seen; ids must increase.
    last_request: Option<RequestId>,
    next_op: crate::ids::Counter,
    /// Repairs begun so far (at most `repairs_max`).
    repairs: u32,
    /// What a repair carries to the serving after it: `Some` from a
    /// repair's start until serving resumes (RN19).
    carry: Option<Carry>,
    /// Whether the prompt service was opened (it stays open through
    /// repairs; a repair during startup opens it after the rebuild).
    prompt_open: bool,
}

impl Machine {
    /// Plans the pipeline and starts waiting for readiness at `now`.
    pub fn new(config: Config, now: Instant) -> Result<Machine, PlanningError> {
        let plan = plan_split(config.layers, config.stages, &config.nodes, &config.split)?;
        assert!(
            config.ack_attempts_max > 0,
            "run: ack_attempts_max must be positive"
        );
        assert!(config.queue_max > 0, "run: queue_max must be positive");
        let mut timers = Timers::new();
        timers.set(TimerKind::Readiness, now + config.readiness_timeout);
        Ok(Machine {
            config,
            plan,
            phase: Phase::AwaitingReadiness(Barrier::default()),
            timers,
            ignored: Ignored::default(),
            members: BTreeMap::new(),
            workers: BTreeMap::new(),
            provisioned: BTreeSet::new(),
            last_request: None,
            next_op: crate::ids::Counter::starting_at(1),
            repairs: 0,
            carry: None,
            prompt_open: false,
        })
    }

    /// The run's state.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The pipeline plan.
    pub fn plan(&self) -> &[StageAssignment] {
        &self.plan
    }

    /// Reports and answers ignored so far.
    pub fn ignored(&self) -> &Ignored {
        &self.ignored
    }

    /// How the run ended, once it has.
    pub fn outcome(&self) -> Option<Result<(), &RunError>> {
        match &self.phase {
            Phase::Stopped => Some(Ok(())),
            Phase::Failed(error) => Some(Err(error)),
            _ => None,
        }
    }

    /// Repairs begun so far.
    pub fn repairs(&self) -> u32 {
        self.repairs
    }

    /// What membership last said of `node`: its agent and liveness.
    pub fn member(&self, node: &LogicalNodeId) -> Option<(&AgentId, Liveness)> {
        self.members
            .get(node)
            .map(|(agent, liveness)| (agent, *liveness))
    }

    fn stage_of(&self, node: &LogicalNodeId) -> Option<StageIndex> {
        self.plan.iter().find(|a| a.node == *node).map(|a| a.stage)
    }

    fn stage_count(&self) -> StageIndex {
        self.config.stages
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
        invariants::check(self);
    }
}
