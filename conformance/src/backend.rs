//! What the kit needs from the thing under test ([`System`]) and from a world
//! that runs it ([`Backend`]).
//!
//! The tier-1 property-trace world, the madsim world and the real runtime
//! each implement [`Backend`]; the battery, the oracle and the shrinker are
//! written once against it.

use crate::case::Case;
use crate::coverage::Coverage;
use core_fsm::digest::Digest;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::machine::Machine;
use core_fsm::node::Lifecycle;
use core_fsm::plan::RunPlan;
use core_fsm::port::{Effect, Input, JournalRecord, LeaseFacts};
use std::fmt;

/// One node record as the oracle reads it (borrowed, so a snapshot after
/// every step costs nothing).
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    /// The logical node.
    pub node: &'a LogicalNodeId,
    /// Its stage.
    pub stage: Lifecycle,
    /// Whether it is ready.
    pub ready: bool,
    /// Its current lease, if any.
    pub lease: Option<&'a LeaseFacts>,
    /// Its agent, once joined.
    pub agent: Option<&'a AgentId>,
    /// Why it failed, if it did.
    pub failed_reason: Option<&'a str>,
}

/// The orchestrator composite as a world drives it: the port alphabet plus
/// construction, restore from a journal and a read-only view of its ledger.
pub trait System: Machine<Input = Input, Effect = Effect> + Sized {
    /// A fresh orchestrator for `plan`.
    fn boot(plan: &RunPlan, seed: u64) -> Self;
    /// An orchestrator restored from the synced journal of a killed one.
    fn restore(plan: &RunPlan, seed: u64, journal: &[JournalRecord]) -> Self;
    /// Calls `visit` for every node record, in node order.
    fn visit_nodes(&self, visit: &mut dyn FnMut(NodeView<'_>));
    /// Every node is ready or failed and nothing is in flight.
    fn is_settled(&self) -> bool;
    /// Teardown finished: every known lease is gone.
    fn is_torn_down(&self) -> bool;
    /// Coverage labels of internal machines (bootstrap stages and the like).
    fn probe_labels(&self, _visit: &mut dyn FnMut(&str)) {}
}

/// A broken guarantee: which one, where, and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's id (`W1`.., `L1`.., `D1`).
    pub id: &'static str,
    /// The step at which it was seen.
    pub step: u64,
    /// The virtual time, in ms.
    pub at_ms: u64,
    /// What was seen.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at step {} (t={}ms): {}",
            self.id, self.step, self.at_ms, self.message
        )
    }
}

/// Counts of one run, for reports and the bench.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Inputs handled by the orchestrator (all incarnations).
    pub steps: u64,
    /// Virtual time at the end, in ms.
    pub end_ms: u64,
    /// Orchestrator restarts.
    pub restarts: u32,
    /// Leases the provider created.
    pub leases_created: u32,
    /// Nodes ready before teardown.
    pub nodes_ready: u32,
    /// Nodes failed before teardown.
    pub nodes_failed: u32,
}

/// What running one case produced.
#[derive(Clone, Debug, Default)]
pub struct RunOutcome {
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// Every transition folded together.
    pub digest: Digest,
    /// The running digest after each step, to locate a divergence.
    pub step_digests: Vec<u64>,
    /// What was exercised.
    pub coverage: Coverage,
    /// One line per step, when asked for.
    pub transcript: Vec<String>,
    /// Counts.
    pub stats: Stats,
}

/// How to run one case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Keep a readable transcript (slow; replays and failures only).
    pub transcript: bool,
}

/// A world that can run a case against the system under test.
pub trait Backend: Sync {
    /// The backend's name, for reports.
    fn name(&self) -> &'static str;
    /// Runs one case from start to its end (or its first violation).
    fn run(&self, case: &Case, options: RunOptions) -> RunOutcome;
}

/// The text of a caught panic (for a W7/W8 violation's message).
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".to_owned()
    }
}
