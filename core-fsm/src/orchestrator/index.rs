//! What the composite keeps up to date after every child step so that no
//! input scans every node: each child's next deadline, ordered, and per-node
//! flags counted for `is_settled` and `is_torn_down`. A child's deadline and
//! flags change only while it handles an input, so re-reading them after
//! each of its steps keeps the index exact.

use super::{Orchestrator, Slot};
use crate::node;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

/// A child of the composite that may have a deadline: a node manager, or
/// the bootstrap session of the node in a slot (a node has one at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Child {
    Node(Slot),
    Session(Slot),
}

/// Every child's next deadline, by child and in time order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Deadlines {
    by_child: BTreeMap<Child, Instant>,
    queue: BTreeSet<(Instant, Child)>,
}

impl Deadlines {
    /// Sets `child`'s deadline.
    pub(crate) fn set(&mut self, child: Child, deadline: Option<Instant>) {
        let old = match deadline {
            Some(at) => self.by_child.insert(child, at),
            None => self.by_child.remove(&child),
        };
        if old == deadline {
            return;
        }
        if let Some(old) = old {
            self.queue.remove(&(old, child));
        }
        if let Some(at) = deadline {
            self.queue.insert((at, child));
        }
    }

    /// The earliest deadline of any child.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// Takes every child due at `now` out of the index (each is re-synced
    /// after its tick): nodes in slot (node-id) order, and the slots of
    /// due sessions, also in slot order.
    pub(crate) fn take_due(&mut self, now: Instant) -> (Vec<Slot>, Vec<Slot>) {
        let mut due = Vec::new();
        while let Some(&(at, child)) = self.queue.first()
            && at <= now
        {
            self.queue.pop_first();
            self.by_child.remove(&child);
            due.push(child);
        }
        due.sort_unstable();
        let (mut nodes, mut sessions) = (Vec::new(), Vec::new());
        for child in due {
            match child {
                Child::Node(slot) => nodes.push(slot),
                Child::Session(slot) => sessions.push(slot),
            }
        }
        (nodes, sessions)
    }

    /// Whether the index names exactly these deadlines (checked by tests).
    pub(crate) fn matches(
        &self,
        nodes: impl Iterator<Item = (Slot, Option<Instant>)>,
        sessions: impl Iterator<Item = (Slot, Option<Instant>)>,
    ) -> bool {
        let nodes = nodes.map(|(slot, at)| (Child::Node(slot), at));
        let sessions = sessions.map(|(slot, at)| (Child::Session(slot), at));
        let want: BTreeMap<Child, Instant> = nodes
            .chain(sessions)
            .filter_map(|(child, at)| Some((child, at?)))
            .collect();
        let queued: BTreeSet<(Instant, Child)> =
            want.iter().map(|(child, at)| (*at, *child)).collect();
        want == self.by_child && queued == self.queue
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

    /// One more slot, empty.
    pub(crate) fn push(&mut self) {
        self.flags.push((false, false));
    }

    /// An emptied slot: neither flag.
    pub(crate) fn clear(&mut self, slot: Slot) {
        self.set(slot, false, false);
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
    use node::Lifecycle::{Destroyed, Destroying, Dormant, Failed};
    matches!(machine.stage(), Dormant | Failed | Destroying | Destroyed) && !machine.in_flight()
}

impl Orchestrator {
    /// Re-reads a node's deadline and flags after it handled an input.
    pub(crate) fn sync_node(&mut self, slot: Slot) {
        let (deadline, unsettled, leased) = self.slot_machine(slot).index_facts();
        self.deadlines.set(Child::Node(slot), deadline);
        self.tally.set(slot, unsettled, leased);
    }
}

impl Orchestrator {
    /// Re-reads the deadline of the session in `slot` after it handled an
    /// input (or ended).
    pub(crate) fn sync_session(&mut self, slot: Slot) {
        use crate::Machine as _;
        let deadline = (self.sessions.get(&slot)).and_then(|s| s.machine.next_deadline());
        self.deadlines.set(Child::Session(slot), deadline);
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
        let slots = 20u32;
        let child = |leaf: usize| {
            let slot = Slot(leaf as u32 / 2);
            if leaf.is_multiple_of(2) {
                Child::Node(slot)
            } else {
                Child::Session(slot)
            }
        };
        let mut rng = DetRng::new(11);
        let mut index = Deadlines::default();
        let mut table: Vec<Option<u64>> = vec![None; 2 * slots as usize];
        let (mut now, mut taken) = (0u64, 0);
        let timeouts = [300, 50, 1_200, 100, 6_000];
        for step in 0..20_000 {
            now += rng.next_u64() % 40;
            let leaf = (rng.next_u64() % (2 * u64::from(slots))) as usize;
            let deadline = match rng.next_u64() % 20 {
                0..=2 => None,
                3 => Some(now + 1 + rng.next_u64() % 1_000),
                4 => table[leaf],
                k => Some(now + timeouts[(k % 5) as usize]),
            };
            index.set(child(leaf), deadline.map(Instant));
            table[leaf] = deadline;
            if step % 97 == 0 {
                let mut want = (Vec::new(), Vec::new());
                for (leaf, at) in table.iter_mut().enumerate() {
                    if at.is_some_and(|at| at <= now) {
                        *at = None;
                        match child(leaf) {
                            Child::Node(slot) => want.0.push(slot),
                            Child::Session(slot) => want.1.push(slot),
                        }
                    }
                }
                taken += want.0.len() + want.1.len();
                assert_eq!(index.take_due(Instant(now)), want, "step {step}");
            }
            let earliest = table.iter().flatten().min().copied();
            assert_eq!(index.earliest(), earliest.map(Instant), "step {step}");
            let of = |kind: usize| {
                let table = &table;
                (0..slots).map(move |n| (Slot(n), table[2 * n as usize + kind].map(Instant)))
            };
            assert!(index.matches(of(0), of(1)), "step {step}");
        }
        assert!(taken > 200, "ticks took children ({taken})");
    }
}
