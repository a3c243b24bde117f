//! The run's typed failures (SPEC.md "The run, OrchestratorRun") and the process exit code
//! (SPEC.md "The run, OrchestratorRun").

use super::{PlanningError, RequestId};
use crate::ids::LogicalNodeId;
use crate::stage::{Fault, OneLine, StageIndex};
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

impl fmt::Display for PhaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PhaseName::Readiness => "the readiness barrier",
            PhaseName::Acknowledgement => "the acknowledgement",
            PhaseName::WeightLoading => "weight loading",
            PhaseName::StageReadiness => "stage readiness",
            PhaseName::PromptStartup => "prompt startup",
            PhaseName::Serving => "serving",
            PhaseName::Repair => "a repair",
        })
    }
}

/// `0, 2 and 3`: stage indices for people.
struct Stages<'a>(&'a [StageIndex]);

impl fmt::Display for Stages<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        f.write_str(if n == 1 { "stage " } else { "stages " })?;
        for (i, stage) in self.0.iter().enumerate() {
            let sep = match i {
                0 => "",
                i if i + 1 == n => " and ",
                _ => ", ",
            };
            write!(f, "{sep}{stage}")?;
        }
        Ok(())
    }
}

/// What a timeout waited for in vain: ` stages 1 and 2 {stages_did}`, then
/// `; the token endpoints {endpoints_did}` where they were waited for too.
fn waited_for(
    f: &mut fmt::Formatter<'_>,
    stages: &[StageIndex],
    stages_did: &str,
    endpoints: bool,
    endpoints_did: &str,
) -> fmt::Result {
    if !stages.is_empty() {
        write!(f, " {} {stages_did}", Stages(stages))?;
    }
    if endpoints {
        let and = if stages.is_empty() { "" } else { ";" };
        write!(f, "{and} the token endpoints {endpoints_did}")?;
    }
    Ok(())
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Ids, phases and reasons only: never a secret.
        match self {
            RunError::Planning(error) => write!(f, "planning: {error}"),
            RunError::ReadinessTimeout { missing } => write!(
                f,
                "readiness timed out: {} had no ready node",
                Stages(missing)
            ),
            RunError::AckTimeout { missing } => write!(
                f,
                "acknowledgement timed out: {} not confirmed",
                Stages(missing)
            ),
            RunError::StageProvisionFailed { stage, fault } => {
                write!(f, "stage {stage} could not be provisioned: {fault}")
            }
            RunError::WeightLoadFailed { stage, fault } => {
                write!(f, "stage {stage} failed to load its weights: {fault}")
            }
            RunError::WeightLoadTimeout { stage } => {
                write!(f, "stage {stage} took too long to load its weights")
            }
            RunError::StageReadyTimeout {
                missing,
                token_endpoints_missing,
            } => {
                write!(f, "stage readiness timed out:")?;
                waited_for(
                    f,
                    missing,
                    "not ready",
                    *token_endpoints_missing,
                    "not open",
                )
            }
            RunError::PromptBindFailed { reason } => {
                write!(f, "the prompt service could not open: {}", OneLine(reason))
            }
            RunError::NodeDead { node, during } => {
                write!(f, "node {node}'s agent died during {during}")
            }
            RunError::SendFailed {
                node,
                during,
                reason,
            } => write!(
                f,
                "a message to node {node} failed during {during}: {}",
                OneLine(reason)
            ),
            RunError::ShutdownRequested { during } => {
                write!(
                    f,
                    "a stop was asked for during {during}, before the model was served"
                )
            }
            RunError::StageFault { stage, fault } => {
                write!(f, "stage {stage} faulted while serving: {fault}")
            }
            RunError::EndpointFault { during, reason } => write!(
                f,
                "a token endpoint failed during {during}: {}",
                OneLine(reason)
            ),
            RunError::TokenSequence {
                request,
                expected,
                got,
            } => write!(
                f,
                "{request}: token {got} arrived where token {expected} was due"
            ),
            RunError::RepairTimeout { cause, missing } if missing.is_empty() => {
                write!(f, "the repair ran out of time after: {cause}")
            }
            RunError::RepairTimeout { cause, missing } => write!(
                f,
                "the repair ran out of time ({} not replaced or not stopped) after: {cause}",
                Stages(missing)
            ),
            RunError::StopTimeout {
                stages,
                token_endpoints,
            } => {
                write!(f, "teardown timed out:")?;
                let (stop, close) = ("never confirmed the stop", "never confirmed closing");
                waited_for(f, stages, stop, *token_endpoints, close)
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_errors_read_as_sentences() {
        let load = RunError::WeightLoadFailed {
            stage: 0,
            fault: Fault::LoadFailed {
                reason: "no libcuda.so.1".into(),
            },
        };
        let cases = [
            (
                load.clone(),
                "stage 0 failed to load its weights: its worker could not load: no libcuda.so.1",
            ),
            (
                RunError::ShutdownRequested {
                    during: PhaseName::WeightLoading,
                },
                "a stop was asked for during weight loading, before the model was served",
            ),
            (
                RunError::ReadinessTimeout {
                    missing: vec![0, 2, 3],
                },
                "readiness timed out: stages 0, 2 and 3 had no ready node",
            ),
            (
                RunError::StageReadyTimeout {
                    missing: vec![1],
                    token_endpoints_missing: true,
                },
                "stage readiness timed out: stage 1 not ready; the token endpoints not open",
            ),
            (
                RunError::StopTimeout {
                    stages: vec![2],
                    token_endpoints: true,
                },
                "teardown timed out: stage 2 never confirmed the stop; the token endpoints never confirmed closing",
            ),
            (
                RunError::SendFailed {
                    node: LogicalNodeId::from("workers-0"),
                    during: PhaseName::Serving,
                    reason: "broken\npipe".into(),
                },
                "a message to node workers-0 failed during serving: broken\\npipe",
            ),
            (
                RunError::StopTimeout {
                    stages: vec![],
                    token_endpoints: true,
                },
                "teardown timed out: the token endpoints never confirmed closing",
            ),
            (
                RunError::RepairTimeout {
                    cause: Box::new(RunError::NodeDead {
                        node: LogicalNodeId::from("workers-1"),
                        during: PhaseName::Serving,
                    }),
                    missing: vec![1, 2],
                },
                "the repair ran out of time (stages 1 and 2 not replaced or not stopped) after: node workers-1's agent died during serving",
            ),
            (
                RunError::RepairTimeout {
                    cause: Box::new(RunError::StageFault {
                        stage: 0,
                        fault: Fault::EdgeFault {
                            reason: "reset".into(),
                        },
                    }),
                    missing: vec![],
                },
                "the repair ran out of time after: stage 0 faulted while serving: an edge failed: reset",
            ),
            (
                RunError::TokenSequence {
                    request: RequestId(4),
                    expected: 7,
                    got: 9,
                },
                "req-4: token 9 arrived where token 7 was due",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text, "{error:?}");
        }
    }
}
