//! The journal folded, once for every reader: a restore, `drover status`
//! and `drover down` (the runtime's ledger), the runtime's lease book. The
//! journal holds only what a crash must not lose: intents (with their
//! nonces), known leases, failures, readiness, destroy requests, releases.

use super::Lifecycle;
use crate::ids::{AgentId, GroupId, LeaseId, LogicalNodeId, Nonce, RunId};
use crate::port::{JournalRecord, LeaseFacts, LogSeqs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the journal says of one node, folded in journal order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journaled {
    /// Attempt of the last intent.
    pub attempt: u32,
    /// Nonce of the last intent.
    pub nonce: Option<Nonce>,
    /// The last intent has neither a known lease nor an abandonment.
    pub intent_open: bool,
    /// The lease of the last intent.
    pub lease: Option<Arc<LeaseFacts>>,
    /// Why the node failed, if it did.
    pub failed: Option<String>,
    /// The agent of the last `NodeReady` (kept across intents).
    pub agent: Option<AgentId>,
    /// The last intent's node was ready (`NodeReady` journaled since).
    pub ready: bool,
    /// A destroy was requested.
    pub destroy_requested: bool,
    /// The lease was released.
    pub released: bool,
    /// The last log sequence numbers journaled (kept across intents).
    pub log_seqs: LogSeqs,
    /// The attempt of a replacement requested and not yet begun (its
    /// intent not journaled).
    pub replace: Option<u32>,
    /// Stray leases not yet released (kept across intents).
    pub strays: Vec<Arc<LeaseFacts>>,
}

impl Journaled {
    /// The node a record is about, if it is about one.
    pub fn node_of(record: &JournalRecord) -> Option<&LogicalNodeId> {
        match record {
            JournalRecord::RunStarted { .. } | JournalRecord::DesiredSet { .. } => None,
            JournalRecord::LeaseIntent { node, .. }
            | JournalRecord::LeaseKnown { node, .. }
            | JournalRecord::IntentAbandoned { node, .. }
            | JournalRecord::NodeFailed { node, .. }
            | JournalRecord::NodeReady { node, .. }
            | JournalRecord::DestroyRequested { node }
            | JournalRecord::ReplaceRequested { node, .. }
            | JournalRecord::StrayLease { node, .. }
            | JournalRecord::LeaseReleased { node, .. } => Some(node),
        }
    }

    /// Folds one record of this node.
    pub fn apply(&mut self, record: &JournalRecord) {
        match record {
            JournalRecord::RunStarted { .. } | JournalRecord::DesiredSet { .. } => {}
            // A new intent starts a new lease's story (first lease, a
            // successor of an abandoned intent, or a replacement).
            JournalRecord::LeaseIntent { nonce, attempt, .. } => {
                *self = Journaled {
                    attempt: *attempt,
                    nonce: Some(*nonce),
                    intent_open: true,
                    agent: self.agent.take(),
                    log_seqs: self.log_seqs,
                    strays: std::mem::take(&mut self.strays),
                    ..Journaled::default()
                }
            }
            JournalRecord::LeaseKnown { lease, .. } => {
                self.nonce = Some(lease.nonce);
                self.lease = Some(lease.clone());
                self.intent_open = false;
            }
            JournalRecord::IntentAbandoned { nonce, .. } => {
                if self.nonce == Some(*nonce) {
                    self.intent_open = false;
                }
            }
            JournalRecord::NodeFailed {
                reason, log_seqs, ..
            } => {
                self.failed = Some(reason.clone());
                self.log_seqs = self.log_seqs.max_each(*log_seqs);
            }
            JournalRecord::NodeReady {
                agent, log_seqs, ..
            } => {
                self.agent = Some(agent.clone());
                self.ready = true;
                self.log_seqs = self.log_seqs.max_each(*log_seqs);
            }
            // An explicit destroy outranks a replacement requested before.
            JournalRecord::DestroyRequested { .. } => {
                self.destroy_requested = true;
                self.replace = None;
            }
            JournalRecord::ReplaceRequested { attempt, .. } => self.replace = Some(*attempt),
            JournalRecord::StrayLease { lease, .. } => {
                if !self.strays.iter().any(|s| s.lease_id == lease.lease_id) {
                    self.strays.push(lease.clone());
                }
            }
            JournalRecord::LeaseReleased { lease_id, .. } => {
                match self.strays.iter().position(|s| &s.lease_id == lease_id) {
                    Some(at) => {
                        self.strays.remove(at);
                    }
                    None => self.released = true,
                }
            }
        }
    }

    /// The lease the node holds: known and not released (strays aside).
    pub fn standing_lease(&self) -> Option<&Arc<LeaseFacts>> {
        self.lease.as_ref().filter(|_| !self.released)
    }

    /// The nonce of the last intent while it is open (a lease may exist
    /// for it that the journal never heard of).
    pub fn open_intent(&self) -> Option<Nonce> {
        self.nonce.filter(|_| self.intent_open)
    }

    /// The stage the journal implies: the last of the journaled ones the
    /// node reached (those between are not journaled).
    pub fn stage(&self) -> Lifecycle {
        let reached = [
            (self.released && !self.intent_open, Lifecycle::Destroyed),
            (self.failed.is_some(), Lifecycle::Failed),
            (self.ready, Lifecycle::Dormant),
            (self.lease.is_some(), Lifecycle::LeaseCreated),
            (self.nonce.is_some(), Lifecycle::LeaseRequested),
        ];
        (reached.into_iter())
            .find_map(|(reached, stage)| reached.then_some(stage))
            .unwrap_or(Lifecycle::New)
    }
}

/// The run's journal folded: its id, the operator's desired counts and
/// each node's [`Journaled`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalFold {
    /// The run, once started.
    pub run_id: Option<RunId>,
    /// Groups whose desired count the operator set, with the last count.
    pub desired: BTreeMap<GroupId, u32>,
    /// Each node the journal names.
    pub nodes: BTreeMap<LogicalNodeId, Journaled>,
}

impl JournalFold {
    /// Folds one record.
    pub fn apply(&mut self, record: &JournalRecord) {
        match record {
            JournalRecord::RunStarted { run_id } => self.run_id = Some(*run_id),
            JournalRecord::DesiredSet { group, count } => {
                self.desired.insert(group.clone(), *count);
            }
            _ => {
                if let Some(node) = Journaled::node_of(record) {
                    self.nodes.entry(node.clone()).or_default().apply(record);
                }
            }
        }
    }

    /// The node whose standing lease is `lease` (strays aside), and the
    /// lease's facts.
    pub fn holder(&self, lease: &LeaseId) -> Option<(&LogicalNodeId, &Arc<LeaseFacts>)> {
        self.nodes.iter().find_map(|(node, journaled)| {
            (journaled.standing_lease())
                .filter(|facts| &facts.lease_id == lease)
                .map(|facts| (node, facts))
        })
    }
}
