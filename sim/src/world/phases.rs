//! The run's phases; the liveness rule itself (when a phase's goal is
//! reached, what a violation says) is the kit's, `conformance::liveness`,
//! shared with the madsim world.

use super::{Phase, World};
use crate::plan;
use conformance::System;
use conformance::liveness::{self, Settle};
use core_fsm::port::Input;

impl<S: System> World<'_, S> {
    /// Moves to the next phase when the current one's goal is reached;
    /// true if it moved.
    pub(super) fn advance_phase(&mut self) -> bool {
        let Some(orch) = self.orch.as_ref() else {
            return false;
        };
        if orch.syncing || !orch.inbox.is_empty() || !orch.pending.is_empty() {
            return false;
        }
        let facts = Settle::of(&orch.sys);
        match self.phase {
            Phase::Fault | Phase::Done => false,
            Phase::Heal if facts.heal_done(self.teardown_wanted) => {
                self.stats.nodes_ready = facts.ready;
                self.stats.nodes_failed = facts.failed;
                self.phase = Phase::Teardown;
                self.teardown_wanted = true;
                self.deadline = Some(self.now + plan::teardown_budget());
                self.note(|| "world: settled, operator asks for teardown".to_owned());
                if let Some(orch) = self.orch.as_mut() {
                    orch.inbox.push_back(Input::Teardown);
                }
                self.pump();
                true
            }
            Phase::Heal => false,
            Phase::Teardown if facts.teardown_done(&self.oracle) => {
                self.phase = Phase::Done;
                self.note(|| "world: torn down, no lease left".to_owned());
                true
            }
            Phase::Teardown => false,
        }
    }

    /// What the nodes look like, for a liveness report.
    fn node_summary(&self) -> String {
        let Some(orch) = self.orch.as_ref() else {
            return "orchestrator down".to_owned();
        };
        let mut parts = Vec::new();
        orch.sys.visit_nodes(&mut |view| {
            parts.push(format!(
                "{}={:?}{}",
                view.node,
                view.stage,
                view.lease
                    .map(|l| format!("@{}", l.lease_id))
                    .unwrap_or_default()
            ));
        });
        parts.join(" ")
    }

    /// Nothing is left to happen, but the run has not reached its goal.
    pub(super) fn stuck(&mut self) {
        self.liveness_broken(true);
    }

    /// The phase's budget of virtual time ran out.
    pub(super) fn out_of_time(&mut self) {
        self.liveness_broken(false);
    }

    fn liveness_broken(&mut self, stuck: bool) {
        let nodes = self.node_summary();
        let (id, what) =
            liveness::verdict(self.phase, stuck, &self.oracle, &self.disk.synced, &nodes);
        self.violate(id, what);
    }
}
