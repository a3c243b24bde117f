//! What the composite keeps up to date after every child step so that no
//! input scans every node: each child's next deadline, ordered, and per-node
//! flags counted for `is_settled` and `is_torn_down`. A child's deadline and
//! flags change only while it handles an input, so re-reading them after
//! each of its steps keeps the index exact.

use super::{Orchestrator, Slot};
use crate::node;
use crate::time::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// A child of the composite that may have a deadline: a node manager, or
/// the bootstrap session of the node in a slot (a node has one at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Child {
    Node(Slot),
    Session(Slot),
}

impl Child {
    /// The child's index: a slot's node and session side by side.
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

/// No deadline.
const NONE: u64 = u64::MAX;

/// Queues of deadlines set with one timeout, at most; deadlines set with
/// any other timeout go to a heap.
const QUEUES_MAX: usize = 8;

/// Every child's next deadline, by child and in time order.
///
/// A child's deadline is almost always "now plus one of a few fixed
/// timeouts", and time never goes back, so the deadlines set with one
/// timeout arrive in order: each timeout gets a first-in-first-out queue
/// whose front is its earliest, and setting a deadline is a push at the
/// back. A deadline that would break a queue's order (an unusual timeout
/// when every queue is taken, or an earlier time) goes to a heap instead.
/// An entry whose child has since been set to something else is stale: it
/// is skipped where it is met (at a front) and dropped in bulk when stale
/// entries outnumber live ones, so memory stays proportional to the
/// children. The earliest deadline is kept exact after every change.
#[derive(Clone, Debug, Default)]
pub(crate) struct Deadlines {
    /// Each child's deadline by leaf; [`NONE`] for none.
    current: Vec<u64>,
    /// How many children have a deadline.
    live: usize,
    queues: Vec<Queue>,
    /// Entries that fit no queue, earliest first.
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Entries held, stale ones included.
    entries: usize,
    /// The earliest deadline of any child ([`NONE`] for none).
    earliest: u64,
}

/// Deadlines set with one timeout, in order: `(deadline, leaf)`.
#[derive(Clone, Debug)]
struct Queue {
    timeout: u64,
    entries: VecDeque<(u64, u32)>,
}

impl Deadlines {
    pub(crate) fn new(slots: usize) -> Deadlines {
        Deadlines {
            current: vec![NONE; 2 * slots],
            earliest: NONE,
            ..Deadlines::default()
        }
    }

    /// `child`'s deadline as indexed.
    pub(crate) fn get(&self, child: Child) -> Option<Instant> {
        let raw = self.current[child.leaf()];
        (raw != NONE).then_some(Instant(raw))
    }

    /// Sets `child`'s deadline; `now` is the time of the step that set it.
    pub(crate) fn set(&mut self, now: Instant, child: Child, deadline: Option<Instant>) {
        let leaf = child.leaf();
        let raw = deadline.map_or(NONE, |d| d.0);
        let old = self.current[leaf];
        if old == raw {
            return;
        }
        self.current[leaf] = raw;
        self.live = self.live + usize::from(raw != NONE) - usize::from(old != NONE);
        if raw != NONE {
            self.push(
                now.0,
                raw,
                u32::try_from(leaf).expect("fewer than 2^32 children"),
            );
        }
        if old == self.earliest {
            // The earliest may have moved on: find the next.
            self.earliest = self.first_live();
        } else if raw < self.earliest {
            self.earliest = raw;
        }
        if self.entries > 2 * self.live + 64 {
            self.compact();
        }
    }

    fn push(&mut self, now: u64, deadline: u64, leaf: u32) {
        self.entries += 1;
        let timeout = deadline.saturating_sub(now);
        let at = match self.queues.iter().position(|q| q.timeout == timeout) {
            Some(at) => Some(at),
            None if self.queues.len() < QUEUES_MAX => {
                self.queues.push(Queue {
                    timeout,
                    entries: VecDeque::new(),
                });
                Some(self.queues.len() - 1)
            }
            None => None,
        };
        match at.map(|at| &mut self.queues[at].entries) {
            Some(queue) if queue.back().is_none_or(|back| back.0 <= deadline) => {
                queue.push_back((deadline, leaf));
            }
            _ => self.heap.push(Reverse((deadline, leaf))),
        }
    }

    /// Whether an entry names its child's deadline now.
    fn is_live(current: &[u64], (deadline, leaf): (u64, u32)) -> bool {
        current[leaf as usize] == deadline
    }

    /// Drops stale entries at the fronts, and returns the earliest live
    /// deadline.
    fn first_live(&mut self) -> u64 {
        let current = &self.current;
        let mut earliest = NONE;
        for queue in &mut self.queues {
            while let Some(&front) = queue.entries.front() {
                if Self::is_live(current, front) {
                    earliest = earliest.min(front.0);
                    break;
                }
                queue.entries.pop_front();
                self.entries -= 1;
            }
        }
        while let Some(&Reverse(top)) = self.heap.peek() {
            if Self::is_live(current, top) {
                earliest = earliest.min(top.0);
                break;
            }
            self.heap.pop();
            self.entries -= 1;
        }
        earliest
    }

    /// Keeps one entry per child with a deadline (its first live one).
    fn compact(&mut self) {
        let current = &self.current;
        let mut kept = vec![false; current.len()];
        let mut keep = |entry: (u64, u32)| {
            let fresh = Self::is_live(current, entry) && !kept[entry.1 as usize];
            kept[entry.1 as usize] |= fresh;
            fresh
        };
        for queue in &mut self.queues {
            queue.entries.retain(|entry| keep(*entry));
        }
        self.heap.retain(|Reverse(entry)| keep(*entry));
        self.queues.retain(|q| !q.entries.is_empty());
        self.entries = self.live;
    }

    /// The earliest deadline of any child.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        (self.earliest != NONE).then_some(Instant(self.earliest))
    }

    /// Takes every child due at `now` out of the index (each is re-synced
    /// after its tick): nodes in slot (node-id) order, and the slots of
    /// due sessions, also in slot order.
    pub(crate) fn take_due(&mut self, now: Instant) -> (Vec<Slot>, Vec<Slot>) {
        let mut due = Vec::new();
        let current = &mut self.current;
        let mut take = |(deadline, leaf): (u64, u32)| {
            if current[leaf as usize] == deadline {
                current[leaf as usize] = NONE;
                due.push(leaf as usize);
            }
        };
        for queue in &mut self.queues {
            while let Some(&front) = queue.entries.front().filter(|f| f.0 <= now.0) {
                queue.entries.pop_front();
                self.entries -= 1;
                take(front);
            }
        }
        while let Some(&Reverse(top)) = self.heap.peek().filter(|t| t.0.0 <= now.0) {
            self.heap.pop();
            self.entries -= 1;
            take(top);
        }
        self.live -= due.len();
        self.earliest = self.first_live();
        due.sort_unstable();
        let (mut nodes, mut sessions) = (Vec::new(), Vec::new());
        for leaf in due {
            match Child::of_leaf(leaf) {
                Child::Node(slot) => nodes.push(slot),
                Child::Session(slot) => sessions.push(slot),
            }
        }
        (nodes, sessions)
    }

    /// Whether the index names exactly these deadlines: every child's
    /// deadline has an entry, queues are in order, the live count and the
    /// earliest are exact (checked by tests).
    pub(crate) fn matches(
        &self,
        nodes: impl Iterator<Item = (Slot, Option<Instant>)>,
        sessions: impl Iterator<Item = (Slot, Option<Instant>)>,
    ) -> bool {
        let mut named = vec![false; self.current.len()];
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
        let unnamed_empty = (0..self.current.len())
            .filter(|leaf| !named[*leaf])
            .all(|leaf| self.current[leaf] == NONE);
        let mut entered = vec![false; self.current.len()];
        let all_entries = (self.queues.iter().flat_map(|q| q.entries.iter().copied()))
            .chain(self.heap.iter().map(|Reverse(entry)| *entry));
        let mut held = 0;
        for entry in all_entries {
            held += 1;
            entered[entry.1 as usize] |= Self::is_live(&self.current, entry);
        }
        let every_deadline_entered = (self.current.iter().zip(&entered))
            .all(|(deadline, entered)| *deadline == NONE || *entered);
        let queues_ordered = self.queues.iter().all(|q| {
            let (a, b) = q.entries.as_slices();
            a.iter()
                .chain(b)
                .zip(a.iter().chain(b).skip(1))
                .all(|(x, y)| x.0 <= y.0)
        });
        let live = self.current.iter().filter(|d| **d != NONE).count();
        let earliest = self.current.iter().copied().min().unwrap_or(NONE);
        nodes_match
            && sessions_match
            && unnamed_empty
            && every_deadline_entered
            && queues_ordered
            && held == self.entries
            && live == self.live
            && earliest == self.earliest
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
    pub(crate) fn sync_node(&mut self, now: Instant, slot: Slot) {
        let (deadline, unsettled, leased) = self.slot_machine(slot).index_facts();
        self.deadlines.set(now, Child::Node(slot), deadline);
        self.tally.set(slot, unsettled, leased);
    }
}

impl Orchestrator {
    /// Re-reads the deadline of the session in `slot` after it handled an
    /// input (or ended).
    pub(crate) fn sync_session(&mut self, now: Instant, slot: Slot) {
        use crate::Machine as _;
        let deadline = self.sessions[slot.at()]
            .as_ref()
            .and_then(|s| s.machine.next_deadline());
        self.deadlines.set(now, Child::Session(slot), deadline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::DetRng;

    /// Random deadlines for 40 children (a few timeouts, some odd ones,
    /// some cleared, time going forward), against a plain table: the
    /// earliest, each child's deadline and the children a tick takes.
    #[test]
    fn agrees_with_a_table_under_random_use() {
        let slots = 20;
        let mut rng = DetRng::new(11);
        let mut index = Deadlines::new(slots);
        let mut table: Vec<Option<u64>> = vec![None; 2 * slots];
        let mut now = 0u64;
        let timeouts = [300, 50, 1_200, 100, 6_000];
        let mut taken = 0;
        for step in 0..100_000 {
            now += rng.next_u64() % 40;
            let leaf = (rng.next_u64() % (2 * slots as u64)) as usize;
            let child = Child::of_leaf(leaf);
            let deadline = match rng.next_u64() % 20 {
                0..=2 => None,
                3 => Some(now + 1 + rng.next_u64() % 1_000),
                4 => table[leaf],
                k => Some(now + timeouts[(k % 5) as usize]),
            };
            index.set(Instant(now), child, deadline.map(Instant));
            table[leaf] = deadline;
            if step % 97 == 0 {
                let (nodes, sessions) = index.take_due(Instant(now));
                let mut want = (Vec::new(), Vec::new());
                for (leaf, at) in table.iter_mut().enumerate() {
                    if at.is_some_and(|at| at <= now) {
                        *at = None;
                        match Child::of_leaf(leaf) {
                            Child::Node(slot) => want.0.push(slot),
                            Child::Session(slot) => want.1.push(slot),
                        }
                    }
                }
                taken += want.0.len() + want.1.len();
                assert_eq!((nodes, sessions), want, "step {step}");
            }
            let earliest = table.iter().flatten().min().copied();
            assert_eq!(index.earliest(), earliest.map(Instant), "step {step}");
            let nodes = (0..slots).map(|n| {
                let slot = Slot(n as u32);
                (slot, table[Child::Node(slot).leaf()].map(Instant))
            });
            let sessions = (0..slots).map(|n| {
                let slot = Slot(n as u32);
                (slot, table[Child::Session(slot).leaf()].map(Instant))
            });
            assert!(index.matches(nodes, sessions), "step {step}");
            assert!(index.entries <= 2 * index.live + 65, "memory stays bounded");
        }
        assert!(taken > 1_000, "ticks took children ({taken})");
        assert!(!index.heap.is_empty() || index.queues.len() == QUEUES_MAX);
    }
}
