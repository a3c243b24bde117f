//! The orchestrator composite: owns the reconciler's state, the node managers
//! (by logical node id) and the bootstrap sessions (by session id), and
//! routes [`crate::port::Input`] to them.
//!
//! Every id of a run comes from the composite's counters, lent to a child for
//! the duration of one `handle` call. Each effect that starts I/O is recorded
//! in a route table under its operation id; the answer goes to the owner of
//! that id, and an answer no route names (unknown, duplicate, or belonging to
//! an ended session) is ignored and counted. Invariants O1.. are in
//! `spec/provisioning.md`.

mod invariants;
mod routing;

use crate::ids::{Counter, LogicalNodeId, OpId, SessionId};
use crate::node;
use crate::plan::{LogicalNodeSpec, RunPlan};
use crate::port::{Effect, Input, JournalRecord};
use crate::reconcile::{self, Action, Condition, NodeView, Quarantine};
use crate::rng::DetRng;
use crate::time::Instant;
use crate::{bootstrap, digest::Digest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the composite is built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The run plan.
    pub plan: RunPlan,
    /// The seed every random draw (nonces) derives from.
    pub seed: u64,
}

/// Inputs the composite ignored, by why. None of them is an error: under
/// faults they are normal, and they are counted so tests and dashboards can
/// see them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Answers whose operation id has no route: never issued, answered
    /// already (a duplicate), of an ended session, or of the wrong kind.
    pub unknown_ops: u64,
    /// Joins for an unknown node, a node not expecting one, a wrong lease,
    /// or a second join.
    pub ignored_joins: u64,
    /// `Destroy` for a node the ledger does not have.
    pub unknown_nodes: u64,
    /// `Start` twice, or after `Teardown`.
    pub ignored_commands: u64,
    /// Inputs node managers ignored (late answers, out-of-place inputs).
    pub ignored_by_nodes: u64,
    /// Inputs bootstrap sessions ignored.
    pub ignored_by_sessions: u64,
    /// Leases granted to abandoned creates and destroyed on sight.
    pub stray_leases: u64,
    /// Journaled nodes the plan no longer has (not restored).
    pub unplanned_journal_nodes: u64,
}

/// Who awaits an operation's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    Node(LogicalNodeId),
    Session(SessionId),
}

/// A live bootstrap session and the node it belongs to.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub(crate) node: LogicalNodeId,
    pub(crate) machine: bootstrap::Machine,
    /// Every operation routed to it, dropped from the routes when it ends.
    pub(crate) ops: Vec<OpId>,
}

/// The orchestrator composite.
#[derive(Clone, Debug)]
pub struct Orchestrator {
    pub(crate) plan: RunPlan,
    pub(crate) specs: BTreeMap<LogicalNodeId, LogicalNodeSpec>,
    pub(crate) reconciler: reconcile::Config,
    pub(crate) desired: reconcile::Desired,
    pub(crate) quarantine: Quarantine,
    pub(crate) node_config: node::Config,
    pub(crate) rng: DetRng,
    pub(crate) ops: Counter,
    pub(crate) session_ids: Counter,
    pub(crate) nodes: BTreeMap<LogicalNodeId, node::Machine>,
    pub(crate) sessions: BTreeMap<SessionId, Session>,
    pub(crate) routes: BTreeMap<OpId, Owner>,
    pub(crate) run_journaled: bool,
    pub(crate) started: bool,
    pub(crate) tearing_down: bool,
    pub(crate) reconcile_due: bool,
    pub(crate) requeue_at: Option<Instant>,
    pub(crate) counters: Counters,
}

/// Reconcile passes at most per input: a pass's actions can make another
/// pass due (a replacement whose destroy finished at once), never forever.
const RECONCILE_PASSES_MAX: u32 = 4;

impl Orchestrator {
    /// A composite for a fresh run; `Start` brings the plan up.
    pub fn new(config: Config) -> Orchestrator {
        Orchestrator::build(config, 0)
    }

    /// A composite rebuilt from `journal` after a restart; `Start` resumes
    /// each node: an open intent is resolved by listing leases, a known
    /// lease of a node that was not ready is bootstrapped again, a ready
    /// node is kept, a requested destroy is finished.
    pub fn restore(config: Config, journal: &[JournalRecord]) -> Orchestrator {
        // Draws after a restart must differ from the first life's: the
        // journal's length names the life.
        let mut orchestrator = Orchestrator::build(config, journal.len() as u64);
        let mut folds: BTreeMap<LogicalNodeId, node::Journaled> = BTreeMap::new();
        for record in journal {
            match node::Journaled::node_of(record) {
                Some(node) => folds.entry(node.clone()).or_default().apply(record),
                None => orchestrator.run_journaled = true,
            }
        }
        for (id, fold) in folds {
            let Some(spec) = orchestrator.specs.get(&id).cloned() else {
                orchestrator.counters.unplanned_journal_nodes += 1;
                continue;
            };
            if let (Some(lease), Some(_)) = (&fold.lease, &fold.failed)
                && let Some(host) = &lease.host_id
            {
                orchestrator.quarantine.record_failure(host);
            }
            let rng = orchestrator.node_rng(&id);
            let machine = node::Machine::restore(orchestrator.node_config, spec, rng, &fold);
            orchestrator.nodes.insert(id, machine);
        }
        orchestrator
    }

    fn build(config: Config, life: u64) -> Orchestrator {
        let specs = crate::plan::expand(&config.plan)
            .into_iter()
            .map(|spec| (spec.node_id.clone(), spec))
            .collect();
        Orchestrator {
            specs,
            reconciler: reconcile::Config {
                replacement: config.plan.replacement,
            },
            desired: crate::plan::desired(&config.plan),
            plan: config.plan,
            quarantine: Quarantine::default(),
            node_config: node::Config::default(),
            rng: DetRng::new(config.seed).derive(life),
            ops: Counter::starting_at(1),
            session_ids: Counter::starting_at(1),
            nodes: BTreeMap::new(),
            sessions: BTreeMap::new(),
            routes: BTreeMap::new(),
            run_journaled: false,
            started: false,
            tearing_down: false,
            reconcile_due: false,
            requeue_at: None,
            counters: Counters::default(),
        }
    }

    /// A node's own generator, keyed by its id so that adding a node never
    /// shifts another's draws.
    fn node_rng(&self, id: &LogicalNodeId) -> DetRng {
        let mut digest = Digest::default();
        digest.update(id.as_str().as_bytes());
        self.rng.derive(digest.0)
    }

    /// The ledger, in node-id order.
    pub fn nodes(&self) -> impl Iterator<Item = &node::Record> {
        self.nodes.values().map(node::Machine::record)
    }

    /// One node's record.
    pub fn node(&self, id: &LogicalNodeId) -> Option<&node::Record> {
        self.nodes.get(id).map(node::Machine::record)
    }

    /// The stage of a live bootstrap session, if it exists.
    pub fn session_stage(&self, id: SessionId) -> Option<bootstrap::Stage> {
        self.sessions.get(&id).map(|s| s.machine.stage())
    }

    /// Every node is Dormant, Failed or Destroyed, or Destroying with its
    /// automatic retries spent (the failure is in `destroy_error`; another
    /// `Destroy` or `Teardown` tries again), and nothing is in flight.
    pub fn is_settled(&self) -> bool {
        use node::Stage::{Destroyed, Destroying, Dormant, Failed};
        self.started
            && self.sessions.is_empty()
            && !self.reconcile_due
            && self.requeue_at.is_none()
            && self.nodes.values().all(|n| {
                matches!(n.stage(), Dormant | Failed | Destroying | Destroyed) && !n.in_flight()
            })
    }

    /// Teardown ran and every node is destroyed or certainly holds no lease.
    pub fn is_torn_down(&self) -> bool {
        self.tearing_down
            && self.sessions.is_empty()
            && self.nodes.values().all(node::Machine::holds_no_lease)
    }

    /// Ignored inputs, by why.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Operations issued and not yet answered (abandoned ones included).
    pub fn pending_ops(&self) -> usize {
        self.routes.len()
    }

    fn on_start(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.started || self.tearing_down {
            self.counters.ignored_commands += 1;
            return;
        }
        self.started = true;
        if !self.run_journaled {
            self.run_journaled = true;
            out.push(Effect::Persist(JournalRecord::RunStarted {
                run_id: self.plan.run_id,
            }));
        }
        let waiting: Vec<LogicalNodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.awaits_start())
            .map(|(id, _)| id.clone())
            .collect();
        for id in waiting {
            let excluded_hosts = self.excluded_hosts();
            self.deliver_node(now, &id, node::Input::Start { excluded_hosts }, out);
        }
        self.reconcile_due = true;
    }

    fn on_teardown(&mut self, now: Instant, out: &mut Vec<Effect>) {
        self.tearing_down = true;
        let ids: Vec<LogicalNodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stage() != node::Stage::Destroyed)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.deliver_node(now, &id, node::Input::Destroy, out);
        }
    }

    fn on_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        use crate::Machine as _;
        let due = |deadline: Option<Instant>| deadline.is_some_and(|at| at <= now);
        let nodes: Vec<LogicalNodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| due(n.next_deadline()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in nodes {
            self.deliver_node(now, &id, node::Input::Tick, out);
        }
        let sessions: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| due(s.machine.next_deadline()))
            .map(|(id, _)| *id)
            .collect();
        for id in sessions {
            self.deliver_session(now, id, bootstrap::Input::Tick, out);
        }
        if due(self.requeue_at) {
            self.requeue_at = None;
            self.reconcile_due = true;
        }
    }

    /// Hosts new leases must avoid, when the policy quarantines.
    fn excluded_hosts(&self) -> Vec<String> {
        match self.reconciler.quarantine_threshold() {
            Some(threshold) => reconcile::excluded_hosts(&self.quarantine, threshold),
            None => Vec::new(),
        }
    }

    fn reconcile(&mut self, now: Instant, out: &mut Vec<Effect>) {
        for _ in 0..RECONCILE_PASSES_MAX {
            if !self.reconcile_due {
                return;
            }
            self.reconcile_due = false;
            if self.tearing_down || !self.started {
                return;
            }
            let views: Vec<NodeView> = self.nodes.values().map(view).collect();
            let decision = reconcile::reconcile(
                &self.reconciler,
                &self.desired,
                &views,
                &self.quarantine,
                now,
            );
            self.requeue_at = decision.requeue_at;
            for action in decision.actions {
                self.apply(now, action, out);
            }
        }
    }

    fn apply(&mut self, now: Instant, action: Action, out: &mut Vec<Effect>) {
        let excluded_hosts = self.excluded_hosts();
        match action {
            Action::Create { group, index } => {
                let id = crate::plan::node_id(&group, index);
                let Some(spec) = self.specs.get(&id).cloned() else {
                    return;
                };
                let machine = node::Machine::new(self.node_config, spec, self.node_rng(&id));
                self.nodes.insert(id.clone(), machine);
                self.deliver_node(now, &id, node::Input::Start { excluded_hosts }, out);
            }
            Action::Destroy { node } => self.deliver_node(now, &node, node::Input::Destroy, out),
            Action::Replace { node, attempt } => self.deliver_node(
                now,
                &node,
                node::Input::Replace {
                    attempt,
                    excluded_hosts,
                },
                out,
            ),
        }
    }
}

/// The reconciler's coarse view of one node.
fn view(machine: &node::Machine) -> NodeView {
    use node::Stage as S;
    let record = machine.record();
    let condition = match record.stage {
        S::Dormant => Condition::Ready,
        S::Failed => Condition::Failed {
            at: record.failed_at.unwrap_or(Instant::ZERO),
        },
        S::Destroying => Condition::Destroying,
        S::Destroyed => Condition::Destroyed,
        _ => Condition::Provisioning,
    };
    NodeView {
        node: record.node().clone(),
        group: record.group().clone(),
        index: record.desired.index,
        attempt: record.attempt,
        condition,
        host: record
            .lease
            .as_ref()
            .and_then(|lease| lease.host_id.clone()),
    }
}

impl crate::Machine for Orchestrator {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::Tick => self.on_tick(now, &mut out),
            Input::Start => self.on_start(now, &mut out),
            Input::Teardown => self.on_teardown(now, &mut out),
            Input::Destroy { node } if self.nodes.contains_key(&node) => {
                self.deliver_node(now, &node, node::Input::Destroy, &mut out)
            }
            Input::Destroy { .. } => self.counters.unknown_nodes += 1,
            Input::AgentJoined {
                node,
                lease_id,
                agent,
            } => self.on_joined(now, node, lease_id, agent, &mut out),
            answer => self.route_answer(now, answer, &mut out),
        }
        self.reconcile(now, &mut out);
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        let nodes = self
            .nodes
            .values()
            .filter_map(crate::Machine::next_deadline);
        let sessions = self
            .sessions
            .values()
            .filter_map(|s| s.machine.next_deadline());
        nodes.chain(sessions).chain(self.requeue_at).min()
    }

    fn check_invariants(&self) {
        self.check_composite();
    }
}
