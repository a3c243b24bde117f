//! Pipeline planning (SPEC.md "Pipeline planning"): which node runs which
//! layers, and how the stages are wired.

use crate::ids::LogicalNodeId;
use crate::stage::{Edge, EdgeKind, LayerRange, StageIndex};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// One stage of the plan: where it runs, what it computes, how it is wired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageAssignment {
    /// The stage's index.
    pub stage: StageIndex,
    /// The node that runs it.
    pub node: LogicalNodeId,
    /// Its layers.
    pub layers: LayerRange,
    /// The edge it reads: token-in for stage 0, activations otherwise.
    pub inbound: Edge,
    /// The edge it writes: token-out for the last stage, activations otherwise.
    pub outbound: Edge,
}

/// Why a pipeline cannot be planned; raised before any worker starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlanningError {
    /// A pipeline needs at least one stage.
    NoStages,
    /// Every stage needs at least one layer.
    MoreStagesThanLayers {
        /// Stages asked for.
        stages: u32,
        /// Layers the model has.
        layers: u32,
    },
    /// One node per stage is needed.
    NodeCountMismatch {
        /// Stages asked for.
        stages: u32,
        /// Nodes given.
        nodes: usize,
    },
    /// A node was given twice.
    DuplicateNode(LogicalNodeId),
    /// An explicit split names another number of stages.
    SplitLength {
        /// Stages planned.
        stages: u32,
        /// Entries in the split.
        given: usize,
    },
    /// An explicit split does not cover the model's layers exactly, or
    /// gives a stage no layer.
    SplitLayers {
        /// The split.
        split: Vec<u32>,
        /// The model's layers.
        layers: u32,
    },
}

impl fmt::Display for PlanningError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanningError::NoStages => write!(f, "a pipeline needs at least one stage"),
            PlanningError::MoreStagesThanLayers { stages, layers } => write!(
                f,
                "{stages} stages for a model of {layers} layers: every stage needs a layer"
            ),
            PlanningError::NodeCountMismatch { stages, nodes } => {
                write!(f, "{stages} stages need {stages} nodes, got {nodes}")
            }
            PlanningError::DuplicateNode(node) => write!(f, "node {node} is given twice"),
            PlanningError::SplitLength { stages, given } => {
                write!(f, "the split has {given} entries for {stages} stages")
            }
            PlanningError::SplitLayers { split, layers } => write!(
                f,
                "the split {split:?} must give every stage at least one layer and sum to the model's {layers}"
            ),
        }
    }
}

/// Splits `layers` into `stages` contiguous, balanced ranges and wires them:
/// the first `layers % stages` stages get one layer more than the rest;
/// edge `k` flows into stage `k`, so edge 0 is the token-in edge, edges
/// `1..stages` carry activations and edge `stages` is the token-out edge.
/// Stage `i` runs on `nodes[i]`.
pub fn plan_stages(
    layers: u32,
    stages: u32,
    nodes: &[LogicalNodeId],
) -> Result<Vec<StageAssignment>, PlanningError> {
    plan_split(layers, stages, nodes, &[])
}

/// Plans with an explicit split: `split[i]` layers for stage `i`, in order
/// (empty: balanced, as [`plan_stages`]).
pub fn plan_split(
    layers: u32,
    stages: u32,
    nodes: &[LogicalNodeId],
    split: &[u32],
) -> Result<Vec<StageAssignment>, PlanningError> {
    if stages == 0 {
        return Err(PlanningError::NoStages);
    }
    if stages > layers {
        return Err(PlanningError::MoreStagesThanLayers { stages, layers });
    }
    if nodes.len() != stages as usize {
        return Err(PlanningError::NodeCountMismatch {
            stages,
            nodes: nodes.len(),
        });
    }
    let mut seen = BTreeSet::new();
    if let Some(node) = nodes.iter().find(|n| !seen.insert(*n)) {
        return Err(PlanningError::DuplicateNode(node.clone()));
    }
    if !split.is_empty() && split.len() != stages as usize {
        return Err(PlanningError::SplitLength {
            stages,
            given: split.len(),
        });
    }
    let sum = split.iter().try_fold(0u32, |a, &b| a.checked_add(b));
    if !split.is_empty() && (split.contains(&0) || sum != Some(layers)) {
        return Err(PlanningError::SplitLayers {
            split: split.to_vec(),
            layers,
        });
    }
    let (base, extra) = (layers / stages, layers % stages);
    let edge = |id: u32| Edge {
        id,
        kind: match id {
            0 => EdgeKind::TokenIn,
            id if id == stages => EdgeKind::TokenOut,
            _ => EdgeKind::Activation,
        },
    };
    let mut start = 0;
    let plan: Vec<StageAssignment> = (0..stages)
        .zip(nodes)
        .map(|(stage, node)| {
            let len = match split.get(stage as usize) {
                Some(&len) => len,
                None => base + u32::from(stage < extra),
            };
            let layers = LayerRange {
                start,
                end_exclusive: start + len,
            };
            start += len;
            StageAssignment {
                stage,
                node: node.clone(),
                layers,
                inbound: edge(stage),
                outbound: edge(stage + 1),
            }
        })
        .collect();
    assert_eq!(
        start, layers,
        "planning must cover every layer exactly once"
    );
    Ok(plan)
}

/// How a prompt of `len` tokens is cut for the pipeline: into
/// `ceil(len / min)` chunks, at most `in_flight` (a prompt of `min` tokens
/// or fewer goes whole), and into more where a chunk would otherwise carry
/// over `max` tokens (0: no such bound; a chunk's activations must fit one
/// edge frame); as even as they come, in order; their lengths. Several
/// chunks in flight let the stages overlap a long prefill.
pub fn prefill_chunks(len: usize, min: usize, in_flight: usize, max: usize) -> Vec<usize> {
    let overlap = len.div_ceil(min.max(1)).clamp(1, in_flight.max(1));
    let fit = if max == 0 { 1 } else { len.div_ceil(max) };
    let chunks = overlap.max(fit);
    let size = len.div_ceil(chunks).max(1);
    let mut out = Vec::new();
    let mut left = len;
    while left > 0 {
        let n = size.min(left);
        out.push(n);
        left -= n;
    }
    out
}
