//! The node manager's state. Its phase is in `phase.rs`, its one `match
//! (phase, event)` in `dispatch.rs`, its invariants in `invariants.rs`, the
//! transitions in `transitions.rs` and its siblings.

use super::Timers;
pub(super) use super::phase::{Boot, Failure, Past, Pending, Phase, Resolve, Then};
use super::{AgentFacts, BootstrapFacts, Config, Effect, Input, Lifecycle, Record};
use crate::ids::{Counter, LeaseId, LogicalNodeId, Nonce, SessionId};
use crate::plan::LogicalNodeSpec;
use crate::port::{LeaseFacts, LogSeqs};
use crate::rng::DetRng;
use crate::time::Instant;
use std::sync::Arc;

/// The stream of the node's generator its backoff jitter is drawn from.
const JITTER_STREAM: u64 = 1;

/// The NodeManager of one logical node.
#[derive(Clone, Debug)]
pub struct Machine {
    pub(super) config: Config,
    /// The desired node.
    pub(super) spec: LogicalNodeSpec,
    /// Lease attempts so far, the current one included (0 before the first).
    pub(super) attempt: u32,
    /// The nonce of the current (or last) lease intent.
    pub(super) nonce: Option<Nonce>,
    /// The last log sequence numbers of the run: a node's next session
    /// continues from them, so they never restart (`port::LogRecord`).
    pub(super) log_seqs: LogSeqs,
    pub(super) phase: Phase,
    /// What the current intent went through before its phase.
    pub(super) past: Past,
    pub(super) timers: Timers,
    pub(super) rng: DetRng,
    /// Backoff jitter; a separate stream so that retries never shift nonces.
    pub(super) jitter: DetRng,
    /// Operation ids; the composite lends its own counter (see `swap_ids`).
    pub(super) ops: Counter,
    /// Session ids; lent by the composite like `ops`.
    pub(super) sessions: Counter,
    /// Hosts the next create must avoid.
    pub(super) excluded_hosts: Vec<String>,
    /// Inputs ignored as late, duplicate, unknown or out of place.
    pub(super) ignored: u64,
    /// Leases granted to an abandoned create and destroyed on sight.
    pub(super) stray_leases: u64,
    /// Stray leases whose destroy is in flight, waits for a retry, or spent.
    pub(super) strays: Vec<super::strays::Stray>,
    /// Resolutions of an unresolved intent started by `Replace` in this
    /// attempt (at most `intents_max`).
    pub(super) replace_resolves: u32,
}

impl Machine {
    /// A node manager in `New` for `spec`, drawing nonces from `rng`.
    pub fn new(config: Config, spec: LogicalNodeSpec, rng: DetRng) -> Machine {
        Machine {
            config,
            spec,
            attempt: 0,
            nonce: None,
            log_seqs: LogSeqs::default(),
            phase: Phase::New,
            past: Past::default(),
            timers: Timers::new(),
            jitter: rng.derive(JITTER_STREAM),
            rng,
            ops: Counter::starting_at(1),
            sessions: Counter::starting_at(1),
            excluded_hosts: Vec::new(),
            ignored: 0,
            stray_leases: 0,
            strays: Vec::new(),
            replace_resolves: 0,
        }
    }

    /// The ledger, derived from the phase and what came before it.
    pub fn record(&self) -> Record {
        let destroyed_at = match &self.phase {
            Phase::Destroyed {
                released: Some((_, at)),
            } => Some(*at),
            _ => None,
        };
        Record {
            desired: self.spec.clone(),
            attempt: self.attempt,
            nonce: self.nonce,
            lease: self.lease().cloned(),
            endpoint: self.boot().map(|b| b.endpoint.clone()),
            bootstrap: self.bootstrap().cloned(),
            log_seqs: self.log_seqs,
            agent: self.agent().cloned(),
            failed_reason: self.failed_reason().map(str::to_owned),
            failed_at: self.failed_at(),
            destroy_error: self.past.destroy_error.clone(),
            destroyed_at,
        }
    }

    /// The desired node.
    pub fn spec(&self) -> &LogicalNodeSpec {
        &self.spec
    }

    /// The logical node.
    pub fn node(&self) -> &LogicalNodeId {
        &self.spec.node_id
    }

    /// Lease attempts so far, the current one included.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The last log sequence numbers of the run.
    pub fn log_seqs(&self) -> LogSeqs {
        self.log_seqs
    }

    /// The known lease (kept after its destroy, for the record).
    pub fn lease(&self) -> Option<&Arc<LeaseFacts>> {
        self.phase.lease().or(self.past.lease.as_ref())
    }

    /// The id of the known lease.
    pub fn lease_id(&self) -> Option<&LeaseId> {
        self.lease().map(|lease| &lease.lease_id)
    }

    /// The node's agent, current or last.
    pub fn agent(&self) -> Option<&AgentFacts> {
        self.phase.agent().or(self.past.agent.as_ref())
    }

    /// The current or last bootstrap session's facts.
    pub fn bootstrap(&self) -> Option<&BootstrapFacts> {
        self.boot().map(|b| &b.facts)
    }

    /// Why the node failed, while it is failed or winding down after.
    pub fn failed_reason(&self) -> Option<&str> {
        self.failure().map(|f| f.reason.as_str())
    }

    /// When the node failed, while it is failed or winding down after.
    pub fn failed_at(&self) -> Option<Instant> {
        self.failure().map(|f| f.at)
    }

    /// The intent's failure: the phase's, or the one it went through.
    fn failure(&self) -> Option<&Failure> {
        match &self.phase {
            Phase::Failed { failure, .. } => Some(failure),
            _ => self.past.failure.as_ref(),
        }
    }

    /// The current or last session.
    fn boot(&self) -> Option<&Boot> {
        self.phase.boot().or(self.past.boot.as_ref())
    }

    /// The stage, derived from the phase.
    pub fn stage(&self) -> Lifecycle {
        self.phase.stage()
    }

    /// Enters `phase`, keeping what the phase left held for the record.
    pub(super) fn set_phase(&mut self, phase: Phase) {
        let left = std::mem::replace(&mut self.phase, phase);
        self.past.keep(left);
    }

    /// Whether the node is ready: exactly when it is `Dormant`.
    pub fn is_ready(&self) -> bool {
        self.stage() == Lifecycle::Dormant
    }

    /// Inputs ignored as late, duplicate, unknown or out of place.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Leases granted to abandoned creates, destroyed on sight.
    pub fn stray_leases(&self) -> u64 {
        self.stray_leases
    }

    /// Swaps the machine's id counters with the caller's: a composite lends
    /// its counters for one `handle` call so that every id of a run comes
    /// from one counter.
    pub fn swap_ids(&mut self, ops: &mut Counter, sessions: &mut Counter) {
        std::mem::swap(&mut self.ops, ops);
        std::mem::swap(&mut self.sessions, sessions);
    }

    /// Whether a provider operation of this node is awaiting its answer, a
    /// retry is pending, or a restore left work for `Start`.
    pub fn in_flight(&self) -> bool {
        self.restored_work()
            || !self.timers.is_empty()
            || self.stray_deadline().is_some()
            || self.phase_awaits_answer()
    }

    /// Whether a restore left work that `Start` resumes: a pending phase,
    /// or stray leases whose destroys wait for it.
    pub(super) fn restored_work(&self) -> bool {
        matches!(self.phase, Phase::Restored(_)) || self.strays_restored()
    }

    /// Whether the phase awaits a provider answer or a session.
    fn phase_awaits_answer(&self) -> bool {
        matches!(
            self.phase,
            Phase::Requesting { .. }
                | Phase::Resolving { .. }
                | Phase::Locating { .. }
                | Phase::Bootstrapping { .. }
                | Phase::Joined { .. }
                | Phase::Destroying { op: Some(_), .. }
        )
    }

    /// Whether the node is settled: at rest in Dormant, Failed,
    /// Destroying or Destroyed, with nothing in flight.
    pub fn is_settled(&self) -> bool {
        let at_rest = matches!(
            self.stage(),
            Lifecycle::Dormant | Lifecycle::Failed | Lifecycle::Destroying | Lifecycle::Destroyed
        );
        at_rest && !self.in_flight()
    }

    /// Raises the last log sequence numbers (see
    /// [`crate::orchestrator::Orchestrator::raise_log_seqs`]); a running
    /// session keeps its own.
    pub fn raise_log_seqs(&mut self, seqs: LogSeqs) {
        self.log_seqs = self.log_seqs.max_each(seqs);
    }

    /// Whether `Start` has work to do: a fresh node, or restored work.
    pub fn awaits_start(&self) -> bool {
        self.phase == Phase::New || self.restored_work()
    }

    /// Whether the node is replacing its lease: destroying the old one with
    /// a new intent to follow, or (restored) about to journal that intent.
    pub fn is_replacing(&self) -> bool {
        match self.phase {
            Phase::Destroying { replace, .. }
            | Phase::Restored(Pending::Destroy { replace, .. }) => replace > 0,
            Phase::Restored(Pending::Replace { .. }) => true,
            _ => false,
        }
    }

    /// Whether the node is on its way out: destroying, destroyed, or going to
    /// destroy whatever lease an outstanding create yields.
    pub fn is_winding_down(&self) -> bool {
        match &self.phase {
            Phase::Requesting { destroy_after, .. } => *destroy_after,
            Phase::Resolving { resolve, .. } | Phase::Restored(Pending::Resolve(resolve)) => {
                resolve.then == Then::Destroy
            }
            Phase::Destroying { .. }
            | Phase::Destroyed { .. }
            | Phase::Restored(Pending::Destroy { .. } | Pending::Replace { .. }) => true,
            Phase::Failed {
                unresolved, lease, ..
            } => *unresolved || lease.is_none(),
            _ => false,
        }
    }

    /// Whether the node certainly holds no lease that still stands: never
    /// leased, failed before a lease existed, or destroyed, and no stray
    /// lease is left to destroy.
    pub fn holds_no_lease(&self) -> bool {
        self.strays.is_empty() && self.holds_no_own_lease()
    }

    /// `holds_no_lease`, strays aside: the lease of the node's intent.
    fn holds_no_own_lease(&self) -> bool {
        match &self.phase {
            Phase::New | Phase::Destroyed { .. } | Phase::Restored(Pending::Replace { .. }) => true,
            Phase::Failed {
                unresolved, lease, ..
            } => !unresolved && lease.is_none(),
            _ => false,
        }
    }

    /// Whether an `AgentJoined` for `lease_id` would be accepted now.
    pub fn expects_join(&self, lease_id: &crate::ids::LeaseId) -> bool {
        // No token exists before the start command runs, and a join that
        // came earlier would reach a session unable to use it.
        match &self.phase {
            Phase::Bootstrapping { lease, boot } => {
                let started = matches!(
                    boot.facts.last_stage,
                    crate::bootstrap::Step::AgentStarting | crate::bootstrap::Step::WaitingForJoin
                );
                &lease.lease_id == lease_id && started
            }
            Phase::Dormant {
                lease,
                rejoin_allowed: true,
                ..
            } => &lease.lease_id == lease_id,
            _ => false,
        }
    }

    /// The active bootstrap session, if any.
    pub fn session(&self) -> Option<SessionId> {
        self.phase.boot().map(|b| b.facts.session)
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        self.step(now, input, &mut out);
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        let own = self.timers.next_deadline();
        match self.stray_deadline() {
            Some(stray) => Some(own.map_or(stray, |own| own.min(stray))),
            None => own,
        }
    }

    fn check_invariants(&self) {
        self.check_all();
    }
}

impl Machine {
    /// `BootstrapObserved`: an observation of the node's session (current
    /// or cancelled) is noted; any other is ignored. It has no effects, so a
    /// composite may deliver it while the session is still stepping.
    pub(crate) fn observe(&mut self, now: Instant, obs: crate::bootstrap::Observation) {
        let ours = self.bootstrap().is_some_and(|b| b.session == obs.session);
        if ours {
            self.on_observed(now, obs);
        } else {
            self.ignored += 1;
        }
    }

    /// Every invariant of this machine (see `spec/provisioning.md`).
    fn check_all(&self) {
        self.check_ledger();
        self.check_timers();
        self.check_strays();
    }
}
