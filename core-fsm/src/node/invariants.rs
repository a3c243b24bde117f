//! The node manager's invariants N0-N12 (see `spec/provisioning.md`),
//! checked after every step by tests and simulators.

use super::machine::{Pending, Phase};
use super::{Lifecycle, TimerKind};

impl super::Machine {
    pub(super) fn check_ledger(&self) {
        let r = &self.record;
        let id = r.node();
        // N0 and N1 hold by construction: the stage and readiness are
        // derived from the phase (`Machine::stage`, `Machine::is_ready`).
        if self.stage() == Lifecycle::Dormant {
            let agent = r.agent.as_ref();
            assert!(agent.is_some(), "N2 {id}: Dormant has agent facts");
            assert!(
                agent.is_some_and(|a| a.handed_off_at.is_some()),
                "N2 {id}: Dormant was handed off"
            );
            assert!(self.session().is_none(), "N2 {id}: Dormant has no session");
        }
        if matches!(
            self.phase,
            Phase::Destroying { .. }
                | Phase::Locating { .. }
                | Phase::Restored(Pending::Destroy { .. } | Pending::Locate)
        ) {
            assert!(
                r.lease.is_some(),
                "N3 {id}: destroy and lookup only of a known lease"
            );
        }
        if matches!(
            self.stage(),
            Lifecycle::BootstrapRunning | Lifecycle::AgentJoined
        ) {
            assert!(
                r.lease.is_some() && r.endpoint.is_some(),
                "N4 {id}: bootstrap needs lease and endpoint"
            );
            assert!(r.bootstrap.is_some(), "N4 {id}: bootstrap facts recorded");
        }
        if self.stage() == Lifecycle::AgentJoined {
            assert!(r.agent.is_some(), "N5 {id}: AgentJoined has agent facts");
        }
        if self.stage() == Lifecycle::Failed {
            assert!(r.failed_reason.is_some(), "N6 {id}: Failed has a reason");
        }
        if self.stage() != Lifecycle::New {
            assert!(
                r.attempt >= 1 || self.stage() == Lifecycle::Destroyed,
                "N7 {id}: an intent precedes every stage"
            );
        }
        if r.lease.is_some() {
            assert!(
                r.nonce.is_some(),
                "N8 {id}: a lease is known only through an intent"
            );
        }
        if self.stage() == Lifecycle::Destroyed && r.lease.is_some() {
            assert!(
                r.destroyed_at.is_some(),
                "N9 {id}: a destroyed lease has destroyed_at"
            );
        }
    }

    pub(super) fn check_timers(&self) {
        let id = self.record.node();
        let t = &self.timers;
        match self.phase {
            Phase::New
            | Phase::Dormant { .. }
            | Phase::Failed { .. }
            | Phase::Destroyed
            | Phase::Restored(_) => {
                assert!(
                    t.is_empty(),
                    "N10 {id}: no timer armed in {:?}",
                    self.phase.stage()
                )
            }
            Phase::Bootstrapping { .. } | Phase::Joined { .. } => {
                assert!(
                    t.is_empty(),
                    "N10 {id}: the session owns the bootstrap timers"
                )
            }
            Phase::Requesting { op, tries, .. } => {
                let armed = if op.is_some() {
                    TimerKind::LeaseCreate
                } else {
                    TimerKind::CreateRetry
                };
                assert!(
                    t.is_set(&armed) && t.len() == 1,
                    "N11 {id}: a create has its timeout, a retry its time"
                );
                assert!(
                    tries >= 1 && tries <= self.config.create_attempts_max,
                    "N11 {id}: creates of one intent are bounded"
                );
            }
            Phase::Locating { op } => {
                assert!(
                    t.is_set(&TimerKind::EndpointDeadline),
                    "N11 {id}: lookups are bounded"
                );
                let polls = usize::from(t.is_set(&TimerKind::EndpointPoll));
                assert!(op.is_none() || polls == 0, "N12 {id}: one lookup at a time");
            }
            Phase::Resolving { op, .. } => {
                let armed = if op.is_some() {
                    TimerKind::ListDeadline
                } else {
                    TimerKind::ListRetry
                };
                assert!(
                    t.is_set(&armed) && t.len() == 1,
                    "N11 {id}: a list is bounded"
                );
            }
            Phase::Destroying { op, .. } => {
                if op.is_some() {
                    assert!(
                        t.is_set(&TimerKind::DestroyDeadline) && t.len() == 1,
                        "N11 {id}: a destroy has its timeout"
                    );
                } else {
                    assert!(
                        t.len() <= 1 && !t.is_set(&TimerKind::DestroyDeadline),
                        "N12 {id}: one destroy at a time"
                    );
                }
            }
        }
    }
}
