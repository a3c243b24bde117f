//! What the composite keeps up to date after every child step so that no
//! input scans every node: each child's next deadline, ordered, and per-node
//! flags counted for `is_settled` and `is_torn_down`. A child's deadline and
//! flags change only while it handles an input, so re-reading them after
//! each of its steps keeps the index exact.

use super::{Orchestrator, Slot};
use crate::node;
use crate::time::Instant;

/// A child of the composite that may have a deadline: a node manager, or
/// the bootstrap session of the node in a slot (a node has one at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Child {
    Node(Slot),
    Session(Slot),
}

impl Child {
    /// The child's leaf: a slot's node and session side by side.
    fn leaf(self) -> usize {
        match self {
            Child::Node(slot) => 2 * slot.at(),
            Child::Session(slot) => 2 * slot.at() + 1,
        }
    }

    fn of_leaf(leaf: usize) -> Child {
        let slot = Slot(u32::try_from(leaf / 2).expect("fewer than 2^32 nodes"));
        if leaf.is_multiple_of(2) {
            Child::Node(slot)
        } else {
            Child::Session(slot)
        }
    }
}

/// No deadline, in the tree.
const NONE: u64 = u64::MAX;

/// Every child's next deadline, by child and in time order.
///
/// A tournament tree over the children: each leaf holds a child's deadline
/// (or none), each inner entry the earliest below it, so the root is the
/// earliest of all. Setting a deadline walks up from its leaf and stops
/// where the earliest below stays the same: logarithmic at worst, with no
/// stale entries to clean and fixed memory (two entries per child).
#[derive(Clone, Debug, Default)]
pub(crate) struct Deadlines {
    /// Leaves (a power of two, at least one).
    leaves: usize,
    /// `tree[1]` is the root, `tree[leaves + leaf]` a leaf; raw
    /// milliseconds, [`NONE`] for no deadline.
    tree: Vec<u64>,
}

impl Deadlines {
    pub(crate) fn new(slots: usize) -> Deadlines {
        let leaves = (2 * slots).max(1).next_power_of_two();
        Deadlines {
            leaves,
            tree: vec![NONE; 2 * leaves],
        }
    }

    /// `child`'s deadline as indexed.
    pub(crate) fn get(&self, child: Child) -> Option<Instant> {
        let raw = self.tree[self.leaves + child.leaf()];
        (raw != NONE).then_some(Instant(raw))
    }

    /// Sets `child`'s deadline.
    pub(crate) fn set(&mut self, child: Child, deadline: Option<Instant>) {
        let mut at = self.leaves + child.leaf();
        let raw = deadline.map_or(NONE, |d| d.0);
        if self.tree[at] == raw {
            return;
        }
        self.tree[at] = raw;
        while at > 1 {
            let parent = at / 2;
            let earliest = self.tree[2 * parent].min(self.tree[2 * parent + 1]);
            if self.tree[parent] == earliest {
                break;
            }
            self.tree[parent] = earliest;
            at = parent;
        }
    }

    /// The earliest deadline of any child.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        let raw = self.tree.get(1).copied().unwrap_or(NONE);
        (raw != NONE).then_some(Instant(raw))
    }

    /// Takes every child due at `now` out of the index (each is re-synced
    /// after its tick): nodes in slot (node-id) order, and the slots of
    /// due sessions, also in slot order.
    pub(crate) fn take_due(&mut self, now: Instant) -> (Vec<Slot>, Vec<Slot>) {
        let (mut nodes, mut sessions) = (Vec::new(), Vec::new());
        let mut due = Vec::new();
        self.collect_due(1, now.0, &mut due);
        for leaf in due {
            let child = Child::of_leaf(leaf);
            self.set(child, None);
            match child {
                Child::Node(slot) => nodes.push(slot),
                Child::Session(slot) => sessions.push(slot),
            }
        }
        (nodes, sessions)
    }

    /// The leaves at or below `at` whose deadline is at most `now`, in
    /// leaf order.
    fn collect_due(&self, at: usize, now: u64, due: &mut Vec<usize>) {
        if self.tree[at] > now {
            return;
        }
        if at >= self.leaves {
            due.push(at - self.leaves);
            return;
        }
        self.collect_due(2 * at, now, due);
        self.collect_due(2 * at + 1, now, due);
    }

    /// Whether the index names exactly these deadlines and every inner
    /// entry is the earliest below it (checked by tests).
    pub(crate) fn matches(
        &self,
        nodes: impl Iterator<Item = (Slot, Option<Instant>)>,
        sessions: impl Iterator<Item = (Slot, Option<Instant>)>,
    ) -> bool {
        let mut named = vec![false; self.leaves];
        let mut agrees = |child: Child, at: Option<Instant>| {
            named[child.leaf()] = true;
            self.get(child) == at
        };
        let nodes_match = nodes
            .into_iter()
            .all(|(slot, at)| agrees(Child::Node(slot), at));
        let sessions_match = sessions
            .into_iter()
            .all(|(slot, at)| agrees(Child::Session(slot), at));
        let unnamed_empty = (0..self.leaves)
            .filter(|leaf| !named[*leaf])
            .all(|leaf| self.tree[self.leaves + leaf] == NONE);
        let inner_exact = (1..self.leaves)
            .all(|at| self.tree[at] == self.tree[2 * at].min(self.tree[2 * at + 1]));
        nodes_match && sessions_match && unnamed_empty && inner_exact
    }
}

/// Per-node flags and how many nodes have each.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
    /// By slot: (not settled, may hold a lease). An empty slot has neither.
    flags: Vec<(bool, bool)>,
    unsettled: usize,
    leased: usize,
}

impl Tally {
    pub(crate) fn new(slots: usize) -> Tally {
        Tally {
            flags: vec![(false, false); slots],
            unsettled: 0,
            leased: 0,
        }
    }

    fn set(&mut self, slot: Slot, unsettled: bool, leased: bool) {
        let entry = &mut self.flags[slot.0 as usize];
        self.unsettled = self.unsettled + usize::from(unsettled) - usize::from(entry.0);
        self.leased = self.leased + usize::from(leased) - usize::from(entry.1);
        *entry = (unsettled, leased);
    }

    /// Every node is settled (see [`Orchestrator::is_settled`]).
    pub(crate) fn all_settled(&self) -> bool {
        self.unsettled == 0
    }

    /// No node may hold a lease.
    pub(crate) fn none_leased(&self) -> bool {
        self.leased == 0
    }

    /// A slot's flags: (not settled, may hold a lease).
    pub(crate) fn flags(&self, slot: Slot) -> (bool, bool) {
        self.flags[slot.0 as usize]
    }

    /// Whether the counts agree with the flags (checked by tests).
    pub(crate) fn is_consistent(&self) -> bool {
        let unsettled = self.flags.iter().filter(|f| f.0).count();
        let leased = self.flags.iter().filter(|f| f.1).count();
        unsettled == self.unsettled && leased == self.leased
    }
}

/// Whether a node counts as settled: at rest, nothing in flight.
pub(crate) fn is_settled(machine: &node::Machine) -> bool {
    use node::Stage::{Destroyed, Destroying, Dormant, Failed};
    matches!(machine.stage(), Dormant | Failed | Destroying | Destroyed) && !machine.in_flight()
}

impl Orchestrator {
    /// Re-reads a node's deadline and flags after it handled an input.
    pub(crate) fn sync_node(&mut self, slot: Slot) {
        use crate::Machine as _;
        let machine = self.slot_machine(slot);
        let deadline = machine.next_deadline();
        let unsettled = !is_settled(machine);
        let leased = !machine.holds_no_lease();
        self.deadlines.set(Child::Node(slot), deadline);
        self.tally.set(slot, unsettled, leased);
    }
}

impl Orchestrator {
    /// Re-reads the deadline of the session in `slot` after it handled an
    /// input (or ended).
    pub(crate) fn sync_session(&mut self, slot: Slot) {
        use crate::Machine as _;
        let deadline = self.sessions[slot.at()]
            .as_ref()
            .and_then(|s| s.machine.next_deadline());
        self.deadlines.set(Child::Session(slot), deadline);
    }
}
