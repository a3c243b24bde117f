//! The node manager's transitions: small helpers the one `match` in
//! `machine.rs` calls. Each one sets the phase first, then pushes the
//! effects, journal records before the I/O they guard. This file holds the
//! lease request, the endpoint and the shared helpers; `resolve.rs`,
//! `destroy.rs` and `handoff.rs` hold the rest.

use super::machine::{Boot, Failure, Past, Pending, Phase, Resolve, Then};
use super::{BootstrapFacts, Effect, Lifecycle, TimerKind, jittered};
use crate::bootstrap;
use crate::ids::{Nonce, OpId, SessionId};
use crate::port::{
    CreateLeaseRequest, EndpointStatus, JournalRecord, LeaseFacts, LeaseGranted, ProviderError,
    ProviderErrorKind, SshEndpoint,
};
use crate::time::Instant;
use crate::time::backoff;
use std::sync::Arc;

impl super::Machine {
    /// A fresh intent: journal it, then ask the provider.
    pub(super) fn request_lease(
        &mut self,
        now: Instant,
        attempt: u32,
        intents: u32,
        out: &mut Vec<Effect>,
    ) {
        let nonce = self.draw_nonce();
        self.attempt = attempt;
        self.nonce = Some(nonce);
        self.replace_resolves = 0;
        self.timers.clear();
        out.push(Effect::Persist(JournalRecord::LeaseIntent {
            node: self.spec.node_id.clone(),
            nonce,
            attempt,
        }));
        self.issue_create(now, 1, intents, out);
        // A new intent starts a new story: what the last one went through
        // is in the journal.
        self.past = Past::default();
    }

    /// Sends the create of the current intent; `tries` counts this one.
    pub(super) fn issue_create(
        &mut self,
        now: Instant,
        tries: u32,
        intents: u32,
        out: &mut Vec<Effect>,
    ) {
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
        let d = &self.spec;
        let request = CreateLeaseRequest {
            run_id: d.run_id,
            node: d.node_id.clone(),
            nonce: self.nonce.expect("a create follows an intent"),
            provider: d.provider,
            shape: d.shape.clone(),
            excluded_hosts: self.excluded_hosts.clone(),
        };
        out.push(Effect::CreateLease { op, request });
        let timeout = self.spec.boot.timeouts.lease_create_timeout;
        self.timers.set(TimerKind::LeaseCreate, now + timeout);
    }

    /// Continues what a restore left pending: the strays' destroys, then
    /// the phase's own work.
    pub(super) fn resume(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let _ = self.retry_spent_strays(now, out);
        let Phase::Restored(pending) = &self.phase else {
            return;
        };
        match pending.clone() {
            Pending::Resolve(resolve) => {
                self.issue_list(now, Resolve::new(resolve.intents, resolve.then), out)
            }
            Pending::Locate { lease } => {
                let timeout = self.spec.boot.timeouts.endpoint_timeout;
                self.timers.set(TimerKind::EndpointDeadline, now + timeout);
                self.issue_lookup(lease, out);
            }
            Pending::Destroy { replace, lease } => self.issue_destroy(now, 1, replace, lease, out),
            // A replacement whose destroy finished before the restart.
            Pending::Replace { attempt } => self.request_lease(now, attempt, 1, out),
        }
    }

    pub(super) fn on_lease_created(
        &mut self,
        now: Instant,
        result: Result<LeaseGranted, ProviderError>,
        (tries, intents): (u32, u32),
        then: Then,
        out: &mut Vec<Effect>,
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
                self.set_phase(Phase::Requesting {
                    op: None,
                    tries,
                    intents,
                    destroy_after: false,
                });
                let c = &self.config;
                let wait = backoff(tries, c.retry_backoff_base, c.retry_backoff_max);
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
                    Then::Destroy => self.enter(Phase::Destroyed { released: None }, out),
                    // A create is only ever awaited to bootstrap or destroy.
                    Then::Bootstrap | Then::Replace(_) => self.fail(now, why, out),
                }
            }
        }
    }

    /// A create answer that is not the awaited one. The lease it names is
    /// real and costs money: adopt it if it is the intent being resolved,
    /// ignore it if it is the lease already known, destroy it otherwise.
    pub(super) fn on_stray_lease(
        &mut self,
        now: Instant,
        granted: LeaseGranted,
        out: &mut Vec<Effect>,
    ) {
        let lease = granted.lease;
        if let Phase::Resolving { resolve, .. } | Phase::Restored(Pending::Resolve(resolve)) =
            &self.phase
            && Some(lease.nonce) == self.nonce
        {
            let then = resolve.then;
            self.timers.clear();
            return self.lease_known(now, lease, granted.endpoint, then, out);
        }
        if self.lease_id() == Some(&lease.lease_id) {
            self.ignored += 1;
            return;
        }
        self.adopt_stray(now, lease, out);
    }

    pub(super) fn lease_known(
        &mut self,
        now: Instant,
        lease: Arc<LeaseFacts>,
        endpoint: Option<SshEndpoint>,
        then: Then,
        out: &mut Vec<Effect>,
    ) {
        let node = self.spec.node_id.clone();
        out.push(Effect::Persist(JournalRecord::LeaseKnown {
            node,
            lease: lease.clone(),
        }));
        self.nonce = Some(lease.nonce);
        match (then, endpoint) {
            (Then::Destroy, _) => {
                self.pass_through(Lifecycle::LeaseCreated, out);
                self.issue_destroy(now, 1, 0, lease, out)
            }
            (Then::Replace(attempt), _) => {
                self.pass_through(Lifecycle::LeaseCreated, out);
                self.persist_replace_requested(attempt, out);
                self.issue_destroy(now, 1, attempt, lease, out);
            }
            (Then::Bootstrap, Some(endpoint)) => {
                self.pass_through(Lifecycle::LeaseCreated, out);
                self.endpoint_known(now, lease, endpoint, out)
            }
            // Locating is LeaseCreated's own phase: entering it announces.
            (Then::Bootstrap, None) => {
                let timeout = self.spec.boot.timeouts.endpoint_timeout;
                self.timers.set(TimerKind::EndpointDeadline, now + timeout);
                self.issue_lookup(lease, out);
            }
        }
    }

    pub(super) fn on_endpoint(
        &mut self,
        now: Instant,
        lease: Arc<LeaseFacts>,
        result: Result<EndpointStatus, ProviderError>,
        out: &mut Vec<Effect>,
    ) {
        let transient = |e: &ProviderError| {
            matches!(
                e.kind,
                ProviderErrorKind::Transient | ProviderErrorKind::Ambiguous
            )
        };
        match result {
            Ok(EndpointStatus::Ready(endpoint)) => self.endpoint_known(now, lease, endpoint, out),
            Ok(EndpointStatus::Pending { .. }) => self.poll_later(now, lease),
            Err(e) if transient(&e) => self.poll_later(now, lease),
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

    pub(super) fn poll_later(&mut self, now: Instant, lease: Arc<LeaseFacts>) {
        self.set_phase(Phase::Locating { op: None, lease });
        let interval = self.spec.boot.timeouts.endpoint_poll_interval;
        self.timers.set(TimerKind::EndpointPoll, now + interval);
    }

    pub(super) fn endpoint_known(
        &mut self,
        now: Instant,
        lease: Arc<LeaseFacts>,
        endpoint: SshEndpoint,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        self.pass_through(Lifecycle::EndpointKnown, out);
        let session = SessionId(self.sessions.next());
        let facts = BootstrapFacts {
            session,
            last_stage: bootstrap::Step::Created,
            last_stdout_seq: None,
            last_stderr_seq: None,
            last_observed_at: now,
        };
        let lease_id = lease.lease_id.clone();
        let boot = Boot {
            endpoint: endpoint.clone(),
            facts,
        };
        self.enter(Phase::Bootstrapping { lease, boot }, out);
        out.push(Effect::StartBootstrap {
            session,
            endpoint,
            lease_id,
            log_seqs: self.log_seqs,
        });
    }

    pub(super) fn fail(&mut self, now: Instant, reason: String, out: &mut Vec<Effect>) {
        self.fail_with(now, reason, false, out);
    }

    pub(super) fn fail_with(
        &mut self,
        now: Instant,
        reason: String,
        unresolved: bool,
        out: &mut Vec<Effect>,
    ) {
        self.timers.clear();
        let node = self.spec.node_id.clone();
        let log_seqs = self.log_seqs;
        out.push(Effect::Persist(JournalRecord::NodeFailed {
            node,
            reason: reason.clone(),
            log_seqs,
        }));
        let lease = self.phase.lease().cloned();
        let failure = Failure { reason, at: now };
        let failed = Phase::Failed {
            unresolved,
            lease,
            failure,
        };
        self.enter(failed, out);
    }

    /// Looks `lease`'s endpoint up (entering `Locating`, which announces
    /// `LeaseCreated` if the node was not there yet).
    pub(super) fn issue_lookup(&mut self, lease: Arc<LeaseFacts>, out: &mut Vec<Effect>) {
        self.timers.cancel(&TimerKind::EndpointPoll);
        let op = self.next_op();
        let locating = Phase::Locating {
            op: Some(op),
            lease: lease.clone(),
        };
        self.enter(locating, out);
        out.push(Effect::LookupEndpoint { op, lease });
    }

    pub(super) fn persist_destroy_requested(&mut self, out: &mut Vec<Effect>) {
        let node = self.spec.node_id.clone();
        out.push(Effect::Persist(JournalRecord::DestroyRequested { node }));
    }

    pub(super) fn persist_replace_requested(&mut self, attempt: u32, out: &mut Vec<Effect>) {
        let node = self.spec.node_id.clone();
        out.push(Effect::Persist(JournalRecord::ReplaceRequested {
            node,
            attempt,
        }));
    }

    pub(super) fn persist_abandoned(&mut self, out: &mut Vec<Effect>) {
        let node = self.spec.node_id.clone();
        let nonce = self.nonce.expect("an intent has a nonce");
        out.push(Effect::Persist(JournalRecord::IntentAbandoned {
            node,
            nonce,
        }));
    }

    /// Enters `phase` and announces its stage if it changed.
    pub(super) fn enter(&mut self, phase: Phase, out: &mut Vec<Effect>) {
        let before = self.phase.stage();
        self.set_phase(phase);
        let stage = self.phase.stage();
        if stage != before {
            self.announce(stage, out);
        }
    }

    /// Announces a stage the node passes through without resting in it
    /// (`LeaseCreated` on the way to a destroy or a bootstrap,
    /// `EndpointKnown`, `HandedOff`), unless it is the phase's own.
    pub(super) fn pass_through(&mut self, stage: Lifecycle, out: &mut Vec<Effect>) {
        if self.phase.stage() != stage {
            self.announce(stage, out);
        }
    }

    /// The `Changed` effect for `stage`.
    fn announce(&self, stage: Lifecycle, out: &mut Vec<Effect>) {
        let failed_reason = match &self.phase {
            Phase::Failed { failure, .. } if stage == Lifecycle::Failed => {
                Some(failure.reason.clone())
            }
            _ => None,
        };
        out.push(Effect::Changed {
            stage,
            ready: stage == Lifecycle::Dormant,
            failed_reason,
        });
    }

    pub(super) fn next_op(&mut self) -> OpId {
        OpId(self.ops.next())
    }

    /// A nonce never equal to the previous intent's, so an abandoned intent
    /// and its successor cannot be confused in a lease list.
    pub(super) fn draw_nonce(&mut self) -> Nonce {
        for _ in 0..8 {
            let nonce = Nonce(self.rng.next_u64());
            if Some(nonce) != self.nonce {
                return nonce;
            }
        }
        panic!("DetRng produced the same nonce eight times");
    }
}
