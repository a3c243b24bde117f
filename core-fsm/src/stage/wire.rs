//! What the orchestrator tells a stage and what a stage reports back
//! (SPEC.md "The stage controller"). The run derives these from its pipeline plan; the
//! agent routes them by stage index.

use crate::ids::{AgentId, LogicalNodeId, RunId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A stage's position in the pipeline, from 0.
pub type StageIndex = u32;

/// A half-open range of model layers, `start..end_exclusive`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LayerRange {
    /// First layer of the range.
    pub start: u32,
    /// One past the last layer.
    pub end_exclusive: u32,
}

impl LayerRange {
    /// How many layers the range holds.
    pub fn len(&self) -> u32 {
        self.end_exclusive - self.start
    }

    /// Whether the range holds no layer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for LayerRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end_exclusive)
    }
}

/// What an edge carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EdgeKind {
    /// Prompt and fed-back tokens, from the orchestrator into stage 0.
    TokenIn,
    /// Activations from one stage to the next.
    Activation,
    /// Generated tokens, from the last stage back to the orchestrator.
    TokenOut,
}

/// One edge of the pipeline. Edge `k` flows into stage `k` and out of stage
/// `k - 1`, so a pipeline of `n` stages has edges `0..=n`: edge 0 is the
/// token-in edge and edge `n` the token-out edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Edge {
    /// The edge's number.
    pub id: u32,
    /// What it carries.
    pub kind: EdgeKind,
}

/// The provisioning of one stage (SPEC.md "The stage controller" `StageProvisionWire`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provision {
    /// The run the stage belongs to.
    pub run_id: RunId,
    /// The orchestrator identity that sent it; a stage obeys only its own.
    pub orchestrator: AgentId,
    /// The node the stage must run on.
    pub node: LogicalNodeId,
    /// The stage's index.
    pub stage: StageIndex,
    /// How many stages the pipeline has.
    pub stage_count: u32,
    /// The layers the stage computes.
    pub layers: LayerRange,
    /// The edge the stage reads from.
    pub inbound: Edge,
    /// The edge the stage writes to.
    pub outbound: Edge,
    /// The model's identity (weights are found by it).
    pub model_id: String,
}

/// Why a stage faulted (SPEC.md "The stage controller" "faulted"). Every fault is sticky.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    /// A provision came from another orchestrator or was meant for another node.
    Unauthorised {
        /// The identity that sent it.
        from: AgentId,
        /// The node it was meant for.
        node: LogicalNodeId,
    },
    /// An inbound object carried the wrong step sequence number.
    SequenceViolation {
        /// The sequence the stage expected.
        expected: u64,
        /// The sequence that arrived.
        got: u64,
    },
    /// An inbound object arrived while a step was still executing.
    Overrun {
        /// The step executing.
        busy: u64,
        /// The sequence that arrived.
        got: u64,
    },
    /// The worker process crashed.
    WorkerCrashed {
        /// Why, as the supervisor saw it.
        reason: String,
    },
    /// The worker could not execute a step.
    StepFailed {
        /// The step.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// The worker could not configure its role or load its weights.
    LoadFailed {
        /// Why.
        reason: String,
    },
    /// An inbound or outbound edge failed.
    EdgeFault {
        /// Why.
        reason: String,
    },
}

/// A reason from elsewhere (a worker's stderr, an I/O error), written on
/// one line: control characters (a newline, a terminal escape) are escaped
/// as Rust writes them, so the text cannot break or restyle a log line.
pub(crate) struct OneLine<'a>(pub &'a str);

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Unauthorised { from, node } => write!(
                f,
                "a provision from {from} for node {node} was refused (another orchestrator, or another node's)"
            ),
            Fault::SequenceViolation { expected, got } => {
                write!(f, "step {got} arrived where step {expected} was due")
            }
            Fault::Overrun { busy, got } => {
                write!(f, "step {got} arrived while step {busy} was still running")
            }
            Fault::WorkerCrashed { reason } => {
                write!(f, "its worker crashed: {}", OneLine(reason))
            }
            Fault::StepFailed { seq, reason } => {
                write!(f, "step {seq} failed: {}", OneLine(reason))
            }
            Fault::LoadFailed { reason } => {
                write!(f, "its worker could not load: {}", OneLine(reason))
            }
            Fault::EdgeFault { reason } => write!(f, "an edge failed: {}", OneLine(reason)),
        }
    }
}

/// What a stage reports to the orchestrator's run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// The stage's weights are loaded (the run then provisions the next stage).
    WeightsReady {
        /// The run.
        run_id: RunId,
        /// The node.
        node: LogicalNodeId,
        /// The stage.
        stage: StageIndex,
    },
    /// Worker, weights and both edges are ready.
    StageReady {
        /// The run.
        run_id: RunId,
        /// The node.
        node: LogicalNodeId,
        /// The stage.
        stage: StageIndex,
    },
    /// The stage faulted; it executes nothing more.
    StageFault {
        /// The run, when a provision was accepted.
        run_id: Option<RunId>,
        /// The node.
        node: LogicalNodeId,
        /// The stage, when a provision was accepted.
        stage: Option<StageIndex>,
        /// Why.
        fault: Fault,
    },
    /// The stage stopped; `clean` is false when a stop step timed out.
    StageStopped {
        /// The run.
        run_id: RunId,
        /// The node.
        node: LogicalNodeId,
        /// The stage, when a provision was accepted.
        stage: Option<StageIndex>,
        /// Whether every stop step was confirmed.
        clean: bool,
    },
}

/// A report for people, without its node (the line it is written on names
/// the node): `stage 1: weights loaded (run-7)`.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::WeightsReady { run_id, stage, .. } => {
                write!(f, "stage {stage}: weights loaded ({run_id})")
            }
            Report::StageReady { run_id, stage, .. } => {
                write!(f, "stage {stage}: ready ({run_id})")
            }
            Report::StageFault {
                stage: Some(stage),
                fault,
                ..
            } => write!(f, "stage {stage}: faulted: {fault}"),
            Report::StageFault {
                stage: None, fault, ..
            } => write!(f, "{fault}"),
            Report::StageStopped { stage, clean, .. } => {
                match stage {
                    Some(stage) => write!(f, "stage {stage}: stopped")?,
                    None => write!(f, "stopped before any stage was provisioned")?,
                }
                if !clean {
                    write!(f, " (a stop step timed out)")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_and_faults_read_as_sentences() {
        let node = LogicalNodeId::from("workers-1");
        let cases = [
            (
                Report::WeightsReady {
                    run_id: RunId(7),
                    node: node.clone(),
                    stage: 1,
                },
                "stage 1: weights loaded (run-7)",
            ),
            (
                Report::StageFault {
                    run_id: Some(RunId(7)),
                    node: node.clone(),
                    stage: Some(1),
                    fault: Fault::Overrun { busy: 4, got: 5 },
                },
                "stage 1: faulted: step 5 arrived while step 4 was still running",
            ),
            (
                Report::StageFault {
                    run_id: None,
                    node: node.clone(),
                    stage: None,
                    fault: Fault::Unauthorised {
                        from: AgentId::new("ab12"),
                        node: node.clone(),
                    },
                },
                "a provision from ab12 for node workers-1 was refused (another orchestrator, or another node's)",
            ),
            (
                Report::StageStopped {
                    run_id: RunId(7),
                    node: node.clone(),
                    stage: Some(2),
                    clean: false,
                },
                "stage 2: stopped (a stop step timed out)",
            ),
            (
                Report::StageFault {
                    run_id: Some(RunId(7)),
                    node,
                    stage: Some(0),
                    fault: Fault::WorkerCrashed {
                        reason: "exit 1\n\u{1b}[31mred".into(),
                    },
                },
                "stage 0: faulted: its worker crashed: exit 1\\n\\u{1b}[31mred",
            ),
        ];
        for (report, text) in cases {
            assert_eq!(report.to_string(), text, "{report:?}");
        }
    }
}
