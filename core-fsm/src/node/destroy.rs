//! The node manager's destroy and replace transitions: a destroy of the
//! known lease (bounded retries), and a replacement that destroys first.

use super::machine::{Pending, Phase, Resolve, Then};
use super::{Effect, TimerKind};
use crate::port::{JournalRecord, LeaseFacts, ProviderError, ProviderErrorKind};
use crate::time::Instant;
use crate::time::backoff;
use std::sync::Arc;

impl super::Machine {
    pub(super) fn on_destroy(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let strays_sent = self.retry_spent_strays(now, out);
        // A restored open intent waits for Start; a Destroy (say, Teardown
        // before Start) resolves it now, so its lease is found and destroyed.
        match &self.phase {
            Phase::Restored(Pending::Resolve(resolve)) => {
                let intents = resolve.intents;
                if resolve.then != Then::Destroy {
                    self.persist_destroy_requested(out);
                }
                self.issue_list(now, Resolve::new(intents, Then::Destroy), out)
            }
            // A restored replacement not yet resumed: the destroy cancels it.
            Phase::Restored(Pending::Replace { .. }) => {
                self.persist_destroy_requested(out);
                self.set_phase(Phase::Destroyed { released: None });
            }
            // A known lease, restored: destroy it instead of looking it up.
            Phase::Restored(Pending::Locate { lease }) => {
                let lease = lease.clone();
                self.begin_destroy(now, lease, out)
            }
            // A destroy the restart interrupted: it tries now, and an
            // explicit Destroy outranks a pending replacement.
            Phase::Restored(Pending::Destroy { replace, lease }) => {
                let lease = lease.clone();
                if *replace > 0 {
                    self.persist_destroy_requested(out);
                }
                self.issue_destroy(now, 1, 0, lease, out)
            }
            Phase::New => self.enter(Phase::Destroyed { released: None }, out),
            Phase::Requesting { op: None, .. } => {
                // Every create of this intent was answered `Transient`:
                // nothing was created, so the intent closes with no lease.
                self.timers.clear();
                self.persist_destroy_requested(out);
                self.persist_abandoned(out);
                self.enter(Phase::Destroyed { released: None }, out);
            }
            &Phase::Requesting {
                op,
                tries,
                intents,
                destroy_after: false,
            } => {
                // The lease is not known yet: destroy it once the answer says.
                self.persist_destroy_requested(out);
                self.set_phase(Phase::Requesting {
                    op,
                    tries,
                    intents,
                    destroy_after: true,
                });
            }
            &Phase::Resolving { op, resolve } if resolve.then != Then::Destroy => {
                self.persist_destroy_requested(out);
                let resolve = Resolve {
                    then: Then::Destroy,
                    ..resolve
                };
                self.set_phase(Phase::Resolving { op, resolve });
            }
            Phase::Locating { lease, .. } | Phase::Dormant { lease, .. } => {
                let lease = lease.clone();
                self.begin_destroy(now, lease, out)
            }
            Phase::Bootstrapping { lease, boot } | Phase::Joined { lease, boot, .. } => {
                let (session, lease) = (boot.facts.session, lease.clone());
                out.push(Effect::CancelBootstrap { session });
                self.begin_destroy(now, lease, out);
            }
            Phase::Failed {
                unresolved: true, ..
            } => {
                self.persist_destroy_requested(out);
                let intents = self.config.intents_max;
                self.issue_list(now, Resolve::new(intents, Then::Destroy), out);
            }
            Phase::Failed {
                unresolved: false,
                lease: Some(lease),
                ..
            } => {
                let lease = lease.clone();
                self.begin_destroy(now, lease, out)
            }
            Phase::Failed {
                unresolved: false,
                lease: None,
                ..
            } => self.enter(Phase::Destroyed { released: None }, out),
            // Waiting for a retry, or retries spent: a new Destroy tries now,
            // and an explicit Destroy outranks a pending replacement (the
            // journal says so, or a restart would resume the replacement).
            Phase::Destroying {
                op: None,
                replace,
                lease,
                ..
            } => {
                let lease = lease.clone();
                if *replace > 0 {
                    self.persist_destroy_requested(out);
                }
                self.issue_destroy(now, 1, 0, lease, out)
            }
            // A destroy in flight: this request is not lost if that attempt
            // fails with its retries spent. It renews the budget (the attempt
            // in flight counts as the one before the first, `tries` 0), so
            // a second `Teardown` or `drover down` always tries again.
            Phase::Destroying {
                op: Some(op),
                replace,
                lease,
                ..
            } => {
                let (op, lease) = (*op, lease.clone());
                if *replace > 0 {
                    self.persist_destroy_requested(out);
                }
                self.set_phase(Phase::Destroying {
                    op: Some(op),
                    tries: 0,
                    replace: 0,
                    lease,
                });
            }
            Phase::Destroyed { .. } if strays_sent => {}
            Phase::Requesting { .. } | Phase::Resolving { .. } | Phase::Destroyed { .. } => {
                self.ignored += 1
            }
        }
    }

    /// Replacement: destroy the lease the failed node still holds, then a
    /// fresh intent with `attempt`.
    pub(super) fn on_replace(&mut self, now: Instant, attempt: u32, out: &mut Vec<Effect>) {
        let standing = match &self.phase {
            Phase::Failed { lease, .. } => lease.clone(),
            _ => None,
        };
        match standing {
            Some(lease) => {
                self.persist_replace_requested(attempt, out);
                self.issue_destroy(now, 1, attempt, lease, out);
            }
            None => self.request_lease(now, attempt, 1, out),
        }
    }

    pub(super) fn on_destroyed(
        &mut self,
        now: Instant,
        result: Result<(), ProviderError>,
        (tries, replace): (u32, u32),
        lease: Arc<LeaseFacts>,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        match result {
            Err(e) if e.kind != ProviderErrorKind::NotFound => {
                self.destroy_failed(now, (tries, replace), lease, e.message)
            }
            _ => {
                let node = self.spec.node_id.clone();
                out.push(Effect::Persist(JournalRecord::LeaseReleased {
                    node,
                    lease_id: lease.lease_id.clone(),
                }));
                self.past.destroy_error = None;
                let destroyed = Phase::Destroyed {
                    released: Some((lease, now)),
                };
                self.enter(destroyed, out);
                if replace > 0 {
                    self.request_lease(now, replace, 1, out);
                }
            }
        }
    }

    pub(super) fn destroy_failed(
        &mut self,
        now: Instant,
        (tries, replace): (u32, u32),
        lease: Arc<LeaseFacts>,
        why: String,
    ) {
        self.timers.clear();
        self.past.destroy_error = Some(why);
        self.set_phase(Phase::Destroying {
            op: None,
            tries,
            replace,
            lease,
        });
        if tries < self.config.destroy_attempts_max {
            let c = &self.config;
            self.timers.set(
                TimerKind::DestroyRetry,
                now + backoff(tries, c.retry_backoff_base, c.retry_backoff_max),
            );
        }
    }

    pub(super) fn begin_destroy(
        &mut self,
        now: Instant,
        lease: Arc<LeaseFacts>,
        out: &mut Vec<Effect>,
    ) {
        self.persist_destroy_requested(out);
        self.issue_destroy(now, 1, 0, lease, out);
    }

    pub(super) fn issue_destroy(
        &mut self,
        now: Instant,
        tries: u32,
        replace: u32,
        lease: Arc<LeaseFacts>,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        let op = self.next_op();
        let destroying = Phase::Destroying {
            op: Some(op),
            tries,
            replace,
            lease: lease.clone(),
        };
        self.enter(destroying, out);
        out.push(Effect::DestroyLease { op, lease });
        let timeout = self.spec.boot.timeouts.destroy_timeout;
        self.timers.set(TimerKind::DestroyDeadline, now + timeout);
    }
}
