//! The run's phases and the liveness rule: after the heal every node must be
//! ready or failed within the settle budget, then teardown must leave no
//! lease behind within the teardown budget.

use super::{Phase, World};
use crate::plan;
use conformance::System;
use core_fsm::node::Stage;
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
        match self.phase {
            Phase::Fault | Phase::Done => false,
            Phase::Heal => {
                // After an operator teardown there is nothing to settle: the
                // run goes straight to checking that teardown finishes.
                let settled = if self.teardown_wanted {
                    orch.sys.is_torn_down() || self.all_settled()
                } else {
                    self.all_settled() && orch.sys.is_settled()
                };
                if settled {
                    self.count_outcomes();
                    self.phase = Phase::Teardown;
                    self.teardown_wanted = true;
                    self.deadline = Some(self.now + plan::teardown_budget());
                    self.note(|| "world: settled, operator asks for teardown".to_owned());
                    if let Some(orch) = self.orch.as_mut() {
                        orch.inbox.push_back(Input::Teardown);
                    }
                    self.pump();
                    return true;
                }
                false
            }
            Phase::Teardown => {
                if orch.sys.is_torn_down() && self.oracle.live_leases().is_empty() {
                    self.phase = Phase::Done;
                    self.note(|| "world: torn down, no lease left".to_owned());
                    return true;
                }
                false
            }
        }
    }

    fn all_settled(&self) -> bool {
        let Some(orch) = self.orch.as_ref() else {
            return false;
        };
        let mut settled = true;
        // `Destroying` counts once the composite says it is settled: a
        // destroy whose retries are spent waits for the next teardown.
        orch.sys.visit_nodes(&mut |view| {
            settled &= matches!(
                view.stage,
                Stage::Dormant | Stage::Failed | Stage::Destroying | Stage::Destroyed
            );
        });
        settled
    }

    fn count_outcomes(&mut self) {
        let Some(orch) = self.orch.as_ref() else {
            return;
        };
        let (mut ready, mut failed) = (0, 0);
        orch.sys.visit_nodes(&mut |view| {
            ready += u32::from(view.ready);
            failed += u32::from(view.stage == Stage::Failed);
        });
        self.stats.nodes_ready = ready;
        self.stats.nodes_failed = failed;
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

    fn leaks(&self) -> String {
        let leaks: Vec<String> = self
            .oracle
            .live_leases()
            .iter()
            .map(|l| {
                let journaled = self.disk.synced.iter().any(|r| {
                    matches!(r, core_fsm::port::JournalRecord::LeaseKnown { lease, .. } if lease.lease_id == l.lease_id)
                });
                format!("{} ({}, journaled as known: {journaled})", l.lease_id, l.nonce)
            })
            .collect();
        leaks.join(", ")
    }

    /// Nothing is left to happen, but the run has not reached its goal.
    pub(super) fn stuck(&mut self) {
        let (id, what) = match self.phase {
            Phase::Teardown => (
                "L2",
                format!("teardown stalled; leases left: [{}]", self.leaks()),
            ),
            _ => ("L1", "nothing left to happen, nodes not settled".to_owned()),
        };
        let nodes = self.node_summary();
        self.violate(id, format!("{what}; nodes: {nodes}"));
    }

    /// The phase's budget of virtual time ran out.
    pub(super) fn out_of_time(&mut self) {
        let (id, what) = match self.phase {
            Phase::Teardown => (
                "L2",
                format!(
                    "teardown not done in budget; leases left: [{}]",
                    self.leaks()
                ),
            ),
            _ => ("L1", "not settled within the budget after heal".to_owned()),
        };
        let nodes = self.node_summary();
        self.violate(id, format!("{what}; nodes: {nodes}"));
    }
}
