//! Rebuilding a node manager from the journal after a restart.
//!
//! The journal holds only what a crash must not lose: intents (with their
//! nonces), known leases, failures, readiness, destroy requests and releases.
//! [`Journaled`] folds one node's records; [`Machine::restore`] turns the
//! fold into a phase whose pending work the next `Start` resumes.

use super::machine::{Machine, Pending, Phase, Resolve, Then};
use super::{AgentFacts, Config};
use crate::ids::{AgentId, LogicalNodeId, Nonce};
use crate::plan::LogicalNodeSpec;
use crate::port::{JournalRecord, LeaseFacts, LogSeqs};
use crate::rng::DetRng;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
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
    /// The agent of a ready node.
    pub agent: Option<AgentId>,
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

    /// The phase a restart resumes from (`Restored` when `Start` has work
    /// to do).
    fn phase(&self) -> Phase {
        let resolving = |then| Phase::Restored(Pending::Resolve(Resolve::new(1, then)));
        let has_lease = self.lease.is_some() && !self.released;
        if let (Some(attempt), false) = (self.replace, self.destroy_requested) {
            // A replacement a restart interrupted: finish the destroy, or
            // go straight to the new intent.
            return Phase::Restored(match has_lease {
                true => Pending::Destroy { replace: attempt },
                false => Pending::Replace { attempt },
            });
        }
        if self.destroy_requested {
            return match (has_lease, self.intent_open) {
                (true, _) => Phase::Restored(Pending::Destroy { replace: 0 }),
                (false, true) => resolving(Then::Destroy),
                (false, false) => Phase::Destroyed,
            };
        }
        match (has_lease, self.intent_open) {
            (_, true) if self.failed.is_some() => Phase::Failed { unresolved: true },
            (_, true) => resolving(Then::Bootstrap),
            (true, _) if self.agent.is_some() => Phase::Dormant {
                rejoin_allowed: true,
            },
            (true, _) if self.failed.is_some() => Phase::Failed { unresolved: false },
            // Known lease, not ready: bootstrap again from endpoint lookup.
            (true, _) => Phase::Restored(Pending::Locate),
            (false, false) if self.released => Phase::Destroyed,
            (false, false) if self.failed.is_some() => Phase::Failed { unresolved: false },
            (false, false) => Phase::New,
        }
    }
}

impl Machine {
    /// A node manager rebuilt from its journal fold; `Start` resumes it.
    pub fn restore(
        config: Config,
        spec: LogicalNodeSpec,
        rng: DetRng,
        journaled: &Journaled,
    ) -> Machine {
        let mut machine = Machine::new(config, spec, rng);
        let phase = journaled.phase();
        let r = &mut machine.record;
        r.attempt = journaled.attempt;
        r.nonce = journaled.nonce;
        r.lease = journaled.lease.clone();
        r.log_seqs = journaled.log_seqs;
        if journaled.released && r.lease.is_some() {
            r.destroyed_at = Some(Instant::ZERO);
        }
        if matches!(phase, Phase::Failed { .. }) {
            r.failed_reason = journaled.failed.clone();
        }
        if matches!(phase, Phase::Dormant { .. }) {
            let agent = journaled.agent.clone().expect("Dormant needs an agent");
            r.agent = Some(AgentFacts {
                agent,
                joined_at: Instant::ZERO,
                handed_off_at: Some(Instant::ZERO),
            });
        }
        machine.strays = journaled
            .strays
            .iter()
            .take(super::strays::STRAYS_MAX)
            .map(|lease| super::strays::Stray {
                lease: lease.clone(),
                tries: 0,
                state: super::strays::StrayState::Restored,
            })
            .collect();
        machine.phase = phase;
        machine
    }
}
