//! The run's typed failures (SPEC.md "The run, OrchestratorRun") and the process exit code
//! (SPEC.md "The run, OrchestratorRun").

use super::{PlanningError, RequestId};
use crate::ids::LogicalNodeId;
use crate::stage::{Fault, StageIndex};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The phase a failure happened in, for people and the datastream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PhaseName {
    /// Waiting for the readiness barrier.
    Readiness,
    /// Acknowledging readiness.
    Acknowledgement,
    /// Provisioning stages and loading weights.
    WeightLoading,
    /// Waiting for stages and token endpoints.
    StageReadiness,
    /// Opening the prompt service.
    PromptStartup,
    /// Serving requests.
    Serving,
    /// Repairing the pipeline while serving.
    Repair,
}

/// Why a run failed. The first failure is kept; teardown never replaces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunError {
    /// The pipeline could not be planned.
    Planning(PlanningError),
    /// Some nodes never passed the readiness barrier.
    ReadinessTimeout {
        /// The stages whose node was not ready.
        missing: Vec<StageIndex>,
    },
    /// Some acknowledgements were never confirmed.
    AckTimeout {
        /// The stages not confirmed.
        missing: Vec<StageIndex>,
    },
    /// A stage faulted before the run could serve.
    StageProvisionFailed {
        /// The stage.
        stage: StageIndex,
        /// Its fault.
        fault: Fault,
    },
    /// The stage loading its weights faulted.
    WeightLoadFailed {
        /// The stage.
        stage: StageIndex,
        /// Its fault.
        fault: Fault,
    },
    /// The stage loading its weights took too long.
    WeightLoadTimeout {
        /// The stage.
        stage: StageIndex,
    },
    /// Stages or token endpoints never became ready.
    StageReadyTimeout {
        /// The stages not ready.
        missing: Vec<StageIndex>,
        /// Whether a token endpoint was missing too.
        token_endpoints_missing: bool,
    },
    /// The prompt service could not open.
    PromptBindFailed {
        /// Why.
        reason: String,
    },
    /// A node's agent died, or was replaced by another identity.
    NodeDead {
        /// The node.
        node: LogicalNodeId,
        /// When.
        during: PhaseName,
    },
    /// A message to a node could not be sent.
    SendFailed {
        /// The node.
        node: LogicalNodeId,
        /// When.
        during: PhaseName,
        /// Why.
        reason: String,
    },
    /// A stop was asked for before the run could serve.
    ShutdownRequested {
        /// When.
        during: PhaseName,
    },
    /// A stage faulted while serving.
    StageFault {
        /// The stage.
        stage: StageIndex,
        /// Its fault.
        fault: Fault,
    },
    /// A token endpoint failed.
    EndpointFault {
        /// When.
        during: PhaseName,
        /// Why.
        reason: String,
    },
    /// A token record arrived out of sequence.
    TokenSequence {
        /// The request.
        request: RequestId,
        /// The sequence expected.
        expected: u64,
        /// The sequence that arrived.
        got: u64,
    },
    /// A repair ran out of time: lost stages not replaced, or stops not
    /// confirmed.
    RepairTimeout {
        /// What interrupted the run.
        cause: Box<RunError>,
        /// Stages without a ready agent, or whose stop was not confirmed.
        missing: Vec<StageIndex>,
    },
    /// Teardown ran out of time before every stop fact arrived.
    StopTimeout {
        /// Stages that never confirmed their stop.
        stages: Vec<StageIndex>,
        /// Whether the token endpoints never confirmed closing.
        token_endpoints: bool,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Debug text of these types holds ids and reasons only, never secrets.
        match self {
            RunError::Planning(error) => write!(f, "planning: {error}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// The process exit code of a run's outcome: 0 for success or a controlled
/// stop, 1 for any failure (SPEC.md "The run, OrchestratorRun").
pub fn exit_code(outcome: Result<(), &RunError>) -> i32 {
    match outcome {
        Ok(()) => 0,
        Err(_) => 1,
    }
}
