//! The run phase's part of the kit: the explicit plan of one simulated
//! pipeline run (a [`RunCase`]: a profile and fault items), its fault
//! alphabet by name, the seeded generator, the shrinker and the trace text.
//!
//! A run case starts where provisioning ends: every node is handed off to
//! its agent. Faults are keyed on events of the run (the `nth` step, the
//! stage whose weights load), never on wall time, so a fault a profile
//! enables is reached in almost every run that enables it.

mod generate;
mod shrink;
mod trace;

pub use generate::{RunScenario, generate_run};
pub use shrink::shrink_run;
pub use trace::{RUN_HEADER, parse_run, write_run};

/// One fault of the run phase. What `target` and `arg` of its item mean is
/// said per variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunFault {
    /// The worker of stage `target` crashes while it loads its weights.
    WorkerCrashLoad,
    /// The worker crashes during the `target`-th step executed (all stages).
    WorkerCrashStep,
    /// The `target`-th step executed (all stages) fails.
    StepFails,
    /// Every step of stage `target` takes `arg` ms longer.
    SlowStage,
    /// The edge carrying the `target`-th frame (all edges) closes instead.
    EdgeClosed,
    /// The `target`-th frame (all edges) is held `arg` ms; the edge stalls.
    EdgeStalled,
    /// The `target`-th token record arrives twice.
    TokenDuplicated,
    /// The `target`-th token record arrives after the next token record.
    TokenReordered,
    /// The `target`-th token record arrives `arg` ms late.
    TokenLate,
    /// The provision of stage `target` is lost.
    ProvisionLost,
    /// The provision of stage `target` arrives twice.
    ProvisionDuplicated,
    /// Beside stage `target`'s first runtime-ready report, one from the
    /// wrong node (`arg` 0: another node's connection names the stage; 1:
    /// an identity that is not the node's agent).
    ReadyWrongNode,
    /// Beside stage `target`'s first runtime-ready report, one for another run.
    ReadyWrongRun,
    /// Stage `target`'s agent dies when its readiness is acknowledged.
    AgentDiesBeforeLoad,
    /// Stage `target`'s agent dies while its weights load.
    AgentDiesLoading,
    /// Stage `target`'s agent dies right after its weights loaded.
    AgentDiesLoaded,
    /// Stage `target`'s agent dies at its `arg`-th step.
    AgentDiesMidRequest,
    /// The client of request `target` disconnects after `arg` tokens.
    ClientDisconnects,
    /// The operator kills stage `target`'s agent (the dashboard's drill,
    /// the pipeline host's `Kill`) at its `arg`-th step.
    OperatorKill,
    /// The orchestrator crashes, and `drover up` is started again, when the
    /// run first reaches phase `target` (see [`crash_point`]).
    OrchestratorCrash,
    /// The `target`-th lease create of a replacement (all stages, counted
    /// from 0) fails: `arg` 0 answers `Transient` (nothing was created),
    /// 1 answers `Ambiguous` though the lease was created, 2 answers
    /// `Rejected` (the provider refuses, say, no offer fits).
    ReplacementCreateFails,
    /// The start command of the `target`-th replacement lease's bootstrap
    /// (all stages, counted from 0) exits 1: no agent starts on it.
    ReplacementBootFails,
}

impl RunFault {
    /// Every run fault, in a fixed order.
    pub const ALL: [RunFault; 22] = [
        RunFault::WorkerCrashLoad,
        RunFault::WorkerCrashStep,
        RunFault::StepFails,
        RunFault::SlowStage,
        RunFault::EdgeClosed,
        RunFault::EdgeStalled,
        RunFault::TokenDuplicated,
        RunFault::TokenReordered,
        RunFault::TokenLate,
        RunFault::ProvisionLost,
        RunFault::ProvisionDuplicated,
        RunFault::ReadyWrongNode,
        RunFault::ReadyWrongRun,
        RunFault::AgentDiesBeforeLoad,
        RunFault::AgentDiesLoading,
        RunFault::AgentDiesLoaded,
        RunFault::AgentDiesMidRequest,
        RunFault::ClientDisconnects,
        RunFault::OperatorKill,
        RunFault::OrchestratorCrash,
        RunFault::ReplacementCreateFails,
        RunFault::ReplacementBootFails,
    ];

    /// The fault's name in traces, profiles and coverage.
    pub fn name(self) -> &'static str {
        match self {
            RunFault::WorkerCrashLoad => "worker-crash-load",
            RunFault::WorkerCrashStep => "worker-crash-step",
            RunFault::StepFails => "step-fails",
            RunFault::SlowStage => "slow-stage",
            RunFault::EdgeClosed => "edge-closed",
            RunFault::EdgeStalled => "edge-stalled",
            RunFault::TokenDuplicated => "token-duplicated",
            RunFault::TokenReordered => "token-reordered",
            RunFault::TokenLate => "token-late",
            RunFault::ProvisionLost => "provision-lost",
            RunFault::ProvisionDuplicated => "provision-duplicated",
            RunFault::ReadyWrongNode => "ready-wrong-node",
            RunFault::ReadyWrongRun => "ready-wrong-run",
            RunFault::AgentDiesBeforeLoad => "agent-dies-before-load",
            RunFault::AgentDiesLoading => "agent-dies-loading",
            RunFault::AgentDiesLoaded => "agent-dies-loaded",
            RunFault::AgentDiesMidRequest => "agent-dies-mid-request",
            RunFault::ClientDisconnects => "client-disconnects",
            RunFault::OperatorKill => "operator-kill",
            RunFault::OrchestratorCrash => "orchestrator-crash",
            RunFault::ReplacementCreateFails => "replacement-create-fails",
            RunFault::ReplacementBootFails => "replacement-boot-fails",
        }
    }

    /// What the fault models, for people.
    pub fn describe(self) -> &'static str {
        match self {
            RunFault::WorkerCrashLoad => "worker: crashes while loading its weights",
            RunFault::WorkerCrashStep => "worker: crashes during a step",
            RunFault::StepFails => "worker: a step fails",
            RunFault::SlowStage => "worker: every step of one stage is slow",
            RunFault::EdgeClosed => "edge: an activation or token edge closes",
            RunFault::EdgeStalled => "edge: a frame is held, the edge stalls",
            RunFault::TokenDuplicated => "token-out: a token record arrives twice",
            RunFault::TokenReordered => "token-out: a token record arrives after a later one",
            RunFault::TokenLate => "token-out: a token record arrives late",
            RunFault::ProvisionLost => "control: a ProvisionStage is lost",
            RunFault::ProvisionDuplicated => "control: a ProvisionStage arrives twice",
            RunFault::ReadyWrongNode => "control: a runtime-ready report from the wrong node",
            RunFault::ReadyWrongRun => "control: a runtime-ready report for another run",
            RunFault::AgentDiesBeforeLoad => "agent: dies after handoff, before weight loading",
            RunFault::AgentDiesLoading => "agent: dies during weight loading",
            RunFault::AgentDiesLoaded => "agent: dies after weight loading",
            RunFault::AgentDiesMidRequest => "agent: dies mid-request",
            RunFault::ClientDisconnects => "client: disconnects mid-stream",
            RunFault::OperatorKill => "operator: kills a stage's agent mid-request (a drill)",
            RunFault::OrchestratorCrash => "orchestrator: crashes in a run phase and restarts",
            RunFault::ReplacementCreateFails => {
                "provider: a replacement's lease create fails (transient, ambiguous or refused)"
            }
            RunFault::ReplacementBootFails => {
                "ssh: a replacement's start command fails, so no agent starts on its lease"
            }
        }
    }

    /// Parses a name.
    pub fn parse(text: &str) -> Option<RunFault> {
        RunFault::ALL.into_iter().find(|f| f.name() == text)
    }

    /// Whether a run that may repair, with its dead nodes replaced,
    /// survives the fault: an agent's death while serving, or a stage's
    /// worker crashing or failing a step (the stage is rebuilt on the same
    /// node, with a new worker after a crash).
    pub fn is_repaired(self) -> bool {
        matches!(
            self,
            RunFault::AgentDiesMidRequest
                | RunFault::OperatorKill
                | RunFault::WorkerCrashStep
                | RunFault::StepFails
        )
    }

    /// Whether the fault strikes the provisioning of a dead node's
    /// replacement: only a run that repairs reaches it.
    pub fn is_replacement(self) -> bool {
        matches!(
            self,
            RunFault::ReplacementCreateFails | RunFault::ReplacementBootFails
        )
    }

    /// Whether the fault, once injected, ends a run that does not repair
    /// (a lost stage fails it). At most one per case, so every fault a
    /// case enables is reached.
    pub fn is_fatal(self) -> bool {
        matches!(
            self,
            RunFault::WorkerCrashLoad
                | RunFault::WorkerCrashStep
                | RunFault::StepFails
                | RunFault::EdgeClosed
                | RunFault::TokenDuplicated
                | RunFault::ProvisionLost
                | RunFault::AgentDiesBeforeLoad
                | RunFault::AgentDiesLoading
                | RunFault::AgentDiesLoaded
                | RunFault::AgentDiesMidRequest
                | RunFault::OperatorKill
        )
    }
}

/// The `target` of an [`RunFault::OrchestratorCrash`] that strikes when
/// the run is in `phase`: 0 readiness, 1 acknowledgement, 2 weight loading,
/// 3 stage readiness, 4 prompt opening, 5 serving a request, 6 repairing
/// (a replacement on its way, or a stage rebuilt).
pub fn crash_point(phase: &core_fsm::run::Phase) -> Option<u32> {
    use core_fsm::run::Phase;
    match phase {
        Phase::AwaitingReadiness(_) => Some(0),
        Phase::Acknowledging(_) => Some(1),
        Phase::LoadingWeights { .. } => Some(2),
        Phase::AwaitingStageReady(_) => Some(3),
        Phase::OpeningPrompt { .. } => Some(4),
        Phase::Serving(s) if s.active.is_some() => Some(5),
        Phase::Repairing(_) => Some(6),
        _ => None,
    }
}

/// One item of a run case's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunItem {
    /// The fault.
    pub fault: RunFault,
    /// The stage, ordinal or request it is keyed on (see [`RunFault`]).
    pub target: u32,
    /// Its argument (ms or a count; see [`RunFault`]).
    pub arg: u64,
}

/// The shape and timings of one simulated run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunProfile {
    /// Pipeline stages (one node each).
    pub stages: u32,
    /// The model's layers (at least `stages`).
    pub layers: u32,
    /// Requests the clients submit once the prompt service is open.
    pub requests: u32,
    /// Seed of the prompts and request sizes.
    pub prompt_seed: u64,
    /// Most prompt tokens.
    pub prompt_max: u32,
    /// Most tokens a request asks for (the first asks for at least 3).
    pub max_tokens_max: u32,
    /// The model's context (0: no limit).
    pub context: u32,
    /// Latency of one message (control plane or edge), in ms.
    pub latency_ms: u64,
    /// Worker start to its hello, in ms.
    pub spawn_ms: u64,
    /// Fetch of a stage's weights slice, in ms.
    pub fetch_ms: u64,
    /// Loading a stage's weights into the worker, in ms.
    pub load_ms: u64,
    /// One step of one stage, in ms.
    pub step_ms: u64,
    /// How long a dead agent's connections take to be noticed, in ms.
    pub conn_loss_ms: u64,
    /// Time between two clients' submits, in ms.
    pub submit_gap_ms: u64,
    /// When the fault phase ends: the operator stops the run, in ms.
    pub heal_at_ms: u64,
    /// Repairs the run may make (0: a lost stage fails it, policy `none`).
    pub repairs: u32,
    /// How long after an agent's death its node's replacement agent starts,
    /// in ms (0: nothing replaces a dead node).
    pub replace_ms: u64,
    /// The generator's rates by fault name, per mille (for people and hit
    /// rates; the items are what the world acts on).
    pub rates: Vec<(String, u32)>,
}

/// One simulated run: its name, profile and explicit plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunCase {
    /// The scenario that drew it.
    pub scenario: String,
    /// The seed that drew it (a name only).
    pub seed: u64,
    /// The profile.
    pub profile: RunProfile,
    /// The faults.
    pub items: Vec<RunItem>,
}

impl RunCase {
    /// The names of the faults the case's items inject.
    pub fn enabled(&self) -> std::collections::BTreeSet<&'static str> {
        self.items.iter().map(|i| i.fault.name()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        let mut names: Vec<&str> = RunFault::ALL.iter().map(|f| f.name()).collect();
        for fault in RunFault::ALL {
            assert_eq!(RunFault::parse(fault.name()), Some(fault));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RunFault::ALL.len());
        assert_eq!(RunFault::parse("nonsense"), None);
    }
}
