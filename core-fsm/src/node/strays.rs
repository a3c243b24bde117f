//! Stray leases: a create answer that arrives after its intent was
//! abandoned names a real lease that no intent owns. It is journaled
//! (`StrayLease`), destroyed with bounded retries like the node's own lease,
//! and closed with `LeaseReleased`; a restart restores it from the journal,
//! so it is never leaked.

use super::Effect;
use super::machine::Machine;
use crate::ids::OpId;
use crate::port::{JournalRecord, LeaseFacts, ProviderError, ProviderErrorKind};
use crate::time::Instant;
use std::sync::Arc;

/// Stray leases tracked at once per node. Each comes from an abandoned
/// intent (at most `intents_max` per attempt) or a misdirected answer; one
/// beyond the bound is still journaled and destroyed, but not retried
/// before the next restart restores it.
pub(super) const STRAYS_MAX: usize = 8;

/// One stray lease being destroyed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Stray {
    pub(super) lease: Arc<LeaseFacts>,
    /// Destroys sent so far (at most `destroy_attempts_max` per round).
    pub(super) tries: u32,
    /// Where its destroy stands.
    pub(super) state: StrayState,
}

/// Where a stray's destroy stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StrayState {
    /// Rebuilt from the journal: the destroy waits for `Start` (or a
    /// `Destroy`).
    Restored,
    /// A destroy is in flight, answered or failed by `deadline`.
    Destroying { op: OpId, deadline: Instant },
    /// The next destroy is due then.
    Waiting { due: Instant },
    /// Retries spent: the next `Destroy` tries again.
    Spent,
}

impl StrayState {
    /// The in-flight destroy's deadline, or the time of the next try.
    fn due(self) -> Option<Instant> {
        match self {
            StrayState::Destroying { deadline, .. } => Some(deadline),
            StrayState::Waiting { due } => Some(due),
            StrayState::Restored | StrayState::Spent => None,
        }
    }
}

impl Stray {
    fn is_op(&self, op: OpId) -> bool {
        matches!(self.state, StrayState::Destroying { op: o, .. } if o == op)
    }
}

impl Machine {
    /// A create answer for an abandoned intent: journal the lease, then
    /// destroy it.
    pub(super) fn adopt_stray(
        &mut self,
        now: Instant,
        lease: Arc<LeaseFacts>,
        out: &mut Vec<Effect>,
    ) {
        if self
            .strays
            .iter()
            .any(|s| s.lease.lease_id == lease.lease_id)
        {
            self.ignored += 1;
            return;
        }
        self.stray_leases += 1;
        out.push(Effect::Persist(JournalRecord::StrayLease {
            node: self.spec.node_id.clone(),
            lease: lease.clone(),
        }));
        if self.strays.len() >= STRAYS_MAX {
            let op = self.next_op();
            out.push(Effect::DestroyLease { op, lease });
            return;
        }
        self.strays.push(Stray {
            lease,
            tries: 0,
            state: StrayState::Spent,
        });
        let at = self.strays.len() - 1;
        self.issue_stray_destroy(now, at, 1, out);
    }

    pub(super) fn is_stray_op(&self, op: OpId) -> bool {
        self.strays.iter().any(|s| s.is_op(op))
    }

    /// Whether a restored stray's destroy waits for `Start`.
    pub(super) fn strays_restored(&self) -> bool {
        self.strays.iter().any(|s| s.state == StrayState::Restored)
    }

    pub(super) fn on_stray_destroyed(
        &mut self,
        now: Instant,
        op: OpId,
        result: Result<(), ProviderError>,
        out: &mut Vec<Effect>,
    ) {
        let at = self
            .strays
            .iter()
            .position(|s| s.is_op(op))
            .expect("a stray's op");
        match result {
            Err(e) if e.kind != ProviderErrorKind::NotFound => self.stray_failed(now, at),
            _ => {
                let stray = self.strays.remove(at);
                out.push(Effect::Persist(JournalRecord::LeaseReleased {
                    node: self.spec.node_id.clone(),
                    lease_id: stray.lease.lease_id.clone(),
                }));
            }
        }
    }

    /// Stray deadlines and retries due at `now`.
    pub(super) fn on_stray_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        for at in 0..self.strays.len() {
            let stray = &self.strays[at];
            match stray.state {
                StrayState::Destroying { deadline, .. } if deadline <= now => {
                    self.stray_failed(now, at)
                }
                StrayState::Waiting { due } if due <= now => {
                    let tries = stray.tries + 1;
                    self.issue_stray_destroy(now, at, tries, out);
                }
                _ => {}
            }
        }
    }

    /// Sends the destroys of strays that wait for nothing (restored, or
    /// retries spent): a `Start` after a restore, or a `Destroy`.
    /// Whether any was sent.
    pub(super) fn retry_spent_strays(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
        let mut sent = false;
        for at in 0..self.strays.len() {
            if matches!(
                self.strays[at].state,
                StrayState::Restored | StrayState::Spent
            ) {
                self.issue_stray_destroy(now, at, 1, out);
                sent = true;
            }
        }
        sent
    }

    /// The earliest stray deadline or retry.
    pub(super) fn stray_deadline(&self) -> Option<Instant> {
        self.strays.iter().filter_map(|s| s.state.due()).min()
    }

    fn stray_failed(&mut self, now: Instant, at: usize) {
        let c = self.config;
        let stray = &mut self.strays[at];
        stray.state = if stray.tries < c.destroy_attempts_max {
            let wait = crate::time::backoff(stray.tries, c.retry_backoff_base, c.retry_backoff_max);
            StrayState::Waiting { due: now + wait }
        } else {
            StrayState::Spent
        };
    }

    fn issue_stray_destroy(&mut self, now: Instant, at: usize, tries: u32, out: &mut Vec<Effect>) {
        let op = self.next_op();
        let timeout = self.spec.boot.timeouts.destroy_timeout;
        let stray = &mut self.strays[at];
        stray.tries = tries;
        stray.state = StrayState::Destroying {
            op,
            deadline: now + timeout,
        };
        out.push(Effect::DestroyLease {
            op,
            lease: stray.lease.clone(),
        });
    }

    /// N13: strays are bounded, and each is restored, destroying, waiting
    /// for a bounded retry, or spent (its state says which).
    pub(super) fn check_strays(&self) {
        let id = self.node();
        assert!(self.strays.len() <= STRAYS_MAX, "N13 {id}: strays bounded");
        for s in &self.strays {
            assert!(
                s.tries <= self.config.destroy_attempts_max,
                "N13 {id}: stray destroys bounded"
            );
        }
    }
}
