//! The node manager's invariants N0-N12 (see `spec/provisioning.md`),
//! checked after every step by tests and simulators.

use super::machine::Phase;
use super::{Lifecycle, TimerKind};

impl super::Machine {
    pub(super) fn check_ledger(&self) {
        let id = self.node();
        // N0 and N1 hold by construction: the stage and readiness are
        // derived from the phase (`Machine::stage`, `Machine::is_ready`).
        // So do N3-N6 and N9: the phases that look a lease up, bootstrap on
        // it or destroy it hold it (with the endpoint and the session's
        // facts while it bootstraps, the agent once it joined), `Failed`
        // holds its failure, and `Destroyed` the lease it released, with
        // when.
        if let Phase::Dormant { agent, .. } = &self.phase {
            assert!(
                agent.handed_off_at.is_some(),
                "N2 {id}: Dormant was handed off"
            );
        }
        if self.stage() != Lifecycle::New {
            assert!(
                self.attempt >= 1 || self.stage() == Lifecycle::Destroyed,
                "N7 {id}: an intent precedes every stage"
            );
        }
        if self.phase.lease().is_some() {
            assert!(
                self.nonce.is_some(),
                "N8 {id}: a lease is known only through an intent"
            );
        }
    }

    pub(super) fn check_timers(&self) {
        let id = self.node();
        let t = &self.timers;
        match &self.phase {
            Phase::New
            | Phase::Dormant { .. }
            | Phase::Failed { .. }
            | Phase::Destroyed { .. }
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
            &Phase::Requesting { op, tries, .. } => {
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
            Phase::Locating { op, .. } => {
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
