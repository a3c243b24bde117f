//! The run phase's seeded swarm generator: a seed draws a profile (the
//! pipeline's shape, timings, and which faults are on), then the items.
//!
//! A fatal fault ends a run that does not repair: such a case holds at most
//! one, and only faults that act before it besides, so every fault a
//! profile enables is reached (the battery measures it). A repairing case
//! (`run-repair`) holds agent deaths while serving, which it survives.

use super::{RunCase, RunFault, RunItem, RunProfile};
use core_fsm::rng::DetRng;

/// A named family of run profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunScenario {
    /// No fatal fault: every other fault on for half the seeds. Every run
    /// must serve every request and stop cleanly.
    Serving,
    /// Exactly one fatal fault (uniformly drawn), plus the readiness
    /// faults, which act before it.
    Fatal,
    /// A run that repairs: one or two agents die while serving, each dead
    /// node's replacement starts a little later; a worker crash and a
    /// failed step (each on for half the seeds) are repaired on their own
    /// node; every other non-fatal fault is on for half the seeds; the
    /// replacement's provisioning faults too. Every request must be served
    /// whole.
    Repair,
    /// A repairing run whose orchestrator crashes while it repairs: an
    /// agent dies while serving, and `drover up` restarts before the run is
    /// whole again. The restarted composite expects the dead agent, finds
    /// it Dead and replaces its node; the new run repairs its startup. The
    /// replacement's provisioning faults are each on for half the seeds.
    Restart,
}

impl RunScenario {
    /// Every run scenario.
    pub const ALL: [RunScenario; 4] = [
        RunScenario::Serving,
        RunScenario::Fatal,
        RunScenario::Repair,
        RunScenario::Restart,
    ];

    /// The scenario's name.
    pub fn name(self) -> &'static str {
        match self {
            RunScenario::Serving => "run-serving",
            RunScenario::Fatal => "run-fatal",
            RunScenario::Repair => "run-repair",
            RunScenario::Restart => "run-restart",
        }
    }

    /// Parses a name.
    pub fn parse(text: &str) -> Option<RunScenario> {
        RunScenario::ALL.into_iter().find(|s| s.name() == text)
    }
}

/// Draws the run case of `seed` in `scenario`.
pub fn generate_run(scenario: RunScenario, seed: u64) -> RunCase {
    let root = DetRng::new(seed).derive(0x52554e + scenario as u64);
    let mut rng = root.derive(1);
    let stages = rng.between(1, 4) as u32;
    let prompt_max = rng.between(1, 6) as u32;
    let profile = RunProfile {
        stages,
        layers: stages + rng.below(6) as u32,
        requests: rng.between(1, 4) as u32,
        prompt_seed: rng.next_u64() >> 16,
        prompt_max,
        max_tokens_max: rng.between(3, 12) as u32,
        context: if rng.ratio(1, 3) {
            prompt_max + rng.between(3, 10) as u32
        } else {
            0
        },
        latency_ms: rng.between(2, 60),
        spawn_ms: rng.between(10, 2_000),
        fetch_ms: rng.between(10, 3_000),
        load_ms: rng.between(10, 3_000),
        step_ms: rng.between(1, 80),
        conn_loss_ms: rng.between(300, 4_000),
        submit_gap_ms: rng.between(0, 2_000),
        heal_at_ms: rng.between(60_000, 120_000),
        repairs: 0,
        replace_ms: 0,
        rates: Vec::new(),
    };
    let mut profile = profile;
    if matches!(scenario, RunScenario::Repair | RunScenario::Restart) {
        // Drawn from a stream of its own: the other scenarios' cases stay
        // as they were.
        let mut r = root.derive(3);
        profile.repairs = 5;
        profile.replace_ms = r.between(200, 6_000);
    }
    let mut rng = root.derive(2);
    let on: Vec<RunFault> = match scenario {
        RunScenario::Serving => RunFault::ALL
            .into_iter()
            .filter(|f| !f.is_fatal() && !f.is_replacement() && rng.ratio(1, 2))
            .collect(),
        RunScenario::Fatal => {
            let fatal: Vec<RunFault> = RunFault::ALL.into_iter().filter(|f| f.is_fatal()).collect();
            let pick = fatal[rng.below(fatal.len() as u64) as usize];
            let early = [RunFault::ReadyWrongNode, RunFault::ReadyWrongRun];
            let mut on: Vec<RunFault> = early.into_iter().filter(|_| rng.ratio(1, 2)).collect();
            on.push(pick);
            on
        }
        RunScenario::Repair => {
            let mut on: Vec<RunFault> = RunFault::ALL
                .into_iter()
                .filter(|f| {
                    !f.is_fatal()
                        && !f.is_replacement()
                        && *f != RunFault::OrchestratorCrash
                        && rng.ratio(1, 2)
                })
                .collect();
            let deaths = [RunFault::AgentDiesMidRequest, RunFault::OperatorKill];
            let picked: Vec<RunFault> = deaths.into_iter().filter(|_| rng.ratio(1, 2)).collect();
            match picked.is_empty() {
                true => on.push(deaths[rng.below(2) as usize]),
                false => on.extend(picked),
            }
            // Stage faults repaired on the same node, from a stream of
            // their own (the other draws stay as they were).
            let mut r = root.derive(4);
            let stage_faults = [RunFault::WorkerCrashStep, RunFault::StepFails];
            on.extend(stage_faults.into_iter().filter(|_| r.ratio(1, 2)));
            // The provisioning of a dead node's replacement fails, again
            // from a stream of its own.
            let mut r = root.derive(5);
            let provisioning = [
                RunFault::ReplacementCreateFails,
                RunFault::ReplacementBootFails,
            ];
            on.extend(provisioning.into_iter().filter(|_| r.ratio(1, 2)));
            on
        }
        RunScenario::Restart => {
            let deaths = [RunFault::AgentDiesMidRequest, RunFault::OperatorKill];
            let mut on = vec![deaths[rng.below(2) as usize], RunFault::OrchestratorCrash];
            let provisioning = [
                RunFault::ReplacementCreateFails,
                RunFault::ReplacementBootFails,
            ];
            on.extend(provisioning.into_iter().filter(|_| rng.ratio(1, 2)));
            on
        }
    };
    let mut items = Vec::new();
    for fault in &on {
        items.extend(draw_items(*fault, &profile, &mut rng));
    }
    // A crash while serving loses the requests in flight, and with them a
    // disconnect planned on one: beside a disconnect it strikes in startup.
    if on.contains(&RunFault::ClientDisconnects) {
        for item in items
            .iter_mut()
            .filter(|i| i.fault == RunFault::OrchestratorCrash)
        {
            item.target %= 5;
        }
    }
    profile.rates = on.iter().map(|f| (f.name().to_owned(), 1000)).collect();
    profile.rates.sort();
    RunCase {
        scenario: scenario.name().to_owned(),
        seed,
        profile,
        items,
    }
}

/// The items of one enabled fault, each keyed on an event the run reaches
/// before any fatal fault can end it.
fn draw_items(fault: RunFault, p: &RunProfile, rng: &mut DetRng) -> Vec<RunItem> {
    let stages = u64::from(p.stages);
    let stage = rng.below(stages) as u32;
    let item = |target: u32, arg: u64| RunItem { fault, target, arg };
    match fault {
        // The first request's prompt and first fed-back token cross every
        // stage: 2 * stages steps, 2 * (stages + 1) frames; it yields at
        // least 3 token records.
        RunFault::WorkerCrashStep | RunFault::StepFails => {
            vec![item(rng.below(stages * 2) as u32, 0)]
        }
        RunFault::EdgeClosed => vec![item(rng.below((stages + 1) * 2) as u32, 0)],
        RunFault::EdgeStalled => {
            // Stalls stay under the token timeout: a longer one is a
            // token-late, and would let two steps overrun a stage.
            let n = rng.between(1, 3);
            (0..n)
                .map(|_| item(rng.below((stages + 1) * 4) as u32, rng.between(50, 1_500)))
                .collect()
        }
        RunFault::SlowStage => vec![item(stage, rng.between(50, 600))],
        // Not the first record: the client that disconnects after its first
        // token must get it.
        RunFault::TokenDuplicated | RunFault::TokenReordered => {
            vec![item(rng.between(1, 2) as u32, 0)]
        }
        RunFault::TokenLate => vec![item(rng.between(1, 2) as u32, rng.between(500, 12_000))],
        RunFault::ReadyWrongNode => vec![item(stage, rng.below(2))],
        RunFault::AgentDiesMidRequest | RunFault::OperatorKill => vec![item(stage, rng.below(2))],
        RunFault::ClientDisconnects => vec![item(rng.below(u64::from(p.requests)) as u32, 1)],
        // A restarting case's crash strikes while the run repairs.
        RunFault::OrchestratorCrash if p.repairs > 0 => vec![item(6, 0)],
        RunFault::OrchestratorCrash => vec![item(rng.below(6) as u32, 0)],
        // The first replacement: every repairing case has a death.
        RunFault::ReplacementCreateFails => vec![item(0, rng.below(3))],
        RunFault::ReplacementBootFails => vec![item(0, 0)],
        RunFault::WorkerCrashLoad
        | RunFault::ProvisionLost
        | RunFault::ProvisionDuplicated
        | RunFault::ReadyWrongRun
        | RunFault::AgentDiesBeforeLoad
        | RunFault::AgentDiesLoading
        | RunFault::AgentDiesLoaded => vec![item(stage, 0)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_fatal_cases_hold_one_fatal_fault() {
        for seed in 0..50 {
            for scenario in RunScenario::ALL {
                assert_eq!(generate_run(scenario, seed), generate_run(scenario, seed));
            }
            let fatal = generate_run(RunScenario::Fatal, seed);
            let kinds: std::collections::BTreeSet<RunFault> = fatal
                .items
                .iter()
                .map(|i| i.fault)
                .filter(|f| f.is_fatal())
                .collect();
            assert_eq!(kinds.len(), 1, "seed {seed}: {:?}", fatal.items);
            let serving = generate_run(RunScenario::Serving, seed);
            assert!(serving.items.iter().all(|i| !i.fault.is_fatal()));
            // A repairing case has a death it survives and nothing else fatal.
            let repair = generate_run(RunScenario::Repair, seed);
            assert!(repair.profile.repairs > 0 && repair.profile.replace_ms > 0);
            assert!(repair.items.iter().any(|i| i.fault.is_repaired()));
            assert!(
                repair
                    .items
                    .iter()
                    .all(|i| !i.fault.is_fatal() || i.fault.is_repaired())
            );
        }
    }
}
