//! The node manager's one `match (phase, event)`: inputs and the node's
//! own timers, each to its transition (in `transitions.rs` and its
//! siblings). An input out of place is counted and dropped; a timer of a
//! phase already left does nothing.

use super::machine::{Machine, Pending, Phase, Resolve, Then};
use super::{Effect, Input, TimerKind};
use crate::time::Instant;

/// An input, or a timer of the node's own that fired.
enum Event {
    In(Input),
    Fire(TimerKind),
}

impl Machine {
    /// `handle`, pushing the effects onto `out`: a tick becomes one event
    /// per expired timer, then the strays' deadlines.
    pub(super) fn step(&mut self, now: Instant, input: Input, out: &mut Vec<Effect>) {
        match input {
            Input::Tick => {
                for kind in self.timers.take_expired(now) {
                    self.dispatch(now, Event::Fire(kind), out);
                }
                self.on_stray_tick(now, out);
            }
            input => self.dispatch(now, Event::In(input), out),
        }
    }

    fn dispatch(&mut self, now: Instant, event: Event, out: &mut Vec<Effect>) {
        use Event::{Fire, In};
        // By reference: an arm copies what it needs out of the phase (a
        // lease is an `Arc`) before its transition replaces the phase.
        match (&self.phase, event) {
            (Phase::New, In(Input::Start { excluded_hosts })) => {
                self.excluded_hosts = excluded_hosts;
                let _ = self.retry_spent_strays(now, out);
                let attempt = self.attempt.max(1);
                self.request_lease(now, attempt, 1, out)
            }
            (_, In(Input::Start { excluded_hosts })) if self.restored_work() => {
                self.excluded_hosts = excluded_hosts;
                self.resume(now, out)
            }
            (
                Phase::Destroyed { .. }
                | Phase::Restored(Pending::Replace { .. })
                | Phase::Failed {
                    unresolved: false, ..
                },
                In(Input::Replace {
                    attempt,
                    excluded_hosts,
                }),
            ) if attempt > self.attempt => {
                self.excluded_hosts = excluded_hosts;
                self.on_replace(now, attempt, out);
            }
            // The failed intent's lease may exist: find out first (bounded
            // per attempt), then replace whatever turns up.
            (
                Phase::Failed {
                    unresolved: true, ..
                },
                In(Input::Replace {
                    attempt,
                    excluded_hosts,
                }),
            ) if attempt > self.attempt && self.replace_resolves < self.config.intents_max => {
                self.excluded_hosts = excluded_hosts;
                self.replace_resolves += 1;
                let resolve = Resolve::new(self.config.intents_max, Then::Replace(attempt));
                self.issue_list(now, resolve, out);
            }
            (_, In(Input::LeaseDestroyed { op, result })) if self.is_stray_op(op) => {
                self.on_stray_destroyed(now, op, result, out)
            }
            (_, In(Input::Destroy)) => self.on_destroy(now, out),
            (
                &Phase::Requesting {
                    op: Some(op),
                    tries,
                    intents,
                    destroy_after,
                },
                In(Input::LeaseCreated { op: got, result }),
            ) if op == got => {
                let then = if destroy_after {
                    Then::Destroy
                } else {
                    Then::Bootstrap
                };
                self.on_lease_created(now, result, (tries, intents), then, out)
            }
            // Not the awaited answer, but a lease that costs money.
            (
                _,
                In(Input::LeaseCreated {
                    result: Ok(granted),
                    ..
                }),
            ) => self.on_stray_lease(now, granted, out),
            (
                Phase::Locating {
                    op: Some(op),
                    lease,
                },
                In(Input::EndpointLooked { op: got, result }),
            ) if *op == got => {
                let lease = lease.clone();
                self.on_endpoint(now, lease, result, out)
            }
            (
                &Phase::Resolving {
                    op: Some(op),
                    resolve,
                },
                In(Input::LeasesListed { op: got, result }),
            ) if op == got => self.on_listed(now, result, resolve, out),
            (
                Phase::Destroying {
                    op: Some(op),
                    tries,
                    replace,
                    lease,
                },
                In(Input::LeaseDestroyed { op: got, result }),
            ) if *op == got => {
                let (counts, lease) = ((*tries, *replace), lease.clone());
                self.on_destroyed(now, result, counts, lease, out)
            }
            // A cancelled session still logs until SSH is closed: its
            // numbers count in any phase.
            (_, In(Input::BootstrapObserved(obs))) => self.observe(now, obs),
            (Phase::Bootstrapping { lease, boot }, In(Input::AgentJoined { lease_id, agent }))
                if self.expects_join(&lease_id) =>
            {
                let on = (lease.clone(), boot.clone());
                self.on_joined(now, on, agent, out)
            }
            (
                Phase::Dormant {
                    lease,
                    agent: facts,
                    rejoin_allowed: true,
                },
                In(Input::AgentJoined { lease_id, agent }),
            ) if self.expects_join(&lease_id) => {
                let on = (lease.clone(), facts.handed_off_at);
                self.on_rejoined(now, on, agent, out)
            }
            // Only the node's own agent; another identity, or a node not at
            // rest after handoff, is ignored.
            (Phase::Dormant { agent: facts, .. }, In(Input::AgentLost { agent, reason }))
                if facts.agent == agent =>
            {
                self.fail(now, reason, out)
            }
            (Phase::Joined { lease, agent, .. }, In(Input::BootstrapClosed)) => {
                let on = (lease.clone(), agent.clone());
                self.on_handed_off(now, on, out)
            }
            (
                Phase::Bootstrapping { .. } | Phase::Joined { .. },
                In(Input::BootstrapFailed { reason }),
            ) => self.fail(now, reason, out),
            (_, In(_)) => self.ignored += 1,

            // The create may have happened: find out, never create again.
            (
                &Phase::Requesting {
                    intents,
                    destroy_after,
                    ..
                },
                Fire(TimerKind::LeaseCreate),
            ) => {
                let then = if destroy_after {
                    Then::Destroy
                } else {
                    Then::Bootstrap
                };
                self.issue_list(now, Resolve::new(intents, then), out);
            }
            (
                &Phase::Requesting {
                    op: None,
                    tries,
                    intents,
                    ..
                },
                Fire(TimerKind::CreateRetry),
            ) => self.issue_create(now, tries + 1, intents, out),
            (Phase::Locating { op: None, lease }, Fire(TimerKind::EndpointPoll)) => {
                let lease = lease.clone();
                self.issue_lookup(lease, out)
            }
            (Phase::Locating { .. }, Fire(TimerKind::EndpointDeadline)) => {
                let timeout = self.spec.boot.timeouts.endpoint_timeout;
                self.fail(now, format!("no SSH endpoint within {timeout}"), out);
            }
            (
                &Phase::Resolving {
                    op: Some(_),
                    resolve,
                },
                Fire(TimerKind::ListDeadline),
            ) => self.list_failed(now, resolve, "lease list timed out", out),
            (&Phase::Resolving { op: None, resolve }, Fire(TimerKind::ListRetry)) => {
                self.issue_list(now, resolve, out)
            }
            (
                Phase::Destroying {
                    op: Some(_),
                    tries,
                    replace,
                    lease,
                },
                Fire(TimerKind::DestroyDeadline),
            ) => {
                let (counts, lease) = ((*tries, *replace), lease.clone());
                self.destroy_failed(now, counts, lease, "destroy timed out".to_owned())
            }
            (
                Phase::Destroying {
                    op: None,
                    tries,
                    replace,
                    lease,
                },
                Fire(TimerKind::DestroyRetry),
            ) => {
                let (tries, replace, lease) = (*tries, *replace, lease.clone());
                self.issue_destroy(now, tries + 1, replace, lease, out)
            }
            // A timer of a phase already left: transitions clear timers, so
            // this is only reachable within one multi-expiry tick.
            (_, Fire(_)) => {}
        }
    }
}
