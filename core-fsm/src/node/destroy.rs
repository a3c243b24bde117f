//! The node manager's destroy and replace transitions: a destroy of the
//! known lease (bounded retries), and a replacement that destroys first.

use super::machine::{Pending, Phase, Resolve, Then};
use super::{Effect, TimerKind};
use crate::port::{JournalRecord, ProviderError, ProviderErrorKind};
use crate::time::Instant;
use crate::time::backoff;

impl super::Machine {
    pub(super) fn on_destroy(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let strays_sent = self.retry_spent_strays(now, out);
        // A restored open intent waits for Start; a Destroy (say, Teardown
        // before Start) resolves it now, so its lease is found and destroyed.
        match self.phase {
            Phase::Restored(Pending::Resolve(resolve)) => {
                if resolve.then != Then::Destroy {
                    self.persist_destroy_requested(out);
                }
                self.issue_list(now, Resolve::new(resolve.intents, Then::Destroy), out)
            }
            // A restored replacement not yet resumed: the destroy cancels it.
            Phase::Restored(Pending::Replace { .. }) => {
                self.persist_destroy_requested(out);
                self.phase = Phase::Destroyed;
            }
            // A known lease, restored: destroy it instead of looking it up.
            Phase::Restored(Pending::Locate) => self.begin_destroy(now, out),
            // A destroy the restart interrupted: it tries now, and an
            // explicit Destroy outranks a pending replacement.
            Phase::Restored(Pending::Destroy { replace }) => {
                if replace > 0 {
                    self.persist_destroy_requested(out);
                }
                self.issue_destroy(now, 1, 0, out)
            }
            Phase::New => self.enter(Phase::Destroyed, out),
            Phase::Requesting { op: None, .. } => {
                // Every create of this intent was answered `Transient`:
                // nothing was created, so the intent closes with no lease.
                self.timers.clear();
                self.persist_destroy_requested(out);
                self.persist_abandoned(out);
                self.enter(Phase::Destroyed, out);
            }
            Phase::Requesting {
                op,
                tries,
                intents,
                destroy_after: false,
            } => {
                // The lease is not known yet: destroy it once the answer says.
                self.persist_destroy_requested(out);
                self.phase = Phase::Requesting {
                    op,
                    tries,
                    intents,
                    destroy_after: true,
                };
            }
            Phase::Resolving { op, resolve } if resolve.then != Then::Destroy => {
                self.persist_destroy_requested(out);
                let resolve = Resolve {
                    then: Then::Destroy,
                    ..resolve
                };
                self.phase = Phase::Resolving { op, resolve };
            }
            Phase::Locating { .. } | Phase::Dormant { .. } => self.begin_destroy(now, out),
            Phase::Bootstrapping { session } | Phase::Joined { session } => {
                out.push(Effect::CancelBootstrap { session });
                self.begin_destroy(now, out);
            }
            Phase::Failed { unresolved: true } => {
                self.persist_destroy_requested(out);
                let intents = self.config.intents_max;
                self.issue_list(now, Resolve::new(intents, Then::Destroy), out);
            }
            Phase::Failed { unresolved: false } if self.record.lease.is_some() => {
                self.begin_destroy(now, out)
            }
            Phase::Failed { unresolved: false } => self.enter(Phase::Destroyed, out),
            // Waiting for a retry, or retries spent: a new Destroy tries now,
            // and an explicit Destroy outranks a pending replacement (the
            // journal says so, or a restart would resume the replacement).
            Phase::Destroying {
                op: None, replace, ..
            } => {
                if replace > 0 {
                    self.persist_destroy_requested(out);
                }
                self.issue_destroy(now, 1, 0, out)
            }
            // A destroy in flight: this request is not lost if that attempt
            // fails with its retries spent. It renews the budget (the attempt
            // in flight counts as the one before the first, `tries` 0), so
            // a second `Teardown` or `drover down` always tries again.
            Phase::Destroying {
                op: Some(op),
                replace,
                ..
            } => {
                if replace > 0 {
                    self.persist_destroy_requested(out);
                }
                self.phase = Phase::Destroying {
                    op: Some(op),
                    tries: 0,
                    replace: 0,
                };
            }
            Phase::Destroyed if strays_sent => {}
            Phase::Requesting { .. } | Phase::Resolving { .. } | Phase::Destroyed => {
                self.ignored += 1
            }
        }
    }

    /// Replacement: destroy the lease the failed node still holds, then a
    /// fresh intent with `attempt`.
    pub(super) fn on_replace(&mut self, now: Instant, attempt: u32, out: &mut Vec<Effect>) {
        if self.holds_no_own_lease() {
            return self.request_lease(now, attempt, 1, out);
        }
        self.persist_replace_requested(attempt, out);
        self.issue_destroy(now, 1, attempt, out);
    }

    pub(super) fn on_destroyed(
        &mut self,
        now: Instant,
        result: Result<(), ProviderError>,
        tries: u32,
        replace: u32,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        match result {
            Err(e) if e.kind != ProviderErrorKind::NotFound => {
                self.destroy_failed(now, tries, replace, e.message)
            }
            _ => {
                let lease_id = self
                    .record
                    .lease_id()
                    .expect("a destroy needs a lease")
                    .clone();
                let node = self.record.desired.node_id.clone();
                out.push(Effect::Persist(JournalRecord::LeaseReleased {
                    node,
                    lease_id,
                }));
                self.record.destroyed_at = Some(now);
                self.record.destroy_error = None;
                self.enter(Phase::Destroyed, out);
                if replace > 0 {
                    self.request_lease(now, replace, 1, out);
                }
            }
        }
    }

    pub(super) fn destroy_failed(&mut self, now: Instant, tries: u32, replace: u32, why: String) {
        self.timers.clear();
        self.record.destroy_error = Some(why);
        self.phase = Phase::Destroying {
            op: None,
            tries,
            replace,
        };
        if tries < self.config.destroy_attempts_max {
            let c = &self.config;
            self.timers.set(
                TimerKind::DestroyRetry,
                now + backoff(tries, c.retry_backoff_base, c.retry_backoff_max),
            );
        }
    }

    pub(super) fn begin_destroy(&mut self, now: Instant, out: &mut Vec<Effect>) {
        self.persist_destroy_requested(out);
        self.issue_destroy(now, 1, 0, out);
    }

    pub(super) fn issue_destroy(
        &mut self,
        now: Instant,
        tries: u32,
        replace: u32,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        let op = self.next_op();
        self.enter(
            Phase::Destroying {
                op: Some(op),
                tries,
                replace,
            },
            out,
        );
        let lease = self
            .record
            .lease
            .clone()
            .expect("destroy only a known lease (N3)");
        out.push(Effect::DestroyLease { op, lease });
        let timeout = self.record.desired.boot.timeouts.destroy_timeout;
        self.timers.set(TimerKind::DestroyDeadline, now + timeout);
    }
}
