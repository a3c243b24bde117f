//! A small world for reconciler tests: a ledger of node views that applies
//! decisions the way the orchestrator does, and resolves in-flight work
//! (provisioning, destroying) from a script.

#![allow(dead_code)]

use core_fsm::Instant;
use core_fsm::ids::{GroupId, LogicalNodeId};
use core_fsm::plan::node_id;
use core_fsm::reconcile::{self, Action, Condition, Decision, NodeView, Quarantine};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The orchestrator's ledger, as far as the reconciler can see it.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// Node views by id.
    pub nodes: BTreeMap<LogicalNodeId, NodeView>,
    /// Failures by host.
    pub quarantine: Quarantine,
}

/// What happens to one in-flight node when the world moves on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Provisioning succeeds (the node is handed off) on this host.
    Ready(u8),
    /// Provisioning fails on this host.
    Fail(u8),
    /// Nothing happens yet.
    Wait,
}

pub fn host_name(host: u8) -> String {
    format!("host-{host}")
}

pub fn view(group: &str, index: u32, attempt: u32, condition: Condition) -> NodeView {
    let group = GroupId::from(group);
    NodeView {
        node: node_id(&group, index),
        group,
        index,
        attempt,
        condition,
        host: None,
    }
}

impl World {
    pub fn from_views(views: Vec<NodeView>) -> World {
        World {
            nodes: views.into_iter().map(|v| (v.node.clone(), v)).collect(),
            quarantine: Quarantine::default(),
        }
    }

    pub fn views(&self) -> Vec<NodeView> {
        self.nodes.values().cloned().collect()
    }

    /// Applies a decision the way the orchestrator does: a create records a
    /// provisioning node at attempt 1, a destroy marks it destroying, a
    /// replace destroys the old lease and starts attempt `n` at once.
    pub fn apply(&mut self, decision: &Decision) {
        for action in &decision.actions {
            match action {
                Action::Create { group, index } => {
                    let node = node_id(group, *index);
                    assert!(!self.nodes.contains_key(&node), "create of recorded {node}");
                    let v = view(group.as_str(), *index, 1, Condition::Provisioning);
                    self.nodes.insert(node, v);
                }
                Action::Destroy { node } => {
                    let v = self.nodes.get_mut(node).expect("destroy of unknown node");
                    v.condition = Condition::Destroying;
                }
                Action::Replace { node, attempt } => {
                    let v = self.nodes.get_mut(node).expect("replace of unknown node");
                    assert!(matches!(v.condition, Condition::Failed { .. }));
                    assert_eq!(*attempt, v.attempt + 1);
                    v.attempt = *attempt;
                    v.condition = Condition::Provisioning;
                    v.host = None;
                }
            }
        }
    }

    /// Moves in-flight nodes on: destroys complete, provisioning nodes take
    /// the outcome `script` gives them (given the node and its attempt).
    pub fn settle(&mut self, now: Instant, mut script: impl FnMut(&NodeView) -> Outcome) {
        for v in self.nodes.values_mut() {
            match v.condition {
                Condition::Destroying => v.condition = Condition::Destroyed,
                Condition::Provisioning => match script(v) {
                    Outcome::Ready(host) => {
                        v.condition = Condition::Ready;
                        v.host = Some(host_name(host));
                    }
                    Outcome::Fail(host) => {
                        v.condition = Condition::Failed { at: now };
                        v.host = Some(host_name(host));
                        self.quarantine.record_failure(&host_name(host));
                    }
                    Outcome::Wait => {}
                },
                _ => {}
            }
        }
    }
}

pub fn condition_text(c: Condition) -> String {
    match c {
        Condition::Provisioning => "Provisioning".to_owned(),
        Condition::Ready => "Ready".to_owned(),
        Condition::Failed { at } => format!("Failed(at {at})"),
        Condition::Destroying => "Destroying".to_owned(),
        Condition::Destroyed => "Destroyed".to_owned(),
    }
}

pub fn views_text(views: &[NodeView]) -> String {
    if views.is_empty() {
        return "(no records)".to_owned();
    }
    let parts: Vec<String> = views
        .iter()
        .map(|v| {
            let host = v
                .host
                .as_deref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default();
            format!(
                "{} #{} {}{}",
                v.node,
                v.attempt,
                condition_text(v.condition),
                host
            )
        })
        .collect();
    parts.join(", ")
}

pub fn action_text(a: &Action) -> String {
    match a {
        Action::Create { group, index } => format!("Create {}", node_id(group, *index)),
        Action::Destroy { node } => format!("Destroy {node}"),
        Action::Replace { node, attempt } => format!("Replace {node} attempt {attempt}"),
    }
}

pub fn decision_text(d: &Decision) -> String {
    let mut out = String::new();
    if d.actions.is_empty() {
        out.push_str("no actions");
    } else {
        let actions: Vec<String> = d.actions.iter().map(action_text).collect();
        out.push_str(&actions.join("; "));
    }
    match d.requeue_at {
        Some(at) => write!(out, " | requeue {at}").unwrap(),
        None => out.push_str(" | no requeue"),
    }
    if d.is_quiescent() {
        out.push_str(" | quiescent");
    }
    out
}

/// Convenience: the reconciler on the world's current views.
pub fn pass(
    config: &reconcile::Config,
    desired: &reconcile::Desired,
    world: &World,
    now: Instant,
) -> Decision {
    reconcile::reconcile(config, desired, &world.views(), &world.quarantine, now)
}
