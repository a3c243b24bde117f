//! The run's phases. The liveness rule itself (when a phase's goal is
//! reached, what a violation says) is the kit's, `conformance::liveness`,
//! the very code tier 1 runs.

use super::{Event, Supervisor};
use crate::state::Phase;
use conformance::liveness;
use core_fsm::port::Input;

impl Supervisor {
    /// Moves to the next phase when the current one's goal is reached.
    pub(super) fn advance_phase(&mut self) {
        let now = self.now();
        let mut w = self.world.lock();
        if !w.orch_up || w.dying {
            return;
        }
        let facts = w.settle;
        match w.phase {
            Phase::Fault | Phase::Done => {}
            Phase::Heal if facts.heal_done(w.teardown_wanted) => {
                w.phase = Phase::Teardown;
                w.teardown_wanted = true;
                w.note(now, || {
                    "world: settled, operator asks for teardown".to_owned()
                });
                w.ready_count = facts.ready;
                w.failed_count = facts.failed;
                drop(w);
                let budget = sim::plan::teardown_budget().as_millis();
                self.schedule(now.as_millis() + budget, Event::Deadline(Phase::Teardown));
                self.world.input(Input::Teardown);
            }
            Phase::Heal => {}
            Phase::Teardown if facts.teardown_done(&w.oracle) => {
                w.phase = Phase::Done;
                w.note(now, || "world: torn down, no lease left".to_owned());
            }
            Phase::Teardown => {}
        }
    }

    /// A phase's budget of virtual time ran out.
    pub(super) fn out_of_time(&mut self, phase: Phase) {
        let now = self.now();
        let mut w = self.world.lock();
        if w.phase != phase {
            return;
        }
        let mut nodes: Vec<String> = w
            .stages
            .iter()
            .map(|(node, stage)| format!("{node}={stage:?}"))
            .collect();
        if !w.orch_up {
            nodes.push("(orchestrator down)".to_owned());
        }
        let (id, what) =
            liveness::verdict(phase, false, &w.oracle, &w.journal.synced, &nodes.join(" "));
        w.violate(now, id, what);
    }
}
