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
//!
//! Nodes live in slots numbered in node-id order (nodes scaling adds come
//! after, in the order added), so routes and sessions name them by slot.
//! `next_deadline`, `is_settled` and `is_torn_down` read the children.

mod commands;
mod host;
mod invariants;
mod restore;
mod routing;
mod scale;

pub use host::DEAD_REASON;
pub use scale::ScaleRefusal;

use crate::ids::{Counter, GroupId, LogicalNodeId, OpId, SessionId};
use crate::node;
use crate::plan::{LogicalNodeSpec, RunPlan};
use crate::port::{Effect, Input};
use crate::reconcile::{self, Quarantine};
use crate::rng::DetRng;
use crate::time::Instant;
use crate::{bootstrap, digest::Digest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the composite is built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The run plan.
    pub plan: RunPlan,
    /// The seed every random draw (nonces) derives from.
    pub seed: u64,
    /// The pipeline host's membership, when the composite watches its
    /// handed-off nodes (and runs a pipeline) itself; a world without one
    /// reports a lost agent with `Input::AgentLost`.
    #[serde(default)]
    pub membership: Option<crate::membership::Config>,
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
    /// `Start` twice, or after `Teardown`; a `SetDesired` refused (see
    /// [`ScaleRefusal`]).
    pub ignored_commands: u64,
    /// Inputs node managers ignored (late answers, out-of-place inputs).
    pub ignored_by_nodes: u64,
    /// Inputs bootstrap sessions ignored.
    pub ignored_by_sessions: u64,
    /// Leases granted to abandoned creates and destroyed on sight.
    pub stray_leases: u64,
    /// Journaled nodes the plan no longer has, restored to be destroyed.
    pub unplanned_journal_nodes: u64,
    /// Pipeline inputs to a composite without a pipeline host.
    pub no_pipeline: u64,
}

/// A node's slot: its rank in node-id order among the plan's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Slot(pub(crate) u32);

impl Slot {
    fn at(self) -> usize {
        self.0 as usize
    }
}

/// Who awaits an operation's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    Node(Slot),
    /// The live session of the node in the slot. A session's routes are
    /// dropped when it ends (O4), so a route names the session that issued
    /// it without its id.
    Session(Slot),
}

/// A live bootstrap session and the node it belongs to.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub(crate) id: SessionId,
    pub(crate) machine: bootstrap::Machine,
    /// Every operation routed to it and not yet answered for good, dropped
    /// from the routes when it ends.
    pub(crate) ops: Vec<OpId>,
}

/// Where the run as a whole stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before `Start`; `journaled` when the journal already holds the
    /// run's `RunStarted` (a restore).
    Idle { journaled: bool },
    /// Started: the reconciler keeps the plan.
    Running,
    /// `Teardown` began, after a `Start` or not.
    TearingDown { started: bool },
}

/// The orchestrator composite.
#[derive(Clone, Debug)]
pub struct Orchestrator {
    pub(crate) phase: Phase,
    pub(crate) plan: RunPlan,
    /// Node ids by slot: ascending up to `sorted_len` (a binary search
    /// finds a slot), then the nodes scaling added, in the order added.
    pub(crate) ids: Vec<LogicalNodeId>,
    pub(crate) sorted_len: usize,
    /// Slots of destroyed nodes wanted again, not yet re-created: their
    /// generator draw and the log numbers the new node continues.
    pub(crate) revived: BTreeMap<Slot, (u64, crate::port::LogSeqs)>,
    pub(crate) revivals: u64,
    /// Journaled nodes without a slot (a count dropped them and they hold
    /// nothing), with their last log numbers, for a count that wants them
    /// again after a restart.
    pub(crate) retired: BTreeMap<LogicalNodeId, crate::port::LogSeqs>,
    /// Slots of the planned nodes by group and index, for the reconciler's
    /// creates (which name a node by group and index).
    /// Sorted by group id.
    pub(crate) group_slots: Vec<(GroupId, Vec<Slot>)>,
    /// Specs by slot, taken when the node manager is created.
    pub(crate) specs: Vec<Option<LogicalNodeSpec>>,
    pub(crate) reconciler: reconcile::Config,
    pub(crate) desired: reconcile::Desired,
    pub(crate) quarantine: Quarantine,
    pub(crate) node_config: node::Config,
    pub(crate) rng: DetRng,
    pub(crate) ops: Counter,
    pub(crate) session_ids: Counter,
    /// The ledger by slot (node-id order).
    pub(crate) nodes: BTreeMap<Slot, node::Machine>,
    /// Live sessions by the slot of their node (a node has one at most, O2).
    pub(crate) sessions: BTreeMap<Slot, Session>,
    /// The probe command every session runs, made once.
    pub(crate) probe_command: Arc<str>,
    /// Who awaits each operation's answer, by operation id.
    pub(crate) routes: BTreeMap<OpId, Owner>,
    /// A reconcile pass is due before this input's handling ends.
    pub(crate) reconcile_due: bool,
    /// When the reconciler asked to look again.
    pub(crate) requeue_at: Option<Instant>,
    pub(crate) counters: Counters,
    /// The pipeline host (membership and the run), if any.
    pub(crate) pipeline: Option<crate::pipeline::Machine>,
}

impl Orchestrator {
    /// A composite for a fresh run; `Start` brings the plan up.
    pub fn new(config: Config) -> Orchestrator {
        Orchestrator::build(config, 0, Vec::new())
    }

    pub(super) fn build(
        config: Config,
        life: u64,
        unplanned: Vec<LogicalNodeSpec>,
    ) -> Orchestrator {
        // In id order, so that the sort below finds a one-group plan sorted.
        let mut specs = crate::plan::expand_in_id_order(&config.plan);
        // Only an unplanned node can have an id that is not its group's.
        let check_ids = !unplanned.is_empty();
        specs.extend(unplanned);
        let specs = restore::slotted(specs);
        let ids: Vec<LogicalNodeId> = specs.iter().map(|s| s.node_id.clone()).collect();
        let desired = crate::plan::desired(&config.plan);
        let group_slots = restore::group_slots(&specs, &desired, check_ids);
        Orchestrator {
            phase: Phase::Idle { journaled: false },
            sorted_len: ids.len(),
            ids,
            revived: BTreeMap::new(),
            revivals: 0,
            retired: BTreeMap::new(),
            group_slots,
            specs: specs.into_iter().map(Some).collect(),
            reconciler: reconcile::Config {
                replacement: config.plan.replacement,
            },
            desired,
            plan: config.plan,
            quarantine: Quarantine::default(),
            node_config: node::Config::default(),
            rng: DetRng::new(config.seed).derive(life),
            ops: Counter::starting_at(1),
            session_ids: Counter::starting_at(1),
            nodes: BTreeMap::new(),
            sessions: BTreeMap::new(),
            probe_command: bootstrap::PROBE_COMMAND.into(),
            routes: BTreeMap::new(),
            reconcile_due: false,
            requeue_at: None,
            counters: Counters::default(),
            pipeline: config.membership.map(crate::pipeline::Machine::new),
        }
    }

    /// A node's own generator, keyed by its id so that adding a node never
    /// shifts another's draws.
    pub(super) fn node_rng(&self, id: &LogicalNodeId) -> DetRng {
        let mut digest = Digest::default();
        digest.update(id.0.as_bytes());
        self.rng.derive(digest.0)
    }

    /// The ledger, in node-id order.
    pub fn nodes(&self) -> impl Iterator<Item = &node::Machine> {
        self.nodes.values()
    }

    /// One node's manager (its ledger is `record()`, its stage `stage()`).
    pub fn node(&self, id: &LogicalNodeId) -> Option<&node::Machine> {
        self.nodes.get(&self.slot_of(id)?)
    }

    /// Every node is Dormant, Failed or Destroyed, or Destroying with its
    /// automatic retries spent (the failure is in `destroy_error`; another
    /// `Destroy` or `Teardown` tries again), and nothing is in flight.
    pub fn is_settled(&self) -> bool {
        matches!(
            self.phase,
            Phase::Running | Phase::TearingDown { started: true }
        ) && self.sessions.is_empty()
            && !self.reconcile_due
            && self.requeue_at.is_none()
            && self.nodes.values().all(node::Machine::is_settled)
    }

    /// Teardown ran and every node is destroyed or certainly holds no lease.
    pub fn is_torn_down(&self) -> bool {
        matches!(self.phase, Phase::TearingDown { .. }) && self.holds_no_lease()
    }

    /// No node may hold a lease and no session is open: every lease the
    /// ledger knows of is destroyed, and no intent is unresolved. True of a
    /// composite restored from the journal of a run that was torn down, so
    /// a runtime may start a new run instead of resuming that one.
    pub fn holds_no_lease(&self) -> bool {
        self.sessions.is_empty() && self.nodes.values().all(node::Machine::holds_no_lease)
    }

    /// Raises a node's last log sequence numbers to `seqs`, when a runtime
    /// knows more than the journal: after a restart, the datastream may
    /// hold lines of a session the crash interrupted, above the journaled
    /// numbers. Called between `restore` and `Start`, it keeps those numbers
    /// from being used again. A node the ledger lacks is ignored.
    pub fn raise_log_seqs(&mut self, node: &LogicalNodeId, seqs: crate::port::LogSeqs) {
        if let Some(slot) = self.slot_of(node)
            && let Some(machine) = self.nodes.get_mut(&slot)
        {
            machine.raise_log_seqs(seqs);
        }
    }

    /// Ignored inputs, by why.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The slot of node `index` of a planned group.
    pub(crate) fn group_slot(&self, group: &GroupId, index: u32) -> Option<Slot> {
        self.group_slot_by(group.0.as_bytes(), index)
    }

    fn group_slot_by(&self, group: &[u8], index: u32) -> Option<Slot> {
        let (groups, want) = (&self.group_slots, |(g, _): &(GroupId, _)| {
            g.0.as_bytes().cmp(group)
        });
        let slots = &groups[groups.binary_search_by(want).ok()?].1;
        slots.get(usize::try_from(index).ok()?).copied()
    }

    /// The slot of a planned node.
    pub(crate) fn slot_of(&self, id: &LogicalNodeId) -> Option<Slot> {
        // A planned node's id names its group and index: look there first.
        if let Some((group, index)) = crate::plan::parse_node_id(id) {
            let slot = match self.group_slots.as_slice() {
                // One group: the id compared below names it, or not.
                [(_, slots)] => usize::try_from(index)
                    .ok()
                    .and_then(|i| slots.get(i))
                    .copied(),
                _ => self.group_slot_by(group, index),
            };
            if let Some(slot) = slot
                && self.ids[slot.at()] == *id
            {
                return Some(slot);
            }
        }
        match self.ids[..self.sorted_len].binary_search(id) {
            Ok(at) => Some(Slot(u32::try_from(at).expect("fewer than 2^32 nodes"))),
            Err(_) => self.added_slot(id),
        }
    }

    /// The ledger node in `slot`, which must exist.
    pub(crate) fn slot_machine(&self, slot: Slot) -> &node::Machine {
        self.nodes.get(&slot).expect("a routed slot holds a node")
    }

    /// Puts a new node manager into the ledger.
    pub(crate) fn insert_node(&mut self, slot: Slot, machine: node::Machine) {
        let before = self.nodes.insert(slot, machine);
        assert!(before.is_none(), "one manager per node");
    }
}

impl crate::Machine for Orchestrator {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut effects = Vec::new();
        let out = &mut effects;
        match input {
            Input::Tick => self.on_tick(now, out),
            Input::Start => self.on_start(now, out),
            Input::Teardown => self.on_teardown(now, out),
            Input::Destroy { node } => match self.slot_of(&node) {
                Some(slot) if self.nodes.contains_key(&slot) => {
                    self.deliver_node(now, slot, node::Input::Destroy, out)
                }
                _ => self.counters.unknown_nodes += 1,
            },
            Input::SetDesired { group, count } => self.on_set_desired(now, group, count, out),
            Input::AgentJoined {
                node,
                lease_id,
                agent,
            } => {
                self.on_joined(now, node.clone(), lease_id.clone(), agent.clone(), out);
                self.track_join(now, node, &lease_id, agent, out);
            }
            Input::AgentLost {
                node,
                agent,
                reason,
            } => self.lose_agent(now, node, agent, reason, out),
            Input::Pipeline(input) => self.on_pipeline(now, *input, out),
            answer => self.route_answer(now, answer, out),
        }
        // Most inputs leave no pass due: checked here, so that they skip
        // the pass's large frame.
        if self.reconcile_due {
            self.reconcile(now, out);
        }
        effects
    }

    fn next_deadline(&self) -> Option<Instant> {
        let nodes = self.nodes.values().filter_map(|n| n.next_deadline());
        let sessions = (self.sessions.values()).filter_map(|s| s.machine.next_deadline());
        (nodes.chain(sessions).chain(self.requeue_at))
            .chain(self.pipeline_deadline())
            .min()
    }

    fn check_invariants(&self) {
        self.check_composite();
    }
}
