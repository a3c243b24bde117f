//! The NodeManager: one per logical node, owner of that node's ledger
//! (seed 000 §7-8, §13-14).

use serde::{Deserialize, Serialize};

/// A node's stage (seed 000 §7.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// Known, nothing asked yet.
    New,
    /// A create was asked of the provider.
    LeaseRequested,
    /// The lease exists; its endpoint is not known yet.
    LeaseCreated,
    /// The SSH endpoint is known.
    EndpointKnown,
    /// A bootstrap session is running.
    BootstrapRunning,
    /// The agent joined; waiting for the session to close SSH.
    AgentJoined,
    /// SSH closed after the join.
    HandedOff,
    /// Ready; no polling, no repair; kept for query and teardown.
    Dormant,
    /// Failed before handoff (terminal; the lease may still need a destroy).
    Failed,
    /// Its lease was destroyed (terminal).
    Destroyed,
}
