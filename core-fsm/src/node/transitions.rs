//! The node manager's transitions: small helpers the one `match` in
//! `machine.rs` calls. Each one sets the phase first, then pushes the
//! effects, journal records before the I/O they guard.

use super::machine::{Phase, Resolve, Then};
use super::{AgentFacts, BootstrapFacts, Effect, Stage, TimerKind, backoff, jittered};
use crate::bootstrap;
use crate::ids::{AgentId, Nonce, OpId, SessionId};
use crate::port::{
    CreateLeaseRequest, EndpointStatus, JournalRecord, LeaseFacts, LeaseGranted, LogSeqs,
    ProviderError, ProviderErrorKind, SshEndpoint,
};
use crate::time::Instant;

type Out = Vec<Effect>;

impl super::Machine {
    pub(super) fn on_tick(&mut self, now: Instant, out: &mut Out) {
        for kind in self.timers.take_expired(now) {
            match (kind, self.phase) {
                (
                    TimerKind::LeaseCreate,
                    Phase::Requesting {
                        intents,
                        destroy_after,
                        ..
                    },
                ) => {
                    // The create may have happened: find out, never create again.
                    let then = if destroy_after {
                        Then::Destroy
                    } else {
                        Then::Bootstrap
                    };
                    self.issue_list(now, Resolve::new(intents, then), out);
                }
                (
                    TimerKind::CreateRetry,
                    Phase::Requesting {
                        op: None,
                        tries,
                        intents,
                        ..
                    },
                ) => self.issue_create(now, tries + 1, intents, out),
                (TimerKind::EndpointPoll, Phase::Locating { op: None }) => self.issue_lookup(out),
                (TimerKind::EndpointDeadline, Phase::Locating { .. }) => {
                    let timeout = self.record.desired.boot.timeouts.endpoint_timeout;
                    self.fail(now, format!("no SSH endpoint within {timeout}"), out);
                }
                (
                    TimerKind::ListDeadline,
                    Phase::Resolving {
                        op: Some(_),
                        resolve,
                    },
                ) => {
                    self.list_failed(now, resolve, "lease list timed out", out);
                }
                (TimerKind::ListRetry, Phase::Resolving { op: None, resolve }) => {
                    self.issue_list(now, resolve, out);
                }
                (
                    TimerKind::DestroyDeadline,
                    Phase::Destroying {
                        op: Some(_),
                        tries,
                        replace,
                    },
                ) => {
                    self.destroy_failed(now, tries, replace, "destroy timed out".to_owned());
                }
                (
                    TimerKind::DestroyRetry,
                    Phase::Destroying {
                        op: None,
                        tries,
                        replace,
                    },
                ) => {
                    self.issue_destroy(now, tries + 1, replace, out);
                }
                // A timer of a phase already left: transitions clear timers,
                // so this is only reachable within one multi-expiry tick.
                _ => {}
            }
        }
        self.on_stray_tick(now, out);
    }

    /// A fresh intent: journal it, then ask the provider.
    pub(super) fn request_lease(
        &mut self,
        now: Instant,
        attempt: u32,
        intents: u32,
        out: &mut Out,
    ) {
        let nonce = self.draw_nonce();
        let r = &mut self.record;
        r.attempt = attempt;
        r.nonce = Some(nonce);
        r.lease = None;
        r.endpoint = None;
        r.bootstrap = None;
        r.agent = None;
        r.failed_reason = None;
        r.failed_at = None;
        r.destroy_error = None;
        r.destroyed_at = None;
        self.resume = false;
        self.replace_due = 0;
        self.replace_resolves = 0;
        self.timers.clear();
        out.push(Effect::Persist(JournalRecord::LeaseIntent {
            node: self.record.desired.node_id.clone(),
            nonce,
            attempt,
        }));
        self.issue_create(now, 1, intents, out);
    }

    /// Sends the create of the current intent; `tries` counts this one.
    fn issue_create(&mut self, now: Instant, tries: u32, intents: u32, out: &mut Out) {
        self.timers.clear();
        let op = self.next_op();
        self.enter(
            Phase::Requesting {
                op: Some(op),
                tries,
                intents,
                destroy_after: false,
            },
            out,
        );
        let d = &self.record.desired;
        let request = CreateLeaseRequest {
            run_id: d.run_id,
            node: d.node_id.clone(),
            nonce: self.record.nonce.expect("a create follows an intent"),
            provider: d.provider,
            shape: d.shape.clone(),
            excluded_hosts: self.excluded_hosts.clone(),
        };
        out.push(Effect::CreateLease { op, request });
        let timeout = self.record.desired.boot.timeouts.lease_create_timeout;
        self.timers.set(TimerKind::LeaseCreate, now + timeout);
    }

    /// Continues what a restore left pending.
    pub(super) fn resume(&mut self, now: Instant, out: &mut Out) {
        self.resume = false;
        let _ = self.retry_spent_strays(now, out);
        match self.phase {
            Phase::Resolving { op: None, resolve } => {
                self.issue_list(now, Resolve::new(resolve.intents, resolve.then), out)
            }
            Phase::Locating { op: None } => {
                let timeout = self.record.desired.boot.timeouts.endpoint_timeout;
                self.timers.set(TimerKind::EndpointDeadline, now + timeout);
                self.issue_lookup(out);
            }
            Phase::Destroying {
                op: None, replace, ..
            } => self.issue_destroy(now, 1, replace, out),
            // A replacement whose destroy finished before the restart.
            Phase::Destroyed if self.replace_due > 0 => {
                self.request_lease(now, self.replace_due, 1, out)
            }
            _ => {}
        }
    }

    pub(super) fn on_destroy(&mut self, now: Instant, out: &mut Out) {
        let strays_sent = self.retry_spent_strays(now, out);
        // A restored open intent waits for Start; a Destroy (say, Teardown
        // before Start) resolves it now, so its lease is found and destroyed.
        if let (true, Phase::Resolving { op: None, resolve }) = (self.resume, self.phase) {
            if resolve.then != Then::Destroy {
                self.persist_destroy_requested(out);
            }
            return self.issue_list(now, Resolve::new(resolve.intents, Then::Destroy), out);
        }
        if self.phase == Phase::Destroyed && self.replace_due > 0 {
            // A restored replacement not yet resumed: the destroy cancels it.
            self.persist_destroy_requested(out);
            self.replace_due = 0;
            self.resume = false;
            return;
        }
        match self.phase {
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
            Phase::Destroying {
                op: Some(op),
                tries,
                replace,
            } if replace > 0 => {
                self.persist_destroy_requested(out);
                self.phase = Phase::Destroying {
                    op: Some(op),
                    tries,
                    replace: 0,
                };
            }
            Phase::Destroyed if strays_sent => {}
            Phase::Requesting { .. }
            | Phase::Resolving { .. }
            | Phase::Destroying { .. }
            | Phase::Destroyed => self.ignored += 1,
        }
    }

    pub(super) fn on_lease_created(
        &mut self,
        now: Instant,
        result: Result<LeaseGranted, ProviderError>,
        (tries, intents): (u32, u32),
        then: Then,
        out: &mut Out,
    ) {
        self.timers.clear();
        let retry = tries < self.config.create_attempts_max && then == Then::Bootstrap;
        match result {
            Ok(granted) => self.lease_known(now, granted.lease, granted.endpoint, then, out),
            Err(e) if e.kind == ProviderErrorKind::Ambiguous => {
                self.issue_list(now, Resolve::new(intents, then), out)
            }
            // Nothing happened (429, 5xx before the request took effect):
            // the same intent may be sent again, after a jittered backoff.
            Err(e) if e.kind == ProviderErrorKind::Transient && retry => {
                self.phase = Phase::Requesting {
                    op: None,
                    tries,
                    intents,
                    destroy_after: false,
                };
                let c = &self.config;
                let wait = backoff(c.retry_backoff_base, c.retry_backoff_max, tries);
                let wait = jittered(&mut self.jitter, wait);
                self.timers.set(TimerKind::CreateRetry, now + wait);
            }
            Err(e) => {
                self.persist_abandoned(out);
                let why = match (e.kind, tries) {
                    (ProviderErrorKind::Transient, 2..) => {
                        format!("lease create failed after {tries} tries: {}", e.message)
                    }
                    _ => format!("lease create failed: {}", e.message),
                };
                match then {
                    Then::Destroy => self.enter(Phase::Destroyed, out),
                    // A create is only ever awaited to bootstrap or destroy.
                    Then::Bootstrap | Then::Replace(_) => self.fail(now, why, out),
                }
            }
        }
    }

    /// A create answer that is not the awaited one. The lease it names is
    /// real and costs money: adopt it if it is the intent being resolved,
    /// ignore it if it is the lease already known, destroy it otherwise.
    pub(super) fn on_stray_lease(&mut self, now: Instant, granted: LeaseGranted, out: &mut Out) {
        let lease = granted.lease;
        if let Phase::Resolving { resolve, .. } = self.phase
            && Some(lease.nonce) == self.record.nonce
        {
            self.timers.clear();
            return self.lease_known(now, lease, granted.endpoint, resolve.then, out);
        }
        if self.record.lease_id() == Some(&lease.lease_id) {
            self.ignored += 1;
            return;
        }
        self.adopt_stray(now, lease, out);
    }

    fn lease_known(
        &mut self,
        now: Instant,
        lease: LeaseFacts,
        endpoint: Option<SshEndpoint>,
        then: Then,
        out: &mut Out,
    ) {
        let node = self.record.desired.node_id.clone();
        out.push(Effect::Persist(JournalRecord::LeaseKnown {
            node,
            lease: lease.clone(),
        }));
        self.record.nonce = Some(lease.nonce);
        self.record.lease = Some(lease);
        self.set_stage(Stage::LeaseCreated, out);
        match (then, endpoint) {
            (Then::Destroy, _) => self.issue_destroy(now, 1, 0, out),
            (Then::Replace(attempt), _) => {
                self.persist_replace_requested(attempt, out);
                self.issue_destroy(now, 1, attempt, out);
            }
            (Then::Bootstrap, Some(endpoint)) => self.endpoint_known(now, endpoint, out),
            (Then::Bootstrap, None) => {
                let timeout = self.record.desired.boot.timeouts.endpoint_timeout;
                self.enter(Phase::Locating { op: None }, out);
                self.timers.set(TimerKind::EndpointDeadline, now + timeout);
                self.issue_lookup(out);
            }
        }
    }

    pub(super) fn on_endpoint(
        &mut self,
        now: Instant,
        result: Result<EndpointStatus, ProviderError>,
        out: &mut Out,
    ) {
        let transient = |e: &ProviderError| {
            matches!(
                e.kind,
                ProviderErrorKind::Transient | ProviderErrorKind::Ambiguous
            )
        };
        match result {
            Ok(EndpointStatus::Ready(endpoint)) => self.endpoint_known(now, endpoint, out),
            Ok(EndpointStatus::Pending { .. }) => self.poll_later(now),
            Err(e) if transient(&e) => self.poll_later(now),
            Ok(EndpointStatus::Failed { reason }) => {
                self.fail(now, format!("endpoint failed: {reason}"), out)
            }
            Ok(EndpointStatus::Gone) => self.fail(
                now,
                "lease gone before its endpoint was known".to_owned(),
                out,
            ),
            Err(e) => self.fail(now, format!("endpoint lookup failed: {}", e.message), out),
        }
    }

    fn poll_later(&mut self, now: Instant) {
        self.phase = Phase::Locating { op: None };
        let interval = self.record.desired.boot.timeouts.endpoint_poll_interval;
        self.timers.set(TimerKind::EndpointPoll, now + interval);
    }

    fn endpoint_known(&mut self, now: Instant, endpoint: SshEndpoint, out: &mut Out) {
        self.timers.clear();
        self.record.endpoint = Some(endpoint.clone());
        self.set_stage(Stage::EndpointKnown, out);
        let session = SessionId(self.sessions.next());
        self.record.bootstrap = Some(BootstrapFacts {
            session,
            last_stage: bootstrap::Stage::Created,
            last_stdout_seq: None,
            last_stderr_seq: None,
            last_observed_at: now,
        });
        self.enter(Phase::Bootstrapping { session }, out);
        let lease_id = self
            .record
            .lease_id()
            .expect("endpoint_known needs a lease")
            .clone();
        out.push(Effect::StartBootstrap {
            session,
            endpoint,
            lease_id,
            log_seqs: self.record.log_seqs,
        });
    }

    pub(super) fn on_listed(
        &mut self,
        now: Instant,
        result: Result<Vec<LeaseFacts>, ProviderError>,
        resolve: Resolve,
        out: &mut Out,
    ) {
        self.timers.clear();
        let leases = match result {
            Ok(leases) => leases,
            Err(e) => return self.list_failed(now, resolve, &e.message, out),
        };
        let nonce = self.record.nonce;
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
            self.phase = Phase::Resolving { op: None, resolve };
            let settle = self.record.desired.boot.timeouts.lease_create_timeout;
            self.timers.set(TimerKind::ListRetry, now + settle);
            return;
        }
        // Every list, spread over the settle intervals, succeeded without
        // the nonce: the create did not take effect, so the intent is closed
        // for good.
        self.persist_abandoned(out);
        let intents = resolve.intents;
        match resolve.then {
            Then::Destroy => self.enter(Phase::Destroyed, out),
            Then::Replace(attempt) => self.request_lease(now, attempt, 1, out),
            Then::Bootstrap if intents < self.config.intents_max => {
                let attempt = self.record.attempt.max(1);
                self.request_lease(now, attempt, intents + 1, out);
            }
            Then::Bootstrap => self.fail(now, format!("no lease after {intents} intents"), out),
        }
    }

    fn list_failed(&mut self, now: Instant, resolve: Resolve, why: &str, out: &mut Out) {
        self.timers.clear();
        let tries = resolve.tries;
        if tries < self.config.list_attempts_max {
            let c = &self.config;
            self.timers.set(
                TimerKind::ListRetry,
                now + backoff(c.retry_backoff_base, c.retry_backoff_max, tries),
            );
            self.phase = Phase::Resolving { op: None, resolve };
            return;
        }
        // A failed list is never an empty list: the intent stays open, and
        // only an explicit Destroy tries to resolve it again.
        let reason = format!("lease intent unresolved after {tries} lists: {why}");
        if resolve.then == Then::Destroy {
            self.record.destroy_error = Some(reason.clone());
        }
        self.fail_with(now, reason, true, out);
    }

    /// Replacement: destroy the lease the failed node still holds, then a
    /// fresh intent with `attempt`.
    pub(super) fn on_replace(&mut self, now: Instant, attempt: u32, out: &mut Out) {
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
        out: &mut Out,
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

    fn destroy_failed(&mut self, now: Instant, tries: u32, replace: u32, why: String) {
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
                now + backoff(c.retry_backoff_base, c.retry_backoff_max, tries),
            );
        }
    }

    pub(super) fn on_observed(&mut self, now: Instant, obs: bootstrap::Observation) {
        let Some(facts) = self.record.bootstrap.as_mut() else {
            return self.ignored += 1;
        };
        facts.last_stage = obs.stage;
        facts.last_observed_at = now;
        facts.last_stdout_seq = obs.last_stdout_seq.or(facts.last_stdout_seq);
        facts.last_stderr_seq = obs.last_stderr_seq.or(facts.last_stderr_seq);
        let seen = LogSeqs {
            stdout: obs.last_stdout_seq.unwrap_or(0),
            stderr: obs.last_stderr_seq.unwrap_or(0),
        };
        self.record.log_seqs = self.record.log_seqs.max_each(seen);
    }

    pub(super) fn on_joined(
        &mut self,
        now: Instant,
        session: SessionId,
        agent: AgentId,
        out: &mut Out,
    ) {
        self.record.agent = Some(AgentFacts {
            agent: agent.clone(),
            joined_at: now,
            handed_off_at: None,
        });
        self.enter(Phase::Joined { session }, out);
        out.push(Effect::ConvergenceObserved { session, agent });
    }

    /// The agent of a restored, ready node reconnected; it may do so once.
    pub(super) fn on_rejoined(&mut self, now: Instant, agent: AgentId, out: &mut Out) {
        let handed_off_at = self.record.agent.as_ref().and_then(|a| a.handed_off_at);
        self.record.agent = Some(AgentFacts {
            agent: agent.clone(),
            joined_at: now,
            handed_off_at,
        });
        let node = self.record.desired.node_id.clone();
        let log_seqs = self.record.log_seqs;
        out.push(Effect::Persist(JournalRecord::NodeReady {
            node,
            agent,
            log_seqs,
        }));
        self.phase = Phase::Dormant {
            rejoin_allowed: false,
        };
    }

    /// SSH closed after the join: the handoff is complete (seed 000 §12).
    pub(super) fn on_handed_off(&mut self, now: Instant, out: &mut Out) {
        let agent = self.record.agent.as_mut().expect("Joined has agent facts");
        agent.handed_off_at = Some(now);
        let agent = agent.agent.clone();
        self.set_stage(Stage::HandedOff, out);
        let node = self.record.desired.node_id.clone();
        let log_seqs = self.record.log_seqs;
        out.push(Effect::Persist(JournalRecord::NodeReady {
            node,
            agent,
            log_seqs,
        }));
        self.enter(
            Phase::Dormant {
                rejoin_allowed: false,
            },
            out,
        );
    }

    pub(super) fn fail(&mut self, now: Instant, reason: String, out: &mut Out) {
        self.fail_with(now, reason, false, out);
    }

    fn fail_with(&mut self, now: Instant, reason: String, unresolved: bool, out: &mut Out) {
        self.timers.clear();
        self.record.failed_reason = Some(reason.clone());
        self.record.failed_at = Some(now);
        let node = self.record.desired.node_id.clone();
        let log_seqs = self.record.log_seqs;
        out.push(Effect::Persist(JournalRecord::NodeFailed {
            node,
            reason,
            log_seqs,
        }));
        self.enter(Phase::Failed { unresolved }, out);
    }

    fn begin_destroy(&mut self, now: Instant, out: &mut Out) {
        self.persist_destroy_requested(out);
        self.issue_destroy(now, 1, 0, out);
    }

    fn issue_destroy(&mut self, now: Instant, tries: u32, replace: u32, out: &mut Out) {
        self.resume = false;
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

    /// Lists the run's leases; `resolve.tries` counts this list.
    pub(super) fn issue_list(&mut self, now: Instant, resolve: Resolve, out: &mut Out) {
        self.resume = false;
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
        let d = &self.record.desired;
        out.push(Effect::ListLeases {
            op,
            run_id: d.run_id,
            provider: d.provider,
        });
        let timeout = d.boot.timeouts.lease_create_timeout;
        self.timers.set(TimerKind::ListDeadline, now + timeout);
    }

    fn issue_lookup(&mut self, out: &mut Out) {
        self.timers.cancel(&TimerKind::EndpointPoll);
        let op = self.next_op();
        self.phase = Phase::Locating { op: Some(op) };
        let lease = self
            .record
            .lease
            .clone()
            .expect("lookup only a known lease (N3)");
        out.push(Effect::LookupEndpoint { op, lease });
    }

    fn persist_destroy_requested(&mut self, out: &mut Out) {
        let node = self.record.desired.node_id.clone();
        out.push(Effect::Persist(JournalRecord::DestroyRequested { node }));
    }

    fn persist_replace_requested(&mut self, attempt: u32, out: &mut Out) {
        let node = self.record.desired.node_id.clone();
        out.push(Effect::Persist(JournalRecord::ReplaceRequested {
            node,
            attempt,
        }));
    }

    fn persist_abandoned(&mut self, out: &mut Out) {
        let node = self.record.desired.node_id.clone();
        let nonce = self.record.nonce.expect("an intent has a nonce");
        out.push(Effect::Persist(JournalRecord::IntentAbandoned {
            node,
            nonce,
        }));
    }

    /// Enters `phase` and announces its stage if it changed.
    pub(super) fn enter(&mut self, phase: Phase, out: &mut Out) {
        self.phase = phase;
        self.set_stage(phase.stage(), out);
    }

    /// Records `stage` (also a transient one) and announces it if it changed.
    fn set_stage(&mut self, stage: Stage, out: &mut Out) {
        if self.record.stage == stage {
            return;
        }
        self.record.stage = stage;
        self.record.ready = stage == Stage::Dormant;
        let failed_reason = if stage == Stage::Failed {
            self.record.failed_reason.clone()
        } else {
            None
        };
        out.push(Effect::Changed {
            stage,
            ready: self.record.ready,
            failed_reason,
        });
    }

    pub(super) fn next_op(&mut self) -> OpId {
        OpId(self.ops.next())
    }

    /// A nonce never equal to the previous intent's, so an abandoned intent
    /// and its successor cannot be confused in a lease list.
    fn draw_nonce(&mut self) -> Nonce {
        for _ in 0..8 {
            let nonce = Nonce(self.rng.next_u64());
            if Some(nonce) != self.record.nonce {
                return nonce;
            }
        }
        panic!("DetRng produced the same nonce eight times");
    }
}
