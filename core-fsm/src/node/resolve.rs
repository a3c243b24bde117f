//! The node manager's resolution of an ambiguous intent: list the run's
//! leases by nonce, bounded in lists and in misses (SPEC.md "Node manager").

use super::machine::{Phase, Resolve, Then};
use super::{Effect, TimerKind};
use crate::port::{LeaseFacts, ProviderError};
use crate::time::Instant;
use crate::time::backoff;
use std::sync::Arc;

impl super::Machine {
    pub(super) fn on_listed(
        &mut self,
        now: Instant,
        result: Result<Vec<Arc<LeaseFacts>>, ProviderError>,
        resolve: Resolve,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        let leases = match result {
            Ok(leases) => leases,
            Err(e) => return self.list_failed(now, resolve, &e.message, out),
        };
        let nonce = self.nonce;
        if let Some(lease) = leases.into_iter().find(|lease| Some(lease.nonce) == nonce) {
            return self.lease_known(now, lease, None, resolve.then, out);
        }
        let misses = resolve.misses + 1;
        if misses < self.config.list_misses_max {
            // A lease can exist before lists show it (F4): look again after
            // a create timeout before concluding anything.
            let resolve = Resolve {
                tries: 0,
                misses,
                ..resolve
            };
            self.set_phase(Phase::Resolving { op: None, resolve });
            let settle = self.spec.boot.timeouts.lease_create_timeout;
            self.timers.set(TimerKind::ListRetry, now + settle);
            return;
        }
        // Every list, spread over the settle intervals, succeeded without
        // the nonce: the create did not take effect, so the intent is closed
        // for good.
        self.persist_abandoned(out);
        let intents = resolve.intents;
        match resolve.then {
            Then::Destroy => self.enter(Phase::Destroyed { released: None }, out),
            Then::Replace(attempt) => self.request_lease(now, attempt, 1, out),
            Then::Bootstrap if intents < self.config.intents_max => {
                let attempt = self.attempt.max(1);
                self.request_lease(now, attempt, intents + 1, out);
            }
            Then::Bootstrap => self.fail(now, format!("no lease after {intents} intents"), out),
        }
    }

    pub(super) fn list_failed(
        &mut self,
        now: Instant,
        resolve: Resolve,
        why: &str,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        let tries = resolve.tries;
        if tries < self.config.list_attempts_max {
            let c = &self.config;
            self.timers.set(
                TimerKind::ListRetry,
                now + backoff(tries, c.retry_backoff_base, c.retry_backoff_max),
            );
            self.set_phase(Phase::Resolving { op: None, resolve });
            return;
        }
        // A failed list is never an empty list: the intent stays open, and
        // only an explicit Destroy tries to resolve it again.
        let reason = format!("lease intent unresolved after {tries} lists: {why}");
        if resolve.then == Then::Destroy {
            self.past.destroy_error = Some(reason.clone());
        }
        self.fail_with(now, reason, true, out);
    }

    /// Lists the run's leases; `resolve.tries` counts this list.
    pub(super) fn issue_list(&mut self, now: Instant, resolve: Resolve, out: &mut Vec<Effect>) {
        self.timers.clear();
        let op = self.next_op();
        let resolve = Resolve {
            tries: resolve.tries + 1,
            ..resolve
        };
        self.enter(
            Phase::Resolving {
                op: Some(op),
                resolve,
            },
            out,
        );
        let d = &self.spec;
        out.push(Effect::ListLeases {
            op,
            run_id: d.run_id,
            provider: d.provider,
        });
        let timeout = d.boot.timeouts.lease_create_timeout;
        self.timers.set(TimerKind::ListDeadline, now + timeout);
    }
}
