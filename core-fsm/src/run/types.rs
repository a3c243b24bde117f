//! The run's alphabet and the data its phases hold.

use super::RunError;
use crate::ids::{AgentId, LogicalNodeId, OpId, RunId};
use crate::membership::Liveness;
use crate::stage::{Report, StageIndex};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// A prompt request, numbered by the prompt service; ids only increase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req-{}", self.0)
    }
}

/// A runtime-ready report that passed the context filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    /// The agent that sent it.
    pub agent: AgentId,
    /// The report's id, echoed in the acknowledgement.
    pub readiness_id: u64,
}

/// The readiness barrier's facts: one runtime-ready report per stage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barrier {
    /// The latest matching report of each stage.
    pub reports: BTreeMap<StageIndex, Worker>,
}

/// Acknowledgement progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acks {
    /// Stages whose acknowledgement was confirmed.
    pub acked: BTreeSet<StageIndex>,
    /// Sends per unconfirmed node so far.
    pub attempts: u32,
}

/// Stage and token-endpoint readiness (SPEC.md "The run, OrchestratorRun" `ready_stages`,
/// `token_in_ready`, `token_out_ready`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageProgress {
    /// Stages that reported ready.
    pub ready: BTreeSet<StageIndex>,
    /// The token-in endpoint is open.
    pub token_in: bool,
    /// The token-out endpoint is open.
    pub token_out: bool,
}

/// The request being generated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Active {
    /// The request.
    pub request: RequestId,
    /// Most tokens to generate (0: no cap).
    pub max_tokens: u32,
    /// Tokens of the prompt (they fill the context first).
    pub prompt_len: u32,
    /// The sequence number the next token record must carry.
    pub next_seq: u64,
    /// The prompt, kept so that a repair can run it again.
    pub prompt: Vec<u32>,
    /// The tokens generated so far, in order (`next_seq` of them): a
    /// resume feeds them after the prompt.
    pub generated: Vec<u32>,
}

/// A request waiting for its turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queued {
    /// The request.
    pub request: RequestId,
    /// Its prompt tokens.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: u32,
}

/// Request serving: at most one active request, a bounded queue behind it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serving {
    /// The request being generated, if any.
    pub active: Option<Active>,
    /// Requests waiting, oldest first; never longer than `queue_max`.
    pub queue: VecDeque<Queued>,
}

/// A repair in progress (SPEC.md "The run, OrchestratorRun" "Repair"):
/// every stage still provisioned is stopped, the token endpoints closed,
/// and each lost stage waits for its node's replacement to report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// What interrupted the run (the first loss of this repair).
    pub cause: RunError,
    /// Stages asked to stop that have not confirmed yet.
    pub waiting: BTreeSet<StageIndex>,
    /// Whether the token endpoints confirmed they are closed.
    pub endpoints_closed: bool,
    /// Runtime-ready reports for the rebuilt pipeline: the surviving
    /// agents' (already acknowledged once) and the replacements' as they
    /// arrive.
    pub barrier: Barrier,
}

/// What a repair carries from the serving it interrupted to the serving
/// that follows it: the active request, to resume, and the queue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carry {
    /// The request that was being generated, with its tokens so far.
    pub active: Option<Active>,
    /// Requests waiting, oldest first (new ones join while repairing).
    pub queue: VecDeque<Queued>,
}

/// Teardown progress (SPEC.md "The run, OrchestratorRun" `stopped_stages`,
/// `token_endpoints_stopped`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Teardown {
    /// How the run ends once teardown completes: the first error, if any.
    pub outcome: Result<(), RunError>,
    /// Stages asked to stop that have not confirmed yet.
    pub waiting: BTreeSet<StageIndex>,
    /// Whether the token endpoints confirmed they are closed.
    pub endpoints_closed: bool,
}

/// Which token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TokenEndpoint {
    /// Where prompts and fed-back tokens enter the pipeline.
    In,
    /// Where generated tokens leave it.
    Out,
}

/// Why a request finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DoneReason {
    /// The pipeline produced an end-of-sequence token.
    Eos,
    /// `max_tokens` tokens were produced.
    MaxTokens,
    /// The context is full: the next token would not fit.
    Context,
}

/// Why a request ended without finishing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PromptFault {
    /// The queue was full.
    QueueFull,
    /// The run is not serving (not yet, or not any more).
    NotServing,
    /// The request asked for nothing (empty prompt or no tokens).
    Invalid {
        /// What is wrong.
        reason: String,
    },
    /// The worker or tokenizer faulted the request.
    Worker {
        /// Why.
        reason: String,
    },
    /// No token arrived within `token_timeout`.
    Timeout,
    /// A token record arrived out of sequence (the run fails too).
    TokenSequence {
        /// The sequence expected.
        expected: u64,
        /// The sequence that arrived.
        got: u64,
    },
    /// The run is stopping on request.
    Shutdown,
    /// The run failed.
    RunFailed,
}

/// What a request's client is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PromptEvent {
    /// A generated token (non-terminal).
    Token {
        /// Its sequence number, from 0.
        seq: u64,
        /// The token.
        token: u32,
    },
    /// The request finished (terminal).
    Done {
        /// Tokens generated.
        tokens: u64,
        /// Why it stopped.
        reason: DoneReason,
    },
    /// The request failed (terminal).
    Fault(PromptFault),
}

impl PromptEvent {
    /// Whether the event ends its request.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, PromptEvent::Token { .. })
    }
}

/// What the run is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer may have expired.
    Tick,
    /// Membership's view of a node changed.
    Liveness {
        /// The node.
        node: LogicalNodeId,
        /// Its agent.
        agent: AgentId,
        /// Its liveness.
        liveness: Liveness,
    },
    /// A node's agent says its runtime is ready (SPEC.md "The run, OrchestratorRun").
    RuntimeReady {
        /// The run the report is for.
        run_id: RunId,
        /// The node it speaks for.
        node: LogicalNodeId,
        /// The stage it believes it runs.
        stage: StageIndex,
        /// The authenticated sender.
        agent: AgentId,
        /// The report's id.
        readiness_id: u64,
    },
    /// A node confirms the acknowledgement of its report.
    ReadyAcked {
        /// The run.
        run_id: RunId,
        /// The node.
        node: LogicalNodeId,
        /// Its stage.
        stage: StageIndex,
        /// The authenticated sender.
        agent: AgentId,
        /// The report acknowledged.
        readiness_id: u64,
    },
    /// A stage's report.
    Stage(Report),
    /// A token endpoint is open.
    TokenEndpointReady {
        /// The run.
        run_id: RunId,
        /// Which.
        endpoint: TokenEndpoint,
    },
    /// A token endpoint failed.
    EndpointFault {
        /// The run.
        run_id: RunId,
        /// Why.
        reason: String,
    },
    /// Both token endpoints are closed.
    TokenEndpointsClosed {
        /// The run.
        run_id: RunId,
    },
    /// Answer to [`super::Effect::OpenPromptService`].
    PromptServiceOpened {
        /// The operation.
        op: OpId,
        /// Bound, or why not.
        result: Result<(), String>,
    },
    /// A client submits a request.
    Submit {
        /// Its id (greater than every earlier one).
        request: RequestId,
        /// Its prompt tokens.
        prompt: Vec<u32>,
        /// Most tokens to generate (0: no cap; EOS or the context ends it).
        max_tokens: u32,
    },
    /// A generated token record from the token-out edge.
    Token {
        /// The run.
        run_id: RunId,
        /// The request.
        request: RequestId,
        /// Its sequence number.
        seq: u64,
        /// The token.
        token: u32,
        /// Whether it ends the sequence.
        eos: bool,
    },
    /// The worker or tokenizer faulted a request (a prompt-level fault).
    PromptFault {
        /// The run.
        run_id: RunId,
        /// The request.
        request: RequestId,
        /// Why.
        reason: String,
    },
    /// A message to a node could not be handed to the control plane.
    SendFailed {
        /// The node.
        node: LogicalNodeId,
        /// Why.
        reason: String,
    },
    /// A controlled stop was asked for (SPEC.md "The run, OrchestratorRun").
    Shutdown,
}

/// The run's timers; each belongs to one phase and is disarmed on leaving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimerKind {
    /// The readiness barrier's deadline.
    Readiness,
    /// Resend unconfirmed acknowledgements.
    AckRetry,
    /// The acknowledgements' deadline.
    AckDeadline,
    /// The loading stage's deadline.
    WeightLoad,
    /// The stage-readiness deadline.
    StageReady,
    /// The prompt service's open deadline.
    PromptOpen,
    /// The active request's next-token deadline.
    TokenGap,
    /// Teardown's deadline.
    Stop,
    /// The deadline of a repair's stops and replacements.
    Repair,
}

crate::timer::timer_kinds!(TimerKind: Readiness, AckRetry, AckDeadline, WeightLoad, StageReady, PromptOpen, TokenGap, Stop, Repair);

/// Inputs that were ignored, by reason (SPEC.md "The run, OrchestratorRun").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// For another run.
    pub wrong_run: u64,
    /// About a node the plan does not hold.
    pub unknown_node: u64,
    /// With a stage index that is not the node's.
    pub wrong_stage: u64,
    /// From an agent that is not the node's.
    pub wrong_agent: u64,
    /// About a request that is not the active one.
    pub wrong_request: u64,
    /// A request id not above every earlier one.
    pub stale_request: u64,
    /// A fact already seen.
    pub duplicate: u64,
    /// Valid, but not expected in the current phase (late or early).
    pub unexpected: u64,
}
