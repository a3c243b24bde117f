//! The level-triggered pool reconciler (SPEC.md "The pool reconciler", "pure, level-triggered
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
//!
//! The rules (R1..R12 in `spec/plan-boot-reconcile.md`):
//!
//! - A wanted `{group}-{index}` (`index < count`) with no record gets a
//!   `Create`.
//! - A recorded node the plan no longer wants (`index >= count`, or its group
//!   is gone) gets a `Destroy` unless it is already `Destroying`/`Destroyed`;
//!   highest index first.
//! - A wanted `Failed` node: with `ReplacementPolicy::None` nothing, ever (the
//!   MVP rule, SPEC.md "Node manager"); with `Bounded`, a `Replace` with `attempt + 1`
//!   once its backoff has elapsed and while `attempt < attempts_max`, else a
//!   requeue at the backoff's end; at `attempts_max` it stays failed.
//! - `Provisioning`, `Ready`, `Destroying` and wanted `Destroyed` records get
//!   nothing: the node managers own those (a handed-off node is never
//!   repaired, SPEC.md "Node manager"; a destroyed id is not reused within a run).
//! - Order: destroys, then replaces, then creates; groups in name order.

use crate::ids::{GroupId, LogicalNodeId};
use crate::plan::{ReplacementPolicy, is_node_id};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

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
    /// Destroy a recorded node's lease (scale down: its index is no longer
    /// wanted).
    Destroy {
        /// The node.
        node: LogicalNodeId,
    },
    /// Give a recorded, failed node a fresh lease attempt; the orchestrator
    /// destroys the old lease (if any) before it asks for the new one.
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

impl Decision {
    /// Nothing to do now and nothing scheduled: until an observation
    /// changes, another pass would decide the same empty thing (R9).
    pub fn is_quiescent(&self) -> bool {
        self.actions.is_empty() && self.requeue_at.is_none()
    }
}

impl Config {
    /// The failures after which a host is quarantined, when the policy
    /// quarantines at all (only `Bounded` does).
    pub fn quarantine_threshold(&self) -> Option<u32> {
        match self.replacement {
            ReplacementPolicy::None => None,
            ReplacementPolicy::Bounded {
                quarantine_after_failures,
                ..
            } => Some(quarantine_after_failures),
        }
    }
}

impl Quarantine {
    /// Counts one more node failure on `host`.
    pub fn record_failure(&mut self, host: &str) {
        let failures = self.failures_by_host.entry(host.to_owned()).or_insert(0);
        *failures = failures.saturating_add(1);
    }
}

/// Whether `host` has failed at least `threshold` nodes. A threshold of 0 is
/// rejected by plan validation; here it quarantines nothing rather than
/// everything, so a bad config cannot starve the pool.
pub fn is_quarantined(quarantine: &Quarantine, host: &str, threshold: u32) -> bool {
    threshold > 0
        && quarantine
            .failures_by_host
            .get(host)
            .is_some_and(|failures| *failures >= threshold)
}

/// Every quarantined host, in name order: what a create asks the provider
/// to avoid (`CreateLeaseRequest::excluded_hosts`).
pub fn excluded_hosts(quarantine: &Quarantine, threshold: u32) -> Vec<String> {
    quarantine
        .failures_by_host
        .keys()
        .filter(|host| is_quarantined(quarantine, host, threshold))
        .cloned()
        .collect()
}

/// One level-triggered pass: what to do about `nodes` so the pool matches
/// `desired`, given the time `now`. Pure; the same arguments always give the
/// same decision, and it acts only on nodes in `nodes` (R2).
///
/// `quarantine` does not change which actions are taken: it only decides
/// where new leases may go, which the orchestrator applies through
/// [`excluded_hosts`] when it performs a `Create` or `Replace`. It is an
/// argument so that every input of the decision is visible at the call.
///
/// Panics if two views share a node id or `(group, index)`, or a view's id
/// is not `{group}-{index}`: those are ledger bugs, not observations.
pub fn reconcile(
    config: &Config,
    desired: &Desired,
    nodes: &[NodeView],
    quarantine: &Quarantine,
    now: Instant,
) -> Decision {
    // Deliberately unused: see the doc comment.
    let _ = quarantine;
    let by_group = index_views(nodes);
    let mut decision = Decision::default();
    // Scale down first, so a pass that also grows another group sheds cost
    // before it adds any. Per group, highest index first: a group shrinks
    // from its tail and its remaining ids stay dense.
    for (group, views) in &by_group {
        let wanted = desired.groups.get(*group).copied().unwrap_or(0);
        for view in views.range(wanted..).rev().map(|(_, v)| v) {
            if !matches!(view.condition, Condition::Destroying | Condition::Destroyed) {
                let node = view.node.clone();
                decision.actions.push(Action::Destroy { node });
            }
        }
    }
    for (group, views) in &by_group {
        let wanted = desired.groups.get(*group).copied().unwrap_or(0);
        for view in views.range(..wanted).map(|(_, v)| v) {
            let Condition::Failed { at } = view.condition else {
                continue;
            };
            match replacement_due(config, view.attempt, at, now) {
                Replacement::Now => decision.actions.push(Action::Replace {
                    node: view.node.clone(),
                    attempt: view.attempt.saturating_add(1),
                }),
                Replacement::At(due) => {
                    decision.requeue_at = Some(decision.requeue_at.map_or(due, |r| r.min(due)));
                }
                Replacement::Never => {}
            }
        }
    }
    for (group, count) in &desired.groups {
        let views = by_group.get(group);
        for index in 0..*count {
            if !views.is_some_and(|v| v.contains_key(&index)) {
                let group = group.clone();
                decision.actions.push(Action::Create { group, index });
            }
        }
    }
    decision
}

/// Views by group and index, checked for ledger consistency.
fn index_views(nodes: &[NodeView]) -> BTreeMap<&GroupId, BTreeMap<u32, &NodeView>> {
    let mut by_group: BTreeMap<&GroupId, BTreeMap<u32, &NodeView>> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for view in nodes {
        assert!(
            is_node_id(&view.node, &view.group, view.index),
            "node view {} is not {}-{}",
            view.node,
            view.group,
            view.index
        );
        assert!(ids.insert(&view.node), "two node views for {}", view.node);
        by_group
            .entry(&view.group)
            .or_default()
            .insert(view.index, view);
    }
    by_group
}

/// When a failed, wanted node gets its next lease.
enum Replacement {
    Now,
    At(Instant),
    Never,
}

fn replacement_due(config: &Config, attempt: u32, failed_at: Instant, now: Instant) -> Replacement {
    match config.replacement {
        ReplacementPolicy::None => Replacement::Never,
        ReplacementPolicy::Bounded {
            attempts_max,
            backoff_base,
            backoff_max,
            ..
        } => {
            if attempt >= attempts_max {
                return Replacement::Never;
            }
            let due = failed_at + crate::time::backoff(attempt, backoff_base, backoff_max);
            if now >= due {
                Replacement::Now
            } else {
                Replacement::At(due)
            }
        }
    }
}
