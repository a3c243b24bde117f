//! The run-phase battery: every seed's case runs twice (the step digests
//! must match, D1), the oracle must stay silent; a failure is shrunk, its
//! trace written to `traces/run/` and its one reproduce line printed. It
//! also measures how often each fault a profile enables is injected.

use super::RunWorld;
use conformance::battery::{Failure, first_divergence};
use conformance::coverage::Coverage;
use conformance::run::{RunCase, RunScenario, generate_run, parse_run, shrink_run, write_run};
use conformance::{RunOptions, RunOutcome};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Runs one case once.
pub fn run_case(case: &RunCase, options: RunOptions) -> RunOutcome {
    RunWorld::new(case, options).run()
}

/// Runs `case` twice and judges it.
pub fn check_run_case(case: &RunCase) -> (RunOutcome, Option<Failure>) {
    check_twice(case, run_case)
}

/// Runs `case` twice with `run` (either tier's world) and judges it: the
/// oracle silent, the step digests of both runs equal (D1).
pub fn check_twice(
    case: &RunCase,
    run: impl Fn(&RunCase, RunOptions) -> RunOutcome,
) -> (RunOutcome, Option<Failure>) {
    let first = run(case, RunOptions::default());
    if let Some(v) = &first.violation {
        return (first.clone(), Some(Failure::Violation(v.clone())));
    }
    let second = run(case, RunOptions::default());
    let failure =
        first_divergence(&first.step_digests, &second.step_digests).map(|step| Failure::Diverged {
            step,
            steps: (first.step_digests.len(), second.step_digests.len()),
        });
    (first, failure)
}

/// The command line that reproduces a seed.
pub fn reproduce_line(scenario: RunScenario, seed: u64) -> String {
    format!(
        "cargo run -p sim --bin drover-sim -- run --scenario {} --seed {seed}",
        scenario.name()
    )
}

/// The folder run traces go to.
pub fn trace_dir() -> PathBuf {
    super::super::cli::default_trace_dir().join("run")
}

/// One failing seed.
#[derive(Clone, Debug)]
pub struct RunFailure {
    /// The scenario.
    pub scenario: RunScenario,
    /// The seed.
    pub seed: u64,
    /// What broke.
    pub failure: Failure,
    /// The one command that reproduces it.
    pub reproduce: String,
    /// The shrunk case.
    pub shrunk: RunCase,
    /// Where its trace was written.
    pub trace: Option<PathBuf>,
}

/// What a run battery found.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Cases run (each twice).
    pub cases: u64,
    /// Steps of the first runs.
    pub steps: u64,
    /// Requests that ended Done.
    pub done: u64,
    /// Runs that failed (cleanly: the oracle was silent).
    pub runs_failed: u64,
    /// Leases the composite created beyond each node's first: the dead
    /// nodes it replaced.
    pub replacements: u64,
    /// Orchestrator restarts.
    pub restarts: u64,
    /// Failures.
    pub failures: Vec<RunFailure>,
    /// What was exercised.
    pub coverage: Coverage,
    /// Per fault name: (cases that enabled it, cases that injected it).
    pub hits: BTreeMap<&'static str, (u32, u32)>,
}

impl RunReport {
    /// Faults whose hit rate among the cases enabling them is below
    /// `per_mille`, with their counts; and faults no case enabled.
    pub fn below(&self, per_mille: u32) -> Vec<(&'static str, u32, u32)> {
        super::fault_names()
            .into_iter()
            .filter_map(|name| {
                let (on, hit) = self.hits.get(name).copied().unwrap_or((0, 0));
                (on == 0 || hit * 1000 < on * per_mille).then_some((name, on, hit))
            })
            .collect()
    }

    /// A readable summary: failures, hit rates, counts.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for f in &self.failures {
            out.push_str(&format!(
                "FAIL {} seed {}: {}\n  reproduce: {}\n",
                f.scenario.name(),
                f.seed,
                f.failure,
                f.reproduce
            ));
            if let Some(t) = &f.trace {
                out.push_str(&format!(
                    "  shrunk to {} items: {}\n",
                    f.shrunk.items.len(),
                    t.display()
                ));
            }
        }
        for (name, (on, hit)) in &self.hits {
            out.push_str(&format!(
                "  {name:<24} hit in {hit:>4} of {on:>4} profiles\n"
            ));
        }
        out.push_str(&format!(
            "{} run cases, {} failures, {} steps, {} requests done, {} runs failed cleanly, \
             {} nodes replaced, {} orchestrator restarts\n",
            self.cases,
            self.failures.len(),
            self.steps,
            self.done,
            self.runs_failed,
            self.replacements,
            self.restarts
        ));
        out
    }
}

/// Runs `seeds` seeds of every scenario from `first_seed`, on this thread;
/// failures are shrunk (`shrink_budget` runs each) and written to
/// `trace_dir`.
pub fn run_battery(
    scenarios: &[RunScenario],
    seeds: std::ops::Range<u64>,
    shrink_budget: u32,
    trace_dir: Option<&Path>,
) -> RunReport {
    let mut report = RunReport::default();
    for scenario in scenarios {
        for seed in seeds.clone() {
            let case = generate_run(*scenario, seed);
            let (outcome, failure) = check_run_case(&case);
            report.cases += 1;
            report.steps += outcome.stats.steps;
            report.done += u64::from(outcome.stats.nodes_ready);
            report.runs_failed += u64::from(outcome.stats.nodes_failed);
            let stages = case.profile.stages.max(1);
            report.replacements += u64::from(outcome.stats.leases_created.saturating_sub(stages));
            report.restarts += u64::from(outcome.stats.restarts);
            report.coverage.merge(&outcome.coverage);
            for name in case.enabled() {
                let entry = report.hits.entry(name).or_insert((0, 0));
                entry.0 += 1;
                entry.1 += u32::from(outcome.coverage.faults.contains(name));
            }
            if let Some(failure) = failure {
                let f = fail(&case, *scenario, failure, shrink_budget, trace_dir);
                report.failures.push(f);
            }
        }
    }
    report
}

fn fail(
    case: &RunCase,
    scenario: RunScenario,
    failure: Failure,
    budget: u32,
    dir: Option<&Path>,
) -> RunFailure {
    let reproduce = reproduce_line(scenario, case.seed);
    eprintln!("drover-sim run: {failure}\n  reproduce: {reproduce}");
    let id = failure.id();
    let shrunk = if budget > 0 {
        shrink_run(case, budget, &mut |c: &RunCase| {
            check_run_case(c).1.is_some_and(|f| f.id() == id)
        })
    } else {
        case.clone()
    };
    let trace = dir.and_then(|dir| {
        let path = dir.join(format!("failed-{}-{}.trace", scenario.name(), case.seed));
        let mut text = format!("# {failure}\n# reproduce the seed: {reproduce}\n");
        text.push_str(&write_run(&shrunk));
        std::fs::create_dir_all(dir).ok()?;
        std::fs::write(&path, text).ok()?;
        Some(path)
    });
    RunFailure {
        scenario,
        seed: case.seed,
        failure,
        reproduce,
        shrunk,
        trace,
    }
}

/// Replays a run trace with its transcript.
pub fn replay_run(path: &Path) -> Result<(RunCase, RunOutcome), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let case = parse_run(&text)?;
    let outcome = run_case(&case, RunOptions { transcript: true });
    Ok((case, outcome))
}
