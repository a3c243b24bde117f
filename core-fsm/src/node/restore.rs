//! Rebuilding a node manager from the journal after a restart:
//! [`Machine::restore`] turns a node's [`Journaled`] fold into a phase whose
//! pending work the next `Start` resumes.

use super::machine::{Machine, Pending, Phase, Resolve, Then};
use super::{AgentFacts, Config, Journaled};
use crate::plan::LogicalNodeSpec;
use crate::rng::DetRng;
use crate::time::Instant;

impl Journaled {
    /// The phase a restart resumes from (`Restored` when `Start` has work
    /// to do).
    fn phase(&self) -> Phase {
        let resolving = |then| Phase::Restored(Pending::Resolve(Resolve::new(1, then)));
        let has_lease = self.standing_lease().is_some();
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
            (true, _) if self.ready => Phase::Dormant {
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
