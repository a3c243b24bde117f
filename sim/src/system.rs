//! The orchestrator composite as the kit's [`System`] (a newtype, since
//! neither the trait nor the composite is this crate's).

use conformance::{NodeView, System};
use core_fsm::Machine;
use core_fsm::orchestrator::{Config, Orchestrator};
use core_fsm::plan::RunPlan;
use core_fsm::port::{Effect, Input, JournalRecord};
use core_fsm::time::Instant;

/// The real orchestrator composite, driven by the worlds.
#[derive(Clone, Debug)]
pub struct Composite(pub Orchestrator);

impl Machine for Composite {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        self.0.handle(now, input)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.0.next_deadline()
    }

    fn check_invariants(&self) {
        self.0.check_invariants();
    }
}

impl System for Composite {
    fn boot(plan: &RunPlan, seed: u64) -> Self {
        Composite(Orchestrator::new(Config {
            plan: plan.clone(),
            seed,
            membership: None,
        }))
    }

    fn restore(plan: &RunPlan, seed: u64, journal: &[JournalRecord]) -> Self {
        Composite(Orchestrator::restore(
            Config {
                plan: plan.clone(),
                seed,
                membership: None,
            },
            journal,
        ))
    }

    fn visit_nodes(&self, visit: &mut dyn FnMut(NodeView<'_>)) {
        for machine in self.0.nodes() {
            visit(NodeView {
                node: machine.node(),
                stage: machine.stage(),
                ready: machine.is_ready(),
                lease: machine.lease().map(|l| &**l),
                agent: machine.agent().map(|a| &a.agent),
                failed_reason: machine.failed_reason(),
            });
        }
    }

    fn is_settled(&self) -> bool {
        self.0.is_settled()
    }

    fn is_torn_down(&self) -> bool {
        self.0.is_torn_down()
    }

    fn probe_labels(&self, visit: &mut dyn FnMut(&str)) {
        for machine in self.0.nodes() {
            if let Some(facts) = machine.bootstrap() {
                visit(bootstrap_label(facts.last_stage));
            }
        }
    }
}

fn bootstrap_label(stage: core_fsm::bootstrap::Step) -> &'static str {
    use core_fsm::bootstrap::Step;
    match stage {
        Step::Created => "bootstrap:Created",
        Step::SshConnecting => "bootstrap:SshConnecting",
        Step::SshReady => "bootstrap:SshReady",
        Step::StdoutStreaming => "bootstrap:StdoutStreaming",
        Step::BootChecking => "bootstrap:BootChecking",
        Step::AgentStarting => "bootstrap:AgentStarting",
        Step::WaitingForJoin => "bootstrap:WaitingForJoin",
        Step::Converged => "bootstrap:Converged",
        Step::Closed => "bootstrap:Closed",
        Step::SshTimeout => "bootstrap:SshTimeout",
        Step::BootCheckFailed => "bootstrap:BootCheckFailed",
        Step::StartFailed => "bootstrap:StartFailed",
        Step::JoinTimeout => "bootstrap:JoinTimeout",
        Step::StreamError => "bootstrap:StreamError",
        Step::Cancelled => "bootstrap:Cancelled",
    }
}

/// Every bootstrap stage label, the universe of the bootstrap probe.
pub const BOOTSTRAP_LABELS: [&str; 15] = [
    "bootstrap:Created",
    "bootstrap:SshConnecting",
    "bootstrap:SshReady",
    "bootstrap:StdoutStreaming",
    "bootstrap:BootChecking",
    "bootstrap:AgentStarting",
    "bootstrap:WaitingForJoin",
    "bootstrap:Converged",
    "bootstrap:Closed",
    "bootstrap:SshTimeout",
    "bootstrap:BootCheckFailed",
    "bootstrap:StartFailed",
    "bootstrap:JoinTimeout",
    "bootstrap:StreamError",
    "bootstrap:Cancelled",
];
