//! The world's shared state: what lives outside every simulated node and
//! survives their deaths. The kit's oracle and this tier's digest (the
//! checkers live outside the replicas), the case's fault index and ordinals,
//! the provider's leases, the journal's disk, and the join tokens.
//!
//! Every node reaches it through one [`World`]; madsim runs all nodes on one
//! thread, so the lock is never contended, but it is never held across an
//! `await` either (a killed node must not leave it locked).

use crate::chaos::Chaos;
use conformance::case::{Case, NetFault, OpFault, OpKind};
use conformance::coverage::Coverage;
use conformance::oracle::{Observation, Oracle};
use conformance::{Stats, Violation};
use core_fsm::digest::Digest;
use core_fsm::ids::{LeaseId, LogicalNodeId, OpId, SessionId};
use core_fsm::node::Lifecycle;
use core_fsm::plan::RunPlan;
use core_fsm::port::{JoinBinding, JournalRecord};
use core_fsm::time::Instant;
use sim::world::faults::Faults;
use sim::world::provider::Provider;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedSender;

use crate::wire::JoinToken;
use conformance::liveness::Settle;

/// Steps after which a run is declared runaway (as in tier 1).
pub const STEP_MAX: u64 = 100_000;

/// Where the run is: the kit's liveness phases, as in tier 1.
pub use conformance::liveness::Phase;

/// The journal's disk: synced records survive a kill, the pending one not.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    /// Durable records, in order.
    pub synced: Vec<JournalRecord>,
    /// The write in flight, lost if the orchestrator dies before its sync.
    pub pending: Option<JournalRecord>,
}

/// A minted join token and whether it was revoked.
#[derive(Clone, Copy, Debug)]
pub struct Token {
    /// The secret.
    pub value: JoinToken,
    /// Revoked by `RevokeJoin`.
    pub revoked: bool,
}

/// What a node asks of the supervisor (who holds the madsim handles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// Kill the orchestrator now and restart it from its journal later.
    Kill {
        /// The fault's name.
        why: &'static str,
        /// Downtime, in ms.
        restart_after_ms: u64,
    },
    /// The provider created the machine of lease `ordinal`: boot its node.
    Created {
        /// The lease's creation ordinal.
        ordinal: u32,
    },
    /// The provider destroyed the machine of lease `ordinal`: kill its node.
    Destroyed {
        /// The lease's creation ordinal.
        ordinal: u32,
    },
}

/// The orchestrator's address.
pub const ORCHESTRATOR_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// The provider API's address.
pub const PROVIDER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

/// The address of the machine of lease `ordinal`.
pub fn machine_ip(ordinal: u32) -> IpAddr {
    let [_, _, high, low] = (ordinal + 1).to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(10, 1, high, low))
}

/// The shared state; see the module docs.
pub struct WorldState {
    /// The case under run.
    pub case: Case,
    /// Its run plan (the same as tier 1's).
    pub plan: RunPlan,
    /// Its faults, indexed.
    pub faults: Faults,
    /// This tier's network and machine faults.
    pub chaos: Chaos,
    /// The run's phase.
    pub phase: Phase,
    /// The kit's invariant oracle.
    pub oracle: Oracle,
    /// Every transition (and world event) folded together.
    pub digest: Digest,
    /// The running digest after each step.
    pub step_digests: Vec<u64>,
    /// Inputs handled, all incarnations.
    pub step: u64,
    /// What was exercised.
    pub coverage: Coverage,
    /// One line per step and world event, when asked for.
    pub transcript: Option<Vec<String>>,
    /// The first broken guarantee.
    pub violation: Option<Violation>,
    /// Counts.
    pub stats: Stats,
    /// The orchestrator's incarnation (1 = first boot, 0 = never started).
    pub inc: u32,
    /// Whether an incarnation is running.
    pub orch_up: bool,
    /// The operator wants a teardown (a restarted orchestrator gets
    /// `Teardown` instead of `Start`).
    pub teardown_wanted: bool,
    /// The journal's disk.
    pub journal: Journal,
    /// Journal writes started, all incarnations.
    pub writes: u32,
    /// Effects dispatched (persists included), all incarnations.
    pub effects_dispatched: u32,
    /// The provider's leases.
    pub provider: Provider,
    /// Provider calls are answered 429 until then.
    pub storm_until: Instant,
    /// Requests received per kind, all incarnations.
    pub ordinals: BTreeMap<OpKind, u32>,
    /// Join tokens by binding.
    pub tokens: BTreeMap<JoinBinding, Token>,
    /// Tokens minted so far (each gets a fresh secret).
    pub minted: u64,
    /// SSH connections the orchestrator's port holds open, by session.
    pub open_sessions: BTreeMap<SessionId, LeaseId>,
    /// Which node an operation concerns (coverage pairs).
    pub op_node: BTreeMap<OpId, LogicalNodeId>,
    /// Which node and lease a session concerns.
    pub session_node: BTreeMap<SessionId, (LogicalNodeId, LeaseId)>,
    /// Each node's stage after the last step.
    pub stages: BTreeMap<LogicalNodeId, Lifecycle>,
    /// After the last step: what the kit's liveness rule reads.
    pub settle: Settle,
    /// Nodes ready when the run settled.
    pub ready_count: u32,
    /// Nodes failed when the run settled.
    pub failed_count: u32,
    /// A node asked for the orchestrator to be killed; it is dying.
    pub dying: bool,
    /// The agent service each machine runs (by lease ordinal): the token it
    /// presents and its identity. A rebooted machine starts it again.
    pub agents: BTreeMap<u32, (JoinToken, core_fsm::ids::AgentId)>,
    /// SSH endpoints the provider handed out, to the machine ordinal behind
    /// each (the provider's NAT).
    pub nat: BTreeMap<(String, u16), u32>,
    /// Virtual time of the last observation, in ms (for reports).
    pub now_ms: u64,
}

/// The world every node shares.
pub struct World {
    state: Mutex<WorldState>,
    /// Wakes the supervisor after a step or a violation.
    pub wake: Notify,
    /// The supervisor's mailbox.
    pub control: Mutex<Option<UnboundedSender<Control>>>,
    /// The running incarnation's inbox (for operator inputs).
    pub inbox: Mutex<Option<UnboundedSender<core_fsm::port::Input>>>,
}

impl World {
    /// A world for `case` with `chaos`.
    pub fn new(case: &Case, chaos: Chaos, transcript: bool) -> World {
        World {
            state: Mutex::new(WorldState {
                plan: sim::plan::run_plan(&case.profile),
                faults: Faults::index(&case.items),
                case: case.clone(),
                chaos,
                phase: Phase::Fault,
                oracle: Oracle::new(),
                digest: Digest::default(),
                step_digests: Vec::new(),
                step: 0,
                coverage: Coverage::default(),
                transcript: transcript.then(Vec::new),
                violation: None,
                stats: Stats::default(),
                inc: 0,
                orch_up: false,
                teardown_wanted: false,
                journal: Journal::default(),
                writes: 0,
                effects_dispatched: 0,
                provider: Provider::default(),
                storm_until: Instant::ZERO,
                ordinals: BTreeMap::new(),
                tokens: BTreeMap::new(),
                minted: 0,
                open_sessions: BTreeMap::new(),
                op_node: BTreeMap::new(),
                session_node: BTreeMap::new(),
                stages: BTreeMap::new(),
                settle: Settle::default(),
                ready_count: 0,
                failed_count: 0,
                dying: false,
                agents: BTreeMap::new(),
                nat: BTreeMap::new(),
                now_ms: 0,
            }),
            wake: Notify::new(),
            control: Mutex::new(None),
            inbox: Mutex::new(None),
        }
    }

    /// Locks the state. A panic while it was held (a bug in the world)
    /// leaves it usable: the panic itself is the report.
    pub fn lock(&self) -> MutexGuard<'_, WorldState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends `control` to the supervisor.
    pub fn control(&self, control: Control) {
        let sender = self.control.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = sender.as_ref() {
            // The supervisor outlives every node; a closed mailbox means the
            // run is over and nothing matters any more.
            let _ = sender.send(control);
        }
        self.wake.notify_one();
    }

    /// Hands `input` to the running incarnation, if one runs.
    pub fn input(&self, input: core_fsm::port::Input) -> bool {
        let sender = self.inbox.lock().unwrap_or_else(|p| p.into_inner());
        sender.as_ref().is_some_and(|s| s.send(input).is_ok())
    }

    /// Asks for the orchestrator to be killed now (a crash keyed on an
    /// effect or a journal write), if faults are on and it is not dying
    /// already. True when the caller must stop: the kill is on its way.
    pub fn request_kill(&self, why: &'static str, restart_after_ms: u64) -> bool {
        {
            let mut w = self.lock();
            if !w.faulty() || !w.orch_up || w.dying {
                return false;
            }
            w.dying = true;
        }
        self.control(Control::Kill {
            why,
            restart_after_ms,
        });
        true
    }
}

impl WorldState {
    /// Records a transcript line (when one is kept).
    pub fn note(&mut self, now: Instant, line: impl FnOnce() -> String) {
        self.now_ms = now.as_millis();
        if let Some(t) = self.transcript.as_mut() {
            t.push(format!("t={} {}", now.as_millis(), line()));
        }
    }

    /// Records the first violation; later ones are dropped.
    pub fn violate(&mut self, now: Instant, id: &'static str, message: String) {
        if self.violation.is_some() {
            return;
        }
        self.note(now, || format!("VIOLATION {id}: {message}"));
        self.violation = Some(Violation {
            id,
            step: self.step,
            at_ms: now.as_millis(),
            message,
        });
        self.phase = Phase::Done;
    }

    /// Feeds the oracle; a broken invariant becomes the run's violation.
    pub fn observe(&mut self, now: Instant, obs: Observation<'_>) {
        if let Err(v) = self.oracle.observe(obs) {
            self.violate(now, v.id, v.message);
        }
    }

    /// Folds a world event (an incarnation started or killed) into the
    /// digest, so two runs that differ only there still differ.
    pub fn event(&mut self, now: Instant, what: &str) {
        self.digest.update_debug(&(what, now, self.inc));
        let inc = self.inc;
        self.note(now, || format!("world: {what} (orchestrator #{inc})"));
    }

    /// Faults apply during the fault phase only.
    pub fn faulty(&self) -> bool {
        self.phase == Phase::Fault
    }

    /// Notes that a named fault was actually injected.
    pub fn injected(&mut self, name: &'static str) {
        self.coverage.faults.insert(name);
    }

    /// The next ordinal of `kind`.
    pub fn ordinal(&mut self, kind: OpKind) -> u32 {
        let n = self.ordinals.entry(kind).or_insert(0);
        *n += 1;
        *n - 1
    }

    /// The request fault of (`kind`, `nth`), if faults are on; a 429 storm
    /// answers every provider call.
    pub fn op_fault(&mut self, now: Instant, kind: OpKind, nth: u32) -> Option<OpFault> {
        if !self.faulty() {
            return None;
        }
        if kind.is_provider() && now < self.storm_until {
            self.injected("storm-429");
            return Some(OpFault::RateLimited);
        }
        let fault = self.faults.op.get(&(kind, nth)).copied();
        if let Some(fault) = fault {
            let item = conformance::case::Item::Op {
                op: kind,
                nth,
                fault,
            };
            self.injected(conformance::fault::name_of(&item));
        }
        fault
    }

    /// The answer fault of (`kind`, `nth`), if faults are on.
    pub fn net_fault(&mut self, kind: OpKind, nth: u32) -> Option<NetFault> {
        if !self.faulty() {
            return None;
        }
        let fault = self.faults.net.get(&(kind, nth)).copied();
        match fault {
            Some(NetFault::Drop) => self.injected("answer-dropped"),
            Some(NetFault::Delay { .. }) => self.injected("latency"),
            Some(NetFault::Duplicate) => self.injected("answer-duplicated"),
            None => {}
        }
        fault
    }

    /// Mints a fresh token for `binding` (a start command is about to run).
    pub fn mint(&mut self, binding: JoinBinding) -> JoinToken {
        self.minted += 1;
        let mut digest = Digest::default();
        digest.update_debug(&(self.case.seed, self.minted, &binding));
        let value = JoinToken(digest.0);
        self.tokens.insert(
            binding,
            Token {
                value,
                revoked: false,
            },
        );
        value
    }

    /// Revokes `binding`'s token.
    pub fn revoke(&mut self, binding: &JoinBinding) {
        if let Some(token) = self.tokens.get_mut(binding) {
            token.revoked = true;
        }
    }

    /// The binding an unrevoked `token` was minted for.
    pub fn accepts(&self, token: JoinToken) -> Option<JoinBinding> {
        self.tokens
            .iter()
            .find(|(_, t)| t.value == token && !t.revoked)
            .map(|(binding, _)| binding.clone())
    }

    /// An unrevoked binding of the same node for another lease, with its
    /// token (what a stale agent presents).
    pub fn stale_binding(&self, binding: &JoinBinding) -> Option<(JoinBinding, JoinToken)> {
        self.tokens
            .iter()
            .find(|(b, t)| !t.revoked && b.node == binding.node && b.lease_id != binding.lease_id)
            .map(|(b, t)| (b.clone(), t.value))
    }
}
