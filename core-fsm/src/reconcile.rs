//! The level-triggered pool reconciler (seed 002, "pure, level-triggered
//! reconciler"): a pure function of desired and observed state that returns
//! actions and a requeue time. It never knows why it was called, and it never
//! acts on a node it has no record of.
//!
//! CONTRACT (shared by the orchestrator composite and this module; the types
//! below are the interface, the bodies are this module's to fill):
//!
//! - `Desired`: per group, the wanted count of logical nodes.
//! - `NodeView`: what the orchestrator's ledger says of one logical node.
//! - `reconcile(&Config, &Desired, &[NodeView], &Quarantine, now) -> Decision`.
//! - Applying the same decision's effects and calling again with the
//!   resulting observations yields no new actions (idempotence).

use crate::ids::{GroupId, LogicalNodeId};
use crate::plan::ReplacementPolicy;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The reconciler's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Replacement of nodes that fail before handoff.
    pub replacement: ReplacementPolicy,
}

/// The wanted shape of the pool: logical nodes per group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    /// Group -> wanted count; logical ids are `{group}-{index}` for
    /// `index in 0..count`.
    pub groups: BTreeMap<GroupId, u32>,
}

/// The reconciler's coarse view of one node record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Condition {
    /// A lease is being obtained or bootstrapped.
    Provisioning,
    /// Handed off and dormant.
    Ready,
    /// Failed before handoff, at this time; its lease (if any) still stands.
    Failed {
        /// When it failed (backoff counts from here).
        at: Instant,
    },
    /// A destroy is in flight.
    Destroying,
    /// Its lease is gone.
    Destroyed,
}

/// One node record as the reconciler sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// The logical node.
    pub node: LogicalNodeId,
    /// Its group.
    pub group: GroupId,
    /// Its index within the group.
    pub index: u32,
    /// Leases tried for it so far (the current one included).
    pub attempt: u32,
    /// Its condition.
    pub condition: Condition,
    /// The host of its current (or last) lease, if known.
    pub host: Option<String>,
}

/// Hosts that failed nodes too often; no new lease goes there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    /// Host -> failures seen on it.
    pub failures_by_host: BTreeMap<String, u32>,
}

/// What the reconciler asks the orchestrator to do.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Action {
    /// Start a NodeManager for a logical node the ledger does not have yet
    /// (scale up, or first start).
    Create {
        /// The group.
        group: GroupId,
        /// Index in the group; the node id is `{group}-{index}`.
        index: u32,
    },
    /// Destroy a recorded node's lease (scale down, or a failed node whose
    /// replacement is due).
    Destroy {
        /// The node.
        node: LogicalNodeId,
    },
    /// Give a recorded, failed (and destroyed) node a fresh lease attempt.
    Replace {
        /// The node.
        node: LogicalNodeId,
        /// The attempt number the new lease gets.
        attempt: u32,
    },
}

/// The outcome of one reconcile pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Actions, in a deterministic order.
    pub actions: Vec<Action>,
    /// When to call again even if nothing changes (a backoff expiring).
    pub requeue_at: Option<Instant>,
}
