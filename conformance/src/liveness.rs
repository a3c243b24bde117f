//! The liveness rule every world judges a run by (invariants `L1`, `L2`):
//! after the heal every node must be ready or failed within the settle
//! budget, then the operator's teardown must leave no lease behind within
//! the teardown budget.
//!
//! One copy for all worlds: a world reads a [`Settle`] from the system under
//! test after each step and asks it whether the phase's goal is reached; the
//! verdict texts come from here too, so the worlds' reports agree.

use crate::backend::System;
use crate::oracle::Oracle;
use core_fsm::node::Lifecycle;
use core_fsm::port::JournalRecord;

/// The run's phase, as far as liveness is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Faults are injected.
    Fault,
    /// Faults stopped; every node must settle within the budget.
    Heal,
    /// The operator asked for teardown; no lease may be left.
    Teardown,
    /// The run reached its goal.
    Done,
}

/// What the liveness rule reads from the system under test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settle {
    /// Every node is in a stage that counts as settled.
    pub nodes_settled: bool,
    /// The composite says it is settled.
    pub settled: bool,
    /// The composite says teardown finished.
    pub torn_down: bool,
    /// Nodes ready.
    pub ready: u32,
    /// Nodes failed.
    pub failed: u32,
}

impl Settle {
    /// Reads the facts from `sys`.
    pub fn of<S: System>(sys: &S) -> Settle {
        let mut facts = Settle {
            nodes_settled: true,
            settled: sys.is_settled(),
            torn_down: sys.is_torn_down(),
            ready: 0,
            failed: 0,
        };
        sys.visit_nodes(&mut |view| {
            facts.nodes_settled &= node_settled(view.stage);
            facts.ready += u32::from(view.ready);
            facts.failed += u32::from(view.stage == Lifecycle::Failed);
        });
        facts
    }

    /// The heal phase's goal: every node settled. After an operator
    /// teardown there is nothing to settle: the run goes straight to
    /// checking that the teardown finishes.
    pub fn heal_done(&self, teardown_wanted: bool) -> bool {
        if teardown_wanted {
            self.torn_down || self.nodes_settled
        } else {
            self.nodes_settled && self.settled
        }
    }

    /// The teardown phase's goal: the composite is torn down and the
    /// provider holds no live lease.
    pub fn teardown_done(&self, oracle: &Oracle) -> bool {
        self.torn_down && oracle.live_leases().is_empty()
    }
}

/// Whether a node in `stage` counts as settled. `Destroying` counts once the
/// composite says it is settled: a destroy whose retries are spent waits for
/// the next teardown.
pub fn node_settled(stage: Lifecycle) -> bool {
    matches!(
        stage,
        Lifecycle::Dormant | Lifecycle::Failed | Lifecycle::Destroying | Lifecycle::Destroyed
    )
}

/// Why the run broke liveness: nothing was left to happen (`stuck`) or the
/// phase's budget ran out. Returns the invariant id and what was seen;
/// `nodes` describes the nodes and is appended.
pub fn verdict(
    phase: Phase,
    stuck: bool,
    oracle: &Oracle,
    synced: &[JournalRecord],
    nodes: &str,
) -> (&'static str, String) {
    let (id, what) = match (phase, stuck) {
        (Phase::Teardown, true) => (
            "L2",
            format!("teardown stalled; leases left: [{}]", leaks(oracle, synced)),
        ),
        (Phase::Teardown, false) => (
            "L2",
            format!(
                "teardown not done in budget; leases left: [{}]",
                leaks(oracle, synced)
            ),
        ),
        (_, true) => ("L1", "nothing left to happen, nodes not settled".to_owned()),
        (_, false) => ("L1", "not settled within the budget after heal".to_owned()),
    };
    (id, format!("{what}; nodes: {nodes}"))
}

/// The leases the provider still holds, each with whether the journal knew
/// it (a leak the journal knew is the orchestrator's fault; one it did not
/// know points at a lost intent).
fn leaks(oracle: &Oracle, synced: &[JournalRecord]) -> String {
    let leaks: Vec<String> = oracle
        .live_leases()
        .iter()
        .map(|l| {
            let journaled = synced.iter().any(|r| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heal_waits_for_the_composite_unless_teardown_was_asked() {
        let nodes_only = Settle {
            nodes_settled: true,
            ..Settle::default()
        };
        assert!(!nodes_only.heal_done(false));
        assert!(nodes_only.heal_done(true));
        let torn = Settle {
            torn_down: true,
            ..Settle::default()
        };
        assert!(!torn.heal_done(false));
        assert!(torn.heal_done(true));
        let both = Settle {
            nodes_settled: true,
            settled: true,
            ..Settle::default()
        };
        assert!(both.heal_done(false));
    }

    #[test]
    fn settled_stages() {
        assert!(node_settled(Lifecycle::Failed));
        assert!(node_settled(Lifecycle::Destroying));
        assert!(!node_settled(Lifecycle::LeaseRequested));
    }

    #[test]
    fn verdict_names_the_invariant() {
        let oracle = Oracle::default();
        let (id, text) = verdict(Phase::Heal, false, &oracle, &[], "n1=Failed");
        assert_eq!(id, "L1");
        assert_eq!(
            text,
            "not settled within the budget after heal; nodes: n1=Failed"
        );
        let (id, text) = verdict(Phase::Teardown, true, &oracle, &[], "");
        assert_eq!(id, "L2");
        assert!(text.starts_with("teardown stalled; leases left: []"));
    }
}
