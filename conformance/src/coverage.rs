//! Coverage probes: what a run, and a battery, actually exercised. A battery
//! reports what was hit and what never was, so a fault that the generator
//! never manages to inject shows up instead of silently passing.

use core_fsm::node::Lifecycle;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Every node stage, the universe of the stage probe.
pub const STAGES: [Lifecycle; 11] = [
    Lifecycle::New,
    Lifecycle::LeaseRequested,
    Lifecycle::LeaseCreated,
    Lifecycle::EndpointKnown,
    Lifecycle::BootstrapRunning,
    Lifecycle::AgentJoined,
    Lifecycle::HandedOff,
    Lifecycle::Dormant,
    Lifecycle::Failed,
    Lifecycle::Destroying,
    Lifecycle::Destroyed,
];

/// What was exercised.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Node stages seen in the ledger or in `NodeChanged`.
    pub stages: BTreeSet<Lifecycle>,
    /// Labels the system reported for its internal machines (bootstrap
    /// stages and the like).
    pub labels: BTreeSet<String>,
    /// (stage of the node an input concerned, input kind) pairs delivered.
    pub pairs: BTreeSet<(String, &'static str)>,
    /// Fault names the world actually injected (not only planned).
    pub faults: BTreeSet<&'static str>,
    /// Effect kinds the system emitted.
    pub effects: BTreeSet<&'static str>,
}

impl Coverage {
    /// Adds another run's coverage.
    pub fn merge(&mut self, other: &Coverage) {
        self.stages.extend(other.stages.iter().copied());
        self.labels.extend(other.labels.iter().cloned());
        self.pairs.extend(other.pairs.iter().cloned());
        self.faults.extend(other.faults.iter().copied());
        self.effects.extend(other.effects.iter().copied());
    }

    /// Stages never seen.
    pub fn missing_stages(&self) -> Vec<Lifecycle> {
        STAGES
            .into_iter()
            .filter(|s| !self.stages.contains(s))
            .collect()
    }

    /// Named faults never injected.
    pub fn missing_faults(&self) -> Vec<&'static str> {
        crate::fault::ALL
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| !self.faults.contains(n))
            .collect()
    }

    /// A readable report: hit and never hit.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let stages: Vec<String> = self.stages.iter().map(|s| format!("{s:?}")).collect();
        let missing: Vec<String> = self
            .missing_stages()
            .iter()
            .map(|s| format!("{s:?}"))
            .collect();
        let _ = writeln!(out, "node stages hit: {}", stages.join(" "));
        let _ = writeln!(out, "node stages never hit: {}", missing.join(" "));
        let labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        let _ = writeln!(out, "internal labels hit: {}", labels.join(" "));
        let _ = writeln!(
            out,
            "faults injected: {} of {}",
            self.faults.len(),
            crate::fault::ALL.len()
        );
        let _ = writeln!(
            out,
            "faults never injected: {}",
            self.missing_faults().join(" ")
        );
        let effects: Vec<&str> = self.effects.iter().copied().collect();
        let _ = writeln!(out, "effects emitted: {}", effects.join(" "));
        let _ = writeln!(out, "(stage, input) pairs hit: {}", self.pairs.len());
        for (stage, input) in &self.pairs {
            let _ = writeln!(out, "  {stage} <- {input}");
        }
        out
    }
}

/// The stage of the node `input` concerns, as coverage names it: the node
/// is found through the operation (`op_node`) or named by the input; its
/// stage is the last one seen (`stages`). Inputs that concern no node are
/// the orchestrator's; a node whose stage is unknown is `Unknown`.
pub fn stage_of_input(
    input: &core_fsm::port::Input,
    op_node: &std::collections::BTreeMap<core_fsm::ids::OpId, core_fsm::ids::LogicalNodeId>,
    stages: &std::collections::BTreeMap<core_fsm::ids::LogicalNodeId, Lifecycle>,
) -> String {
    use core_fsm::port::Input;
    let node = match input {
        Input::LeaseCreated { op, .. }
        | Input::EndpointLooked { op, .. }
        | Input::LeaseDestroyed { op, .. }
        | Input::SshConnected { op, .. }
        | Input::SshOutput { op, .. }
        | Input::SshExited { op, .. }
        | Input::SshClosed { op } => op_node.get(op),
        Input::AgentJoined { node, .. }
        | Input::AgentLost { node, .. }
        | Input::Destroy { node } => Some(node),
        Input::LeasesListed { .. }
        | Input::Tick
        | Input::Start
        | Input::Teardown
        | Input::SetDesired { .. }
        | Input::Pipeline(_) => None,
    };
    match node.and_then(|n| stages.get(n)) {
        Some(stage) => format!("{stage:?}"),
        None if node.is_some() => "Unknown".to_owned(),
        None => "Orchestrator".to_owned(),
    }
}
