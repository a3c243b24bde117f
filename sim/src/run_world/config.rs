//! The world's fixed parts: ids, the machines' configs as the real runtime
//! sets them, and coverage labels.

use super::RUN;
use conformance::run::RunFault;
use core_fsm::agent;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::pipeline;
use core_fsm::time::Duration;
use std::collections::BTreeSet;

/// Node `stage`'s logical id (node `i` runs stage `i`): the plan's
/// `{group}-{index}`.
pub fn node_id(stage: u32) -> LogicalNodeId {
    core_fsm::plan::node_id(&core_fsm::ids::GroupId::from(GROUP), stage)
}

/// Node `stage`'s agent identity.
pub fn agent_id(stage: u32) -> AgentId {
    AgentId::new(format!("agent-{stage}"))
}

/// The identity of node `stage`'s agent of generation `generation`: 0 is
/// the first; each replacement's is new.
pub fn agent_id_of(stage: u32, generation: u32) -> AgentId {
    match generation {
        0 => agent_id(stage),
        g => AgentId::new(format!("agent-{stage}-r{g}")),
    }
}

/// The orchestrator's identity.
pub fn orchestrator_id() -> AgentId {
    AgentId::new("orchestrator")
}

/// A run input, as the pipeline host takes it.
pub fn run_input(input: core_fsm::run::Input) -> pipeline::Input {
    pipeline::Input::Run(input)
}

/// The membership's thresholds, as `drover up` sets them.
pub fn membership_config() -> core_fsm::membership::Config {
    core_fsm::membership::Config {
        suspect_after: Duration::from_millis(2_500),
        dead_after: Duration::from_secs(5),
        ..core_fsm::membership::Config::default()
    }
}

/// The plan the world's composite keeps: one group `w` of a node per stage
/// (`w-0`, `w-1`, ..., as [`node_id`] names them), replaced under
/// `Bounded` when the profile repairs (its backoff the profile's
/// `replace_ms`), never otherwise.
pub fn run_plan(p: &conformance::run::RunProfile) -> core_fsm::plan::RunPlan {
    use core_fsm::plan::{ReplacementPolicy, RunPlan};
    let mut plan = RunPlan::example_two_workers();
    plan.run_id = RUN;
    let group = &mut plan.groups[0];
    group.group_id = core_fsm::ids::GroupId::from(GROUP);
    group.count = p.stages.max(1);
    group.boot.timeouts = crate::plan::timeouts();
    plan.replacement = match repairs(p) {
        true => ReplacementPolicy::Bounded {
            attempts_max: (p.repairs + 1).min(16),
            backoff_base: backoff(p),
            backoff_max: backoff(p),
            quarantine_after_failures: 1,
        },
        false => ReplacementPolicy::None,
    };
    plan
}

/// The composite's backoff before it replaces a dead node, the same for
/// every attempt. Membership finds a silent agent Dead `dead_after` (5 s)
/// after its last heartbeat, so the backoff is what is left of the
/// profile's `replace_ms` after that (at least 100 ms): a replacement
/// starts about `max(replace_ms, dead_after)` after the death.
fn backoff(p: &conformance::run::RunProfile) -> Duration {
    let detection = membership_config().dead_after.as_millis();
    Duration::from_millis(p.replace_ms.saturating_sub(detection).max(100))
}

/// The plan's one group.
const GROUP: &str = "w";

/// The composite's config: the profile's plan, a pipeline host with
/// `drover up`'s membership.
pub fn orchestrator_config(p: &conformance::run::RunProfile) -> core_fsm::orchestrator::Config {
    core_fsm::orchestrator::Config {
        plan: run_plan(p),
        seed: p.prompt_seed,
        membership: Some(membership_config()),
    }
}

/// Whether dead nodes are replaced (and the run repairs).
pub fn repairs(p: &conformance::run::RunProfile) -> bool {
    p.repairs > 0 && p.replace_ms > 0
}

/// An agent's config, as `runtime-real/src/pipeline/node.rs` sets it.
pub fn agent_config(stage: u32, generation: u32) -> agent::Config {
    agent::Config {
        boot: core_fsm::boot::Config {
            node: node_id(stage),
            worker_start: core_fsm::boot::WorkerStartPolicy::Required,
            boot_timeout: Duration::from_secs(60),
        },
        run_id: RUN,
        agent: agent_id_of(stage, generation),
        orchestrator: orchestrator_id(),
        stage,
        stages_max: 1,
        ready_resend_interval: Duration::from_secs(1),
        ready_reports_max: 60,
        heartbeat_interval: Duration::from_secs(1),
        stop_step_timeout: Duration::from_secs(10),
        stage_ring: PREFILL_IN_FLIGHT,
    }
}

/// A coverage label of a run phase (`Serving/active` while a request is).
pub fn phase_label(phase: &core_fsm::run::Phase) -> String {
    match phase {
        core_fsm::run::Phase::Failed(error) => format!("Failed/{}", debug_head(error)),
        core_fsm::run::Phase::Serving(s) if s.active.is_some() => "Serving/active".to_owned(),
        other => debug_head(other),
    }
}

/// The variant name of a value's `Debug` text.
pub fn debug_head<T: std::fmt::Debug>(value: &T) -> String {
    /// Keeps the text up to its first other character, then stops the
    /// formatting (a phase's whole `Debug` text is long; this runs after
    /// every step).
    struct Head(String);
    impl std::fmt::Write for Head {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            match s.find(|c: char| !c.is_alphanumeric() && c != '_') {
                Some(end) => {
                    self.0.push_str(&s[..end]);
                    Err(std::fmt::Error)
                }
                None => {
                    self.0.push_str(s);
                    Ok(())
                }
            }
        }
    }
    let mut head = Head(String::new());
    let _ = std::fmt::write(&mut head, format_args!("{value:?}"));
    head.0
}

/// The names of every run fault, for coverage reports.
pub fn fault_names() -> BTreeSet<&'static str> {
    RunFault::ALL.iter().map(|f| f.name()).collect()
}

/// Chunks of a prompt in flight at once, and each stage's inbound ring
/// (`runtime-real/src/pipeline.rs` `PREFILL_IN_FLIGHT`; the world cuts no
/// chunk for a frame's size, so no prompt travels in more, and its edges
/// deliver without the runtime's read-ahead gate, `node/backlog.rs`).
pub const PREFILL_IN_FLIGHT: u64 = 8;

/// The smallest chunk a prompt is cut into. The runtime's is 32 tokens;
/// the world's prompts are short, so its chunks are too, and a prompt
/// travels in several.
pub(super) const PREFILL_CHUNK_MIN: usize = 2;

/// How a prompt of `len` tokens is cut (the runtime's rule, with the
/// world's smallest chunk; the world's frames carry a chunk of any size, so
/// none is cut for its width).
pub fn prefill_chunks(len: usize) -> Vec<usize> {
    core_fsm::run::prefill_chunks(len, PREFILL_CHUNK_MIN, PREFILL_IN_FLIGHT as usize, 0)
}

/// Whether a fault of `case` ends its run: a fatal one, unless the run
/// repairs and its dead nodes are replaced.
pub fn fatal(case: &conformance::run::RunCase) -> bool {
    let repairs = repairs(&case.profile);
    case.items
        .iter()
        .any(|i| i.fault.is_fatal() && !(repairs && i.fault.is_repaired()))
}

/// Whether a fault keyed on the run's step count strikes at step `nth`:
/// once, at the first step from its target on (a death or another step
/// fault may take the target step itself). Marks it fired.
pub fn due_once(
    faults: &std::collections::BTreeMap<RunFault, Vec<(u32, u64)>>,
    fired: &mut BTreeSet<RunFault>,
    fault: RunFault,
    nth: u32,
) -> bool {
    let due = !fired.contains(&fault)
        && faults
            .get(&fault)
            .is_some_and(|items| items.iter().any(|(t, _)| *t <= nth));
    if due {
        fired.insert(fault);
    }
    due
}

/// A case's faults by kind: (target, argument) of each item.
pub fn fault_index(
    case: &conformance::run::RunCase,
) -> std::collections::BTreeMap<RunFault, Vec<(u32, u64)>> {
    let mut faults: std::collections::BTreeMap<RunFault, Vec<(u32, u64)>> = Default::default();
    for item in &case.items {
        faults
            .entry(item.fault)
            .or_default()
            .push((item.target, item.arg));
    }
    faults
}

/// The coverage label of a finished repair: what it resumed.
pub fn repaired_label(resumed: Option<(core_fsm::run::RequestId, u64)>) -> &'static str {
    match resumed {
        Some((_, 0)) => "run:resumed/prompt",
        Some(_) => "run:resumed/mid-request",
        None => "run:repaired/idle",
    }
}
