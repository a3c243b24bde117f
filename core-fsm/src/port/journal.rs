//! The journal's records: the ledger changes a crash must not lose (see
//! the parent module).

use super::{LeaseFacts, LogSeqs};
use crate::ids::{AgentId, GroupId, LeaseId, LogicalNodeId, Nonce, RunId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A ledger change a crash must not lose. The effect loop makes each one
/// durable before it dispatches any later effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JournalRecord {
    /// The run and the plan it runs (digest of the plan's canonical text).
    RunStarted {
        /// The run.
        run_id: RunId,
    },
    /// About to ask a provider for a lease for `node` with this nonce.
    LeaseIntent {
        /// The logical node.
        node: LogicalNodeId,
        /// The nonce that goes into the provider label.
        nonce: Nonce,
        /// Attempt number for this node, from 1.
        attempt: u32,
    },
    /// The lease of an intent exists.
    LeaseKnown {
        /// The logical node.
        node: LogicalNodeId,
        /// The lease.
        lease: Arc<LeaseFacts>,
    },
    /// The create of an intent definitely did not take effect.
    IntentAbandoned {
        /// The logical node.
        node: LogicalNodeId,
        /// The intent's nonce.
        nonce: Nonce,
    },
    /// The node failed before handoff.
    NodeFailed {
        /// The logical node.
        node: LogicalNodeId,
        /// Why.
        reason: String,
        /// The node's last log sequence numbers (absent in old journals).
        #[serde(default)]
        log_seqs: LogSeqs,
    },
    /// The node was handed off to its agent and is dormant and ready.
    NodeReady {
        /// The logical node.
        node: LogicalNodeId,
        /// The agent's identity.
        agent: AgentId,
        /// The node's last log sequence numbers (absent in old journals).
        #[serde(default)]
        log_seqs: LogSeqs,
    },
    /// Teardown of the node began; its lease must go.
    DestroyRequested {
        /// The logical node.
        node: LogicalNodeId,
    },
    /// A failed node is being replaced: the lease it still holds must go,
    /// then a fresh intent with `attempt` follows. A restart between the
    /// two resumes the replacement (a `DestroyRequested` after it cancels
    /// the replacement).
    ReplaceRequested {
        /// The logical node.
        node: LogicalNodeId,
        /// The attempt of the replacement lease.
        attempt: u32,
    },
    /// A lease created for an intent already abandoned (its create answer
    /// came late): it belongs to no intent and must be destroyed. A
    /// `LeaseReleased` with its id closes it.
    StrayLease {
        /// The logical node whose create made it.
        node: LogicalNodeId,
        /// The lease.
        lease: Arc<LeaseFacts>,
    },
    /// The lease is gone.
    LeaseReleased {
        /// The logical node.
        node: LogicalNodeId,
        /// The lease.
        lease_id: LeaseId,
    },
    /// The operator set a group's desired count (it replaces the plan's
    /// count for the rest of the run, also after a restart).
    DesiredSet {
        /// The group.
        group: GroupId,
        /// Its wanted count.
        count: u32,
    },
}
