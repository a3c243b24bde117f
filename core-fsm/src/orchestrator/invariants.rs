//! The composite's invariants (O1..), checked after every step by tests and
//! the simulator, together with every child's own.

use super::{Orchestrator, Owner};
use crate::node::Stage;
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
    }

    fn check_sessions(&self) {
        for (id, session) in &self.sessions {
            let node = self.nodes.get(session.node.at()).and_then(Option::as_ref);
            assert!(
                node.is_some(),
                "O1 {id}: a session belongs to a ledger node"
            );
            let stage = node.map(|n| n.stage()).unwrap_or(Stage::New);
            assert!(
                matches!(
                    stage,
                    Stage::BootstrapRunning
                        | Stage::AgentJoined
                        | Stage::Destroying
                        | Stage::Destroyed
                ),
                "O1 {id}: a session lives only while its node bootstraps or is being destroyed ({stage:?})"
            );
            assert!(
                !session.machine.is_ended(),
                "O1 {id}: an ended session is dropped"
            );
        }
        let mut per_node: BTreeMap<_, u32> = BTreeMap::new();
        for session in self.sessions.values() {
            *per_node.entry(session.node).or_default() += 1;
        }
        for (slot, count) in per_node {
            let node = &self.ids[slot.at()];
            assert!(count <= 1, "O2 {node}: at most one session per node");
        }
        for (slot, machine) in self.occupied() {
            if let Some(session) = machine.session() {
                let owner = self.sessions.get(&session).map(|s| s.node);
                let id = &self.ids[slot.at()];
                assert_eq!(
                    owner,
                    Some(slot),
                    "O2 {id}: a bootstrapping node's session exists and is its own"
                );
            }
        }
    }

    fn check_ids(&self) {
        for (op, owner) in &self.routes {
            assert!(
                op.0 < self.ops.peek(),
                "O3 {op}: routed ids come from the counter"
            );
            match owner {
                Owner::Node(slot) => assert!(
                    self.nodes.get(slot.at()).is_some_and(Option::is_some),
                    "O4 {op}: routed to a ledger node"
                ),
                Owner::Session(session) => {
                    let known = self
                        .sessions
                        .get(session)
                        .is_some_and(|s| s.ops.contains(op));
                    assert!(known, "O4 {op}: routed to a live session that knows it");
                }
            }
        }
        for id in self.sessions.keys() {
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
            assert_eq!(machine.record().node(), id, "O5 {id}: keyed by its own id");
            if machine.stage() != Stage::Destroyed
                && let Some(lease) = machine.record().lease_id()
            {
                let other = leases.insert(lease.clone(), id);
                assert!(other.is_none(), "O6 {lease}: one lease, one node");
            }
            if self.tearing_down {
                assert!(
                    machine.is_winding_down() || machine.holds_no_lease(),
                    "O7 {id}: after Teardown every node winds down ({:?})",
                    machine.stage()
                );
            }
            if !self.started && !self.tearing_down {
                let idle =
                    !machine.in_flight() || machine.awaits_start() || machine.is_winding_down();
                assert!(
                    idle,
                    "O8 {id}: before Start only restored work or a destroy is pending"
                );
            }
        }
    }

    /// O10 The deadline index and the tallies agree with the children.
    fn check_index(&self) {
        use crate::Machine as _;
        let nodes = self
            .occupied()
            .map(|(slot, machine)| (slot, machine.next_deadline()));
        let sessions = self
            .sessions
            .iter()
            .map(|(id, s)| (*id, s.deadline, s.machine.next_deadline()));
        assert!(
            self.deadlines.matches(nodes, sessions),
            "O10: the deadline index names every child's next deadline"
        );
        assert!(
            self.tally.is_consistent(),
            "O10: the tallies count the flags"
        );
        for (slot, machine) in self.occupied() {
            let id = &self.ids[slot.at()];
            let flags = (
                !super::index::is_settled(machine),
                !machine.holds_no_lease(),
            );
            assert_eq!(
                self.tally.flags(slot),
                flags,
                "O10 {id}: the tally's flags are the node's"
            );
        }
    }
}
