//! The tier-1 world: a discrete-event simulation that drives the real
//! orchestrator composite against a simulated provider, SSH hosts, agents and
//! a journal disk.
//!
//! Events sit in one queue ordered by `(time, seq)`; there is no async and no
//! thread inside a run, so a case always runs the same way. The world plays
//! the effect loop faithfully: it hands the orchestrator one input at a time,
//! dispatches the effects in order, and on a `Persist` writes the record and
//! dispatches nothing more until the write is synced. A crash loses the
//! unsynced write, the inbox, the pending effects and every SSH connection;
//! the provider and the agents live on.

mod dispatch;
pub mod faults;
mod incarnation;
mod phases;
pub mod provider;
pub mod ssh;
mod ssh_ops;
mod step;

use crate::plan;
use conformance::case::{Action, Case, OpKind};
use conformance::coverage::Coverage;
use conformance::oracle::{Observation, Oracle};
use conformance::{RunOptions, RunOutcome, Stats, System, Violation};
use core_fsm::digest::Digest;
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, OpId, SessionId};
use core_fsm::node::Lifecycle;
use core_fsm::plan::RunPlan;
use core_fsm::port::{Effect, Input, JoinBinding, JournalRecord};
use core_fsm::time::{Duration, Instant};
use faults::Faults;
use provider::Provider;
use ssh::Ssh;
use std::collections::{BTreeMap, VecDeque};

/// Steps after which a run is declared runaway (a tick that never advances
/// time, a retry without bound).
const STEP_MAX: u64 = 100_000;

/// Something scheduled to happen.
#[derive(Clone, Debug)]
enum Event {
    /// An answer (or a join) reaches incarnation `inc`.
    Deliver { inc: u32, input: Input },
    /// A timer of incarnation `inc` may have expired.
    Tick { inc: u32 },
    /// The pending journal write of incarnation `inc` is synced.
    SyncDone { inc: u32 },
    /// A timed action of the plan.
    Act(Action),
    /// The killed orchestrator is started again from its journal.
    Restart,
    /// An agent tries to join with `binding`'s token (or a wrong one).
    Join {
        binding: JoinBinding,
        agent: AgentId,
        valid: bool,
        tries: u32,
    },
    /// Membership's verdict on an agent that crashed after its handoff:
    /// Dead, told to whichever incarnation runs then.
    AgentLost { node: LogicalNodeId, agent: AgentId },
    /// The fault phase ends.
    Heal,
}

// Where the run is: the kit's liveness phases.
use conformance::liveness::Phase;

/// One live orchestrator incarnation and its effect loop.
struct Orch<S> {
    sys: S,
    pending: VecDeque<Effect>,
    inbox: VecDeque<Input>,
    syncing: bool,
    armed: Option<Instant>,
}

/// The journal disk: synced records survive a crash, the pending one not.
#[derive(Clone, Debug, Default)]
struct Disk {
    synced: Vec<JournalRecord>,
    unsynced: Option<JournalRecord>,
}

/// The tier-1 world of one case.
pub struct World<'c, S: System> {
    case: &'c Case,
    plan: RunPlan,
    faults: Faults,
    now: Instant,
    seq: u64,
    queue: BTreeMap<(Instant, u64), Event>,
    orch: Option<Orch<S>>,
    inc: u32,
    disk: Disk,
    provider: Provider,
    ssh: Ssh,
    oracle: Oracle,
    ordinals: BTreeMap<OpKind, u32>,
    effects_dispatched: u32,
    writes: u32,
    storm_until: Instant,
    unknown_answers: u64,
    op_node: BTreeMap<OpId, LogicalNodeId>,
    session_node: BTreeMap<SessionId, (LogicalNodeId, LeaseId)>,
    connecting: BTreeMap<OpId, (SessionId, LeaseId)>,
    session_clock: BTreeMap<SessionId, Instant>,
    stages: BTreeMap<LogicalNodeId, Lifecycle>,
    digest: Digest,
    /// The bytes of the value being digested (kept to reuse its buffer).
    digest_bytes: Vec<u8>,
    step_digests: Vec<u64>,
    step: u64,
    coverage: Coverage,
    transcript: Option<Vec<String>>,
    phase: Phase,
    deadline: Option<Instant>,
    teardown_wanted: bool,
    violation: Option<Violation>,
    stats: Stats,
}

impl<'c, S: System> World<'c, S> {
    /// A world for `case`.
    pub fn new(case: &'c Case, options: RunOptions) -> World<'c, S> {
        World {
            case,
            plan: plan::run_plan(&case.profile),
            faults: Faults::index(&case.items),
            now: Instant::ZERO,
            seq: 0,
            queue: BTreeMap::new(),
            orch: None,
            inc: 0,
            disk: Disk::default(),
            provider: Provider::default(),
            ssh: Ssh::default(),
            oracle: Oracle::new(),
            ordinals: BTreeMap::new(),
            effects_dispatched: 0,
            writes: 0,
            storm_until: Instant::ZERO,
            unknown_answers: 0,
            op_node: BTreeMap::new(),
            session_node: BTreeMap::new(),
            connecting: BTreeMap::new(),
            session_clock: BTreeMap::new(),
            stages: BTreeMap::new(),
            digest: Digest::default(),
            digest_bytes: Vec::new(),
            step_digests: Vec::new(),
            step: 0,
            coverage: Coverage::default(),
            transcript: options.transcript.then(Vec::new),
            phase: Phase::Fault,
            deadline: None,
            teardown_wanted: false,
            violation: None,
            stats: Stats::default(),
        }
    }

    /// Runs the case to its end or its first violation.
    pub fn run(mut self) -> RunOutcome {
        for (at, action) in self.faults.timed.clone() {
            if at < self.case.profile.heal_at_ms {
                self.schedule(Instant(at), Event::Act(action));
            }
        }
        self.schedule(Instant(self.case.profile.heal_at_ms), Event::Heal);
        self.start_incarnation(None);
        self.pump();
        while self.violation.is_none() && self.phase != Phase::Done {
            let Some(((at, _), event)) = self.queue.pop_first() else {
                self.stuck();
                break;
            };
            if self.deadline.is_some_and(|d| at > d) {
                self.now = self.deadline.unwrap_or(at);
                self.out_of_time();
                break;
            }
            self.now = at;
            self.event(event);
            self.pump();
            while self.violation.is_none() && self.advance_phase() {}
            if self.step > STEP_MAX && self.violation.is_none() {
                self.violate("L3", format!("runaway: more than {STEP_MAX} steps"));
            }
        }
        self.stats.end_ms = self.now.as_millis();
        self.stats.steps = self.step;
        self.stats.leases_created = self.provider.created_count();
        RunOutcome {
            violation: self.violation,
            digest: self.digest,
            step_digests: self.step_digests,
            coverage: self.coverage,
            transcript: self.transcript.unwrap_or_default(),
            stats: self.stats,
        }
    }

    fn schedule(&mut self, at: Instant, event: Event) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), event);
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = self.transcript.as_mut() {
            t.push(format!("t={} {}", self.now.as_millis(), line()));
        }
    }

    fn violate(&mut self, id: &'static str, message: String) {
        if self.violation.is_none() {
            self.note(|| format!("VIOLATION {id}: {message}"));
            self.violation = Some(Violation {
                id,
                step: self.step,
                at_ms: self.now.as_millis(),
                message,
            });
        }
    }

    fn observe(&mut self, obs: Observation<'_>) {
        if let Err(v) = self.oracle.observe(obs) {
            let message = v.message.clone();
            self.violate(v.id, message);
        }
    }

    /// Faults apply only during the fault phase.
    fn faulty(&self) -> bool {
        self.phase == Phase::Fault
    }

    fn injected(&mut self, name: &'static str) {
        self.coverage.faults.insert(name);
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Deliver { inc, input } => self.deliver(inc, input),
            Event::Tick { inc } => {
                let now = self.now;
                if let Some(orch) = self.orch.as_mut().filter(|_| inc == self.inc) {
                    let due = orch.sys.next_deadline().is_some_and(|d| d <= now);
                    if due && !orch.inbox.contains(&Input::Tick) {
                        orch.inbox.push_back(Input::Tick);
                    }
                    orch.armed = None;
                }
            }
            Event::SyncDone { inc } => {
                if inc == self.inc && self.orch.is_some() {
                    if let Some(record) = self.disk.unsynced.take() {
                        self.observe(Observation::Synced(&record));
                        self.disk.synced.push(record);
                    }
                    if let Some(orch) = self.orch.as_mut() {
                        orch.syncing = false;
                    }
                }
            }
            Event::Act(action) => self.act(action),
            Event::Restart => {
                let journal = self.disk.synced.clone();
                self.start_incarnation(Some(journal));
            }
            Event::Join {
                binding,
                agent,
                valid,
                tries,
            } => self.join(binding, agent, valid, tries),
            Event::AgentLost { node, agent } => {
                let inc = self.inc;
                let reason = "its agent stopped heartbeating (membership: Dead)".to_owned();
                self.deliver(
                    inc,
                    Input::AgentLost {
                        node,
                        agent,
                        reason,
                    },
                );
            }
            Event::Heal => {
                self.phase = Phase::Heal;
                self.deadline = Some(self.now + plan::settle_budget(&self.case.profile));
                self.note(|| "world: heal, faults off".to_owned());
            }
        }
    }

    fn deliver(&mut self, inc: u32, input: Input) {
        if inc != self.inc || self.orch.is_none() {
            return;
        }
        if let Input::SshConnected { op, result: Ok(()) } = &input
            && let Some((session, lease)) = self.connecting.remove(op)
        {
            self.ssh.open(session, lease.clone());
            self.observe(Observation::ConnectionOpened {
                session,
                lease: &lease,
            });
        }
        if let Some(orch) = self.orch.as_mut() {
            orch.inbox.push_back(input);
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Crash { restart_after_ms } => self.crash(restart_after_ms, "crash"),
            Action::Storm { ms } => {
                self.injected("storm-429");
                self.storm_until = self.storm_until.max(self.now + Duration::from_millis(ms));
            }
            Action::Teardown => {
                self.injected("early-teardown");
                self.teardown_wanted = true;
                if let Some(orch) = self.orch.as_mut() {
                    orch.inbox.push_back(Input::Teardown);
                }
            }
            Action::Destroy { node } => {
                let ids = plan::node_ids(&self.case.profile);
                if let (Some(orch), false) = (self.orch.as_mut(), ids.is_empty()) {
                    let node = ids[node as usize % ids.len()].clone();
                    orch.inbox.push_back(Input::Destroy { node });
                    self.coverage.faults.insert("operator-destroy");
                }
            }
            Action::Scale { group, count } => {
                if let (Some(orch), Some(input)) =
                    (self.orch.as_mut(), plan::scale(&self.plan, group, count))
                {
                    orch.inbox.push_back(input);
                    self.coverage.faults.insert("operator-scale");
                }
            }
            Action::UnknownAnswer => {
                self.unknown_answers += 1;
                let op = OpId(9_000_000 + self.unknown_answers);
                let input = dispatch::unknown_answer(op, self.unknown_answers);
                self.injected("unknown-answer");
                let inc = self.inc;
                self.deliver(inc, input);
            }
        }
    }
}
