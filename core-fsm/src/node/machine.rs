//! The node manager's state. Its phase is in `phase.rs`, its one `match
//! (phase, event)` in `dispatch.rs`, its invariants in `invariants.rs`, the
//! transitions in `transitions.rs` and its siblings.

use super::Timers;
pub(super) use super::phase::{Pending, Phase, Resolve, Then};
use super::{Config, Effect, Input, Lifecycle, Record};
use crate::ids::{Counter, SessionId};
use crate::plan::LogicalNodeSpec;
use crate::port::LogSeqs;
use crate::rng::DetRng;
use crate::time::Instant;

/// The stream of the node's generator its backoff jitter is drawn from.
const JITTER_STREAM: u64 = 1;

/// The NodeManager of one logical node.
#[derive(Clone, Debug)]
pub struct Machine {
    pub(super) config: Config,
    pub(super) record: Record,
    pub(super) phase: Phase,
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
            record: Record {
                desired: spec,
                attempt: 0,
                nonce: None,
                lease: None,
                endpoint: None,
                bootstrap: None,
                log_seqs: LogSeqs::default(),
                agent: None,
                failed_reason: None,
                failed_at: None,
                destroy_error: None,
                destroyed_at: None,
            },
            phase: Phase::New,
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

    /// The ledger.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The stage, derived from the phase.
    pub fn stage(&self) -> Lifecycle {
        self.phase.stage()
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
        self.record.log_seqs = self.record.log_seqs.max_each(seqs);
    }

    /// Whether `Start` has work to do: a fresh node, or restored work.
    pub fn awaits_start(&self) -> bool {
        self.phase == Phase::New || self.restored_work()
    }

    /// Whether the node is replacing its lease: destroying the old one with
    /// a new intent to follow, or (restored) about to journal that intent.
    pub fn is_replacing(&self) -> bool {
        match self.phase {
            Phase::Destroying { replace, .. } | Phase::Restored(Pending::Destroy { replace }) => {
                replace > 0
            }
            Phase::Restored(Pending::Replace { .. }) => true,
            _ => false,
        }
    }

    /// Whether the node is on its way out: destroying, destroyed, or going to
    /// destroy whatever lease an outstanding create yields.
    pub fn is_winding_down(&self) -> bool {
        match self.phase {
            Phase::Requesting { destroy_after, .. } => destroy_after,
            Phase::Resolving { resolve, .. } | Phase::Restored(Pending::Resolve(resolve)) => {
                resolve.then == Then::Destroy
            }
            Phase::Destroying { .. }
            | Phase::Destroyed
            | Phase::Restored(Pending::Destroy { .. } | Pending::Replace { .. }) => true,
            Phase::Failed { unresolved } => unresolved || self.record.lease.is_none(),
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
    pub(super) fn holds_no_own_lease(&self) -> bool {
        match self.phase {
            Phase::New | Phase::Destroyed | Phase::Restored(Pending::Replace { .. }) => true,
            Phase::Failed { unresolved } => !unresolved && self.record.lease.is_none(),
            _ => false,
        }
    }

    /// Whether an `AgentJoined` for `lease_id` would be accepted now.
    pub fn expects_join(&self, lease_id: &crate::ids::LeaseId) -> bool {
        // No token exists before the start command runs, and a join that
        // came earlier would reach a session unable to use it.
        let lease_matches = self.record.lease_id() == Some(lease_id);
        let started = self.record.bootstrap.as_ref().is_some_and(|b| {
            matches!(
                b.last_stage,
                crate::bootstrap::Step::AgentStarting | crate::bootstrap::Step::WaitingForJoin
            )
        });
        match self.phase {
            Phase::Bootstrapping { .. } => lease_matches && started,
            Phase::Dormant {
                rejoin_allowed: true,
            } => lease_matches,
            _ => false,
        }
    }

    /// The active bootstrap session, if any.
    pub fn session(&self) -> Option<SessionId> {
        match self.phase {
            Phase::Bootstrapping { session } | Phase::Joined { session } => Some(session),
            _ => None,
        }
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
        let ours = (self.record.bootstrap.as_ref()).is_some_and(|b| b.session == obs.session);
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
