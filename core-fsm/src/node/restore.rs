//! Rebuilding a node manager from the journal after a restart:
//! [`Machine::restore`] turns a node's [`Journaled`] fold into a phase whose
//! pending work the next `Start` resumes.

use super::machine::{Failure, Machine, Pending, Phase, Resolve, Then};
use super::{AgentFacts, Config, Journaled};
use crate::plan::LogicalNodeSpec;
use crate::rng::DetRng;
use crate::time::Instant;

impl Journaled {
    /// The phase a restart resumes from (`Restored` when `Start` has work
    /// to do).
    fn phase(&self) -> Phase {
        let resolving = |then| Phase::Restored(Pending::Resolve(Resolve::new(1, then)));
        let lease = self.standing_lease().cloned();
        let failure = |reason: &String| Failure {
            reason: reason.clone(),
            at: Instant::ZERO,
        };
        let released = || {
            (self.lease.clone())
                .filter(|_| self.released)
                .map(|lease| (lease, Instant::ZERO))
        };
        if let (Some(attempt), false) = (self.replace, self.destroy_requested) {
            // A replacement a restart interrupted: finish the destroy, or
            // go straight to the new intent.
            return Phase::Restored(match lease {
                Some(lease) => Pending::Destroy {
                    replace: attempt,
                    lease,
                },
                None => Pending::Replace { attempt },
            });
        }
        if self.destroy_requested {
            return match (lease, self.intent_open) {
                (Some(lease), _) => Phase::Restored(Pending::Destroy { replace: 0, lease }),
                (None, true) => resolving(Then::Destroy),
                (None, false) => Phase::Destroyed {
                    released: released(),
                },
            };
        }
        match (lease, self.intent_open, &self.failed) {
            (lease, true, Some(reason)) => Phase::Failed {
                unresolved: true,
                lease,
                failure: failure(reason),
            },
            (_, true, None) => resolving(Then::Bootstrap),
            (Some(lease), false, _) if self.ready => Phase::Dormant {
                lease,
                agent: AgentFacts {
                    agent: self.agent.clone().expect("a ready node has an agent"),
                    joined_at: Instant::ZERO,
                    handed_off_at: Some(Instant::ZERO),
                },
                rejoin_allowed: true,
            },
            (lease @ Some(_), false, Some(reason)) => Phase::Failed {
                unresolved: false,
                lease,
                failure: failure(reason),
            },
            // Known lease, not ready: bootstrap again from endpoint lookup.
            (Some(lease), false, None) => Phase::Restored(Pending::Locate { lease }),
            (None, false, _) if self.released => Phase::Destroyed {
                released: released(),
            },
            (None, false, Some(reason)) => Phase::Failed {
                unresolved: false,
                lease: None,
                failure: failure(reason),
            },
            (None, false, None) => Phase::New,
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
        machine.attempt = journaled.attempt;
        machine.nonce = journaled.nonce;
        machine.log_seqs = journaled.log_seqs;
        // The last lease, destroyed or not, for the record.
        machine.past.lease = journaled.lease.clone();
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
        machine.phase = journaled.phase();
        machine
    }
}
