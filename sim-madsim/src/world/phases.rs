//! The run's phases and the liveness rule, as in tier 1: after the heal
//! every node must be ready or failed within the settle budget, then the
//! teardown must leave no lease behind within the teardown budget.

use super::{Event, Supervisor};
use crate::state::Phase;
use core_fsm::port::{Input, JournalRecord};

impl Supervisor {
    /// Moves to the next phase when the current one's goal is reached.
    pub(super) fn advance_phase(&mut self) {
        let now = self.now();
        let mut w = self.world.lock();
        if !w.orch_up || w.dying {
            return;
        }
        match w.phase {
            Phase::Fault | Phase::Done => {}
            // After an operator teardown there is nothing to settle: the run
            // goes straight to checking that the teardown finishes (tier 1's
            // rule, word for word).
            Phase::Heal if settled(&w) => {
                w.phase = Phase::Teardown;
                w.teardown_wanted = true;
                w.note(now, || {
                    "world: settled, operator asks for teardown".to_owned()
                });
                let (ready, failed) = w.stages.values().fold((0, 0), |(r, f), stage| {
                    use core_fsm::node::Stage;
                    (
                        r + u32::from(*stage == Stage::Dormant),
                        f + u32::from(*stage == Stage::Failed),
                    )
                });
                w.ready_count = ready;
                w.failed_count = failed;
                drop(w);
                let budget = sim::plan::teardown_budget().as_millis();
                self.schedule(now.as_millis() + budget, Event::Deadline(Phase::Teardown));
                self.world.input(Input::Teardown);
            }
            Phase::Heal => {}
            Phase::Teardown => {
                if w.torn_down && w.oracle.live_leases().is_empty() {
                    w.phase = Phase::Done;
                    w.note(now, || "world: torn down, no lease left".to_owned());
                }
            }
        }
    }

    /// A phase's budget of virtual time ran out.
    pub(super) fn out_of_time(&mut self, phase: Phase) {
        let now = self.now();
        let mut w = self.world.lock();
        if w.phase != phase {
            return;
        }
        let (id, what) = match phase {
            Phase::Teardown => (
                "L2",
                format!("teardown not done in budget; leases left: [{}]", leaks(&w)),
            ),
            _ => ("L1", "not settled within the budget after heal".to_owned()),
        };
        let nodes: Vec<String> = w
            .stages
            .iter()
            .map(|(node, stage)| format!("{node}={stage:?}"))
            .collect();
        let up = if w.orch_up {
            ""
        } else {
            " (orchestrator down)"
        };
        w.violate(now, id, format!("{what}; nodes: {}{up}", nodes.join(" ")));
    }
}

fn settled(w: &crate::state::WorldState) -> bool {
    if w.teardown_wanted {
        w.torn_down || w.nodes_settled
    } else {
        w.nodes_settled && w.settled
    }
}

fn leaks(w: &crate::state::WorldState) -> String {
    let leaks: Vec<String> = w
        .oracle
        .live_leases()
        .iter()
        .map(|l| {
            let journaled = w.journal.synced.iter().any(|r| {
                matches!(r, JournalRecord::LeaseKnown { lease, .. } if lease.lease_id == l.lease_id)
            });
            format!(
                "{} ({}, journaled as known: {journaled})",
                l.lease_id, l.nonce
            )
        })
        .collect();
    leaks.join(", ")
}
