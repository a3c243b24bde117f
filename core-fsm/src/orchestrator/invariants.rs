//! The composite's invariants (O1..), checked after every step by tests and
//! the simulator, together with every child's own.

use super::{Orchestrator, Owner, Phase, Session, Slot};
use crate::node::Lifecycle;
use std::collections::BTreeMap;

impl Orchestrator {
    pub(super) fn check_composite(&self) {
        use crate::Machine as _;
        for (_, machine) in self.occupied() {
            machine.check_invariants();
        }
        for session in self.sessions.values() {
            session.machine.check_invariants();
        }
        self.check_sessions();
        self.check_ids();
        self.check_ledger();
        self.check_index();
        self.check_pipeline();
    }

    /// O11: with a pipeline host, no node is ready with an agent its
    /// membership holds Dead.
    fn check_pipeline(&self) {
        use crate::Machine as _;
        let Some(host) = &self.pipeline else {
            return;
        };
        host.check_invariants();
        for slot in self.nodes.keys() {
            let dead = self.dead_ready_agent(*slot);
            assert!(
                dead.is_none(),
                "O11: {} is ready with {dead:?}, whom membership holds Dead",
                self.ids[slot.at()]
            );
        }
    }

    fn check_sessions(&self) {
        for (slot, session) in self.live() {
            let id = session.id;
            let node = self.nodes.get(&slot);
            assert!(
                node.is_some(),
                "O1 {id}: a session belongs to a ledger node"
            );
            let stage = node.map(|n| n.stage()).unwrap_or(Lifecycle::New);
            assert!(
                matches!(
                    stage,
                    Lifecycle::BootstrapRunning
                        | Lifecycle::AgentJoined
                        | Lifecycle::Destroying
                        | Lifecycle::Destroyed
                ),
                "O1 {id}: a session lives only while its node bootstraps or is being destroyed ({stage:?})"
            );
            assert!(
                !session.machine.is_ended(),
                "O1 {id}: an ended session is dropped"
            );
        }
        // O2 (at most one session per node) holds by construction: the
        // sessions live in their node's slot.
        let mut ids = BTreeMap::new();
        for (slot, session) in self.live() {
            let other = ids.insert(session.id, slot);
            assert!(other.is_none(), "O2 {}: a session has one node", session.id);
        }
        for (slot, machine) in self.occupied() {
            if let Some(session) = machine.session() {
                let own = self.sessions.get(&slot).map(|s| s.id);
                let id = &self.ids[slot.at()];
                assert_eq!(
                    own,
                    Some(session),
                    "O2 {id}: a bootstrapping node's session exists and is its own"
                );
            }
        }
    }

    /// The live sessions with their nodes' slots, in slot order.
    fn live(&self) -> impl Iterator<Item = (Slot, &Session)> {
        self.sessions.iter().map(|(slot, s)| (*slot, s))
    }

    fn check_ids(&self) {
        for (&op, owner) in &self.routes {
            assert!(
                op.0 < self.ops.peek(),
                "O3 {op}: routed ids come from the counter"
            );
            match owner {
                Owner::Node(slot) => assert!(
                    self.nodes.contains_key(slot),
                    "O4 {op}: routed to a ledger node"
                ),
                Owner::Session(slot) => {
                    let known = self.sessions.get(slot).is_some_and(|s| s.ops.contains(&op));
                    assert!(known, "O4 {op}: routed to a live session that knows it");
                }
            }
        }
        for id in self.live().map(|(_, s)| s.id) {
            assert!(
                id.0 < self.session_ids.peek(),
                "O3 {id}: session ids come from the counter"
            );
        }
    }

    fn check_ledger(&self) {
        let mut leases = BTreeMap::new();
        for (slot, machine) in self.occupied() {
            let id = &self.ids[slot.at()];
            assert_eq!(
                self.slot_of(id),
                Some(slot),
                "O5 {id}: every ledger node is in the plan"
            );
            assert_eq!(machine.node(), id, "O5 {id}: keyed by its own id");
            if machine.stage() != Lifecycle::Destroyed
                && let Some(lease) = machine.lease_id()
            {
                let other = leases.insert(lease, id);
                assert!(other.is_none(), "O6 {lease}: one lease, one node");
            }
            if let Phase::TearingDown { .. } = self.phase {
                assert!(
                    machine.is_winding_down() || machine.holds_no_lease(),
                    "O7 {id}: after Teardown every node winds down ({:?})",
                    machine.stage()
                );
            }
            if let Phase::Idle { .. } = self.phase {
                let idle =
                    !machine.in_flight() || machine.awaits_start() || machine.is_winding_down();
                assert!(
                    idle,
                    "O8 {id}: before Start only restored work or a destroy is pending"
                );
            }
        }
    }

    /// O10 The group index names every wanted node's slot.
    fn check_index(&self) {
        for (group, slots) in &self.group_slots {
            for (index, slot) in (0u32..).zip(slots) {
                assert!(
                    crate::plan::is_node_id(&self.ids[slot.at()], group, index),
                    "O10 {group}-{index}: the group index names the node's slot"
                );
            }
            let wanted = self.desired.groups.get(group).copied().unwrap_or(0);
            assert_eq!(
                slots.len(),
                wanted as usize,
                "O10 {group}: every wanted node of the group is indexed"
            );
        }
    }
}
