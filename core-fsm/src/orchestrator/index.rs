//! What the composite keeps up to date after every child step so that no
//! input scans every node: each child's next deadline, ordered, and per-node
//! flags counted for `is_settled` and `is_torn_down`. A child's deadline and
//! flags change only while it handles an input, so re-reading them after
//! each of its steps keeps the index exact.

use super::{Orchestrator, Session, Slot};
use crate::ids::SessionId;
use crate::node;
use crate::time::Instant;
use std::collections::BTreeSet;

/// Every child's next deadline, by child and in time order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Deadlines {
    nodes: Vec<Option<Instant>>,
    node_order: BTreeSet<(Instant, Slot)>,
    session_order: BTreeSet<(Instant, SessionId)>,
}

impl Deadlines {
    pub(crate) fn new(slots: usize) -> Deadlines {
        Deadlines {
            nodes: vec![None; slots],
            ..Deadlines::default()
        }
    }

    pub(crate) fn set_node(&mut self, slot: Slot, deadline: Option<Instant>) {
        let entry = &mut self.nodes[slot.0 as usize];
        if *entry == deadline {
            return;
        }
        if let Some(old) = entry.take() {
            self.node_order.remove(&(old, slot));
        }
        if let Some(at) = deadline {
            self.node_order.insert((at, slot));
        }
        *entry = deadline;
    }

    /// Moves a session from `old` to `new` in the order; the session keeps
    /// its indexed deadline itself (`Session::deadline`), so no map
    /// is searched.
    pub(crate) fn set_session(
        &mut self,
        id: SessionId,
        old: Option<Instant>,
        new: Option<Instant>,
    ) {
        if old == new {
            return;
        }
        if let Some(old) = old {
            self.session_order.remove(&(old, id));
        }
        if let Some(at) = new {
            self.session_order.insert((at, id));
        }
    }

    /// The earliest deadline of any child.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        let node = self.node_order.first().map(|(at, _)| *at);
        let session = self.session_order.first().map(|(at, _)| *at);
        node.into_iter().chain(session).min()
    }

    /// Nodes due at `now`, in slot (node-id) order.
    pub(crate) fn due_nodes(&self, now: Instant) -> Vec<Slot> {
        let mut due: Vec<Slot> = self
            .node_order
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, slot)| *slot)
            .collect();
        due.sort_unstable();
        due
    }

    /// Sessions due at `now`, in id order.
    pub(crate) fn due_sessions(&self, now: Instant) -> Vec<SessionId> {
        let mut due: Vec<SessionId> = self
            .session_order
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
            .collect();
        due.sort_unstable();
        due
    }

    /// Whether the index names exactly these deadlines (checked by tests);
    /// a session is given as (id, its indexed deadline, its actual one).
    pub(crate) fn matches(
        &self,
        nodes: impl Iterator<Item = (Slot, Option<Instant>)>,
        sessions: impl Iterator<Item = (SessionId, Option<Instant>, Option<Instant>)>,
    ) -> bool {
        let nodes_match = nodes
            .into_iter()
            .all(|(slot, at)| self.nodes[slot.0 as usize] == at);
        let mut armed = 0;
        let sessions_match = sessions.into_iter().all(|(id, indexed, actual)| {
            armed += usize::from(indexed.is_some());
            indexed == actual && indexed.is_none_or(|at| self.session_order.contains(&(at, id)))
        });
        let order_len = self.nodes.iter().flatten().count();
        nodes_match
            && sessions_match
            && self.node_order.len() == order_len
            && self.session_order.len() == armed
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
        self.deadlines.set_node(slot, deadline);
        self.tally.set(slot, unsettled, leased);
    }
}

impl Deadlines {
    /// Re-reads a session's deadline after it handled an input.
    pub(crate) fn sync_session(&mut self, id: SessionId, session: &mut Session) {
        use crate::Machine as _;
        let deadline = session.machine.next_deadline();
        let old = std::mem::replace(&mut session.deadline, deadline);
        self.set_session(id, old, deadline);
    }
}
