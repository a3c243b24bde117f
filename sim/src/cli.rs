//! Entry points for `cargo xtask sim | replay | shrink | bench` and the
//! `drover-sim` binary: batteries on every core (`std::thread`), one seed,
//! trace replay and shrinking, and the bench.

use crate::backend::Real;
use conformance::battery::{self, Failure};
use conformance::coverage::Coverage;
use conformance::{Backend, Case, RunOptions, RunOutcome, Scenario, generate, trace};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant as WallClock;

/// What a battery runs.
#[derive(Clone, Debug)]
pub struct BatteryOptions {
    /// The scenarios; every one runs `seeds` seeds.
    pub scenarios: Vec<Scenario>,
    /// Seeds per scenario.
    pub seeds: u64,
    /// The first seed.
    pub first_seed: u64,
    /// Worker threads (0: one per core).
    pub threads: usize,
    /// Shrink failures (at most this many runs each; 0: do not shrink).
    pub shrink_budget: u32,
    /// Where failing traces are written (None: nowhere).
    pub trace_dir: Option<PathBuf>,
}

impl Default for BatteryOptions {
    fn default() -> Self {
        BatteryOptions {
            scenarios: Scenario::ALL.to_vec(),
            seeds: 100,
            first_seed: 0,
            threads: 0,
            shrink_budget: 300,
            trace_dir: Some(default_trace_dir()),
        }
    }
}

/// The workspace's `traces/` folder.
pub fn default_trace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("traces")
}

/// One failing seed.
#[derive(Clone, Debug)]
pub struct FailureReport {
    /// The scenario.
    pub scenario: Scenario,
    /// The seed.
    pub seed: u64,
    /// What broke.
    pub failure: Failure,
    /// The one command that reproduces it.
    pub reproduce: String,
    /// The shrunk case.
    pub shrunk: Case,
    /// Where its trace was written.
    pub trace: Option<PathBuf>,
}

/// What a battery found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Cases run (each twice, for determinism).
    pub cases: u64,
    /// Orchestrator steps, first runs only.
    pub steps: u64,
    /// Nodes ready / failed before teardown, summed.
    pub nodes_ready: u64,
    /// See `nodes_ready`.
    pub nodes_failed: u64,
    /// Orchestrator restarts, summed.
    pub restarts: u64,
    /// Failures, in (scenario, seed) order.
    pub failures: Vec<FailureReport>,
    /// What the battery exercised.
    pub coverage: Coverage,
    /// Wall-clock seconds.
    pub elapsed_s: f64,
}

impl Report {
    /// A readable summary, failures first.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for f in &self.failures {
            out.push_str(&format!(
                "FAIL {} seed {}: {}\n",
                f.scenario.name(),
                f.seed,
                f.failure
            ));
            out.push_str(&format!("  reproduce: {}\n", f.reproduce));
            if let Some(t) = &f.trace {
                out.push_str(&format!(
                    "  shrunk to {} items: {}\n",
                    f.shrunk.items.len(),
                    t.display()
                ));
            }
        }
        out.push_str(&format!(
            "{} cases, {} failures, {} steps, {} ready / {} failed nodes, {} restarts, {:.1}s\n",
            self.cases,
            self.failures.len(),
            self.steps,
            self.nodes_ready,
            self.nodes_failed,
            self.restarts,
            self.elapsed_s
        ));
        out
    }
}

fn threads(requested: usize) -> usize {
    if requested > 0 {
        return requested;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs every (scenario, seed) of `options` on all cores.
pub fn run_battery(options: &BatteryOptions) -> Report {
    let started = WallClock::now();
    let jobs: Vec<(Scenario, u64)> = options
        .scenarios
        .iter()
        .flat_map(|s| (0..options.seeds).map(move |i| (*s, options.first_seed + i)))
        .collect();
    let next = AtomicU64::new(0);
    let report = Mutex::new(Report::default());
    let backend = Real::default();
    std::thread::scope(|scope| {
        for _ in 0..threads(options.threads) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some((scenario, seed)) = jobs.get(i).copied() else {
                        return;
                    };
                    let case = generate(scenario, seed);
                    let (outcome, failure) = battery::check_case(&backend, &case);
                    let failed = failure.map(|f| fail(&backend, options, &case, scenario, f));
                    let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
                    absorb(&mut r, &outcome);
                    r.failures.extend(failed);
                }
            });
        }
    });
    let mut report = report.into_inner().unwrap_or_else(|e| e.into_inner());
    report.failures.sort_by_key(|f| (f.scenario, f.seed));
    report.elapsed_s = started.elapsed().as_secs_f64();
    report
}

fn absorb(report: &mut Report, outcome: &RunOutcome) {
    report.cases += 1;
    report.steps += outcome.stats.steps_or(outcome.step_digests.len() as u64);
    report.nodes_ready += u64::from(outcome.stats.nodes_ready);
    report.nodes_failed += u64::from(outcome.stats.nodes_failed);
    report.restarts += u64::from(outcome.stats.restarts);
    report.coverage.merge(&outcome.coverage);
}

trait StepsOr {
    fn steps_or(&self, fallback: u64) -> u64;
}

impl StepsOr for conformance::Stats {
    fn steps_or(&self, fallback: u64) -> u64 {
        if self.steps > 0 { self.steps } else { fallback }
    }
}

/// Shrinks a failure, writes its trace and prints its one reproduce line.
fn fail(
    backend: &dyn Backend,
    options: &BatteryOptions,
    case: &Case,
    scenario: Scenario,
    failure: Failure,
) -> FailureReport {
    let reproduce = battery::reproduce_line(scenario.name(), case.seed);
    eprintln!("drover-sim: {failure}\n  reproduce: {reproduce}");
    let shrunk = if options.shrink_budget > 0 {
        battery::shrink_failure(backend, case, &failure, options.shrink_budget)
    } else {
        case.clone()
    };
    let trace = options.trace_dir.as_ref().and_then(|dir| {
        let path = dir.join(format!("failed-{}-{}.trace", scenario.name(), case.seed));
        let text = trace_text(&shrunk, &failure, &reproduce);
        std::fs::create_dir_all(dir).ok()?;
        std::fs::write(&path, text).ok()?;
        Some(path)
    });
    FailureReport {
        scenario,
        seed: case.seed,
        failure,
        reproduce,
        shrunk,
        trace,
    }
}

fn trace_text(case: &Case, failure: &Failure, reproduce: &str) -> String {
    let mut text = format!("# {failure}\n# reproduce the seed: {reproduce}\n");
    text.push_str(&trace::write(case));
    text
}

/// Runs one seed of one scenario (twice, for determinism), shrinking and
/// writing the trace when it fails.
pub fn run_seed(scenario: Scenario, seed: u64, trace_dir: Option<PathBuf>) -> Report {
    run_battery(&BatteryOptions {
        scenarios: vec![scenario],
        seeds: 1,
        first_seed: seed,
        threads: 1,
        shrink_budget: 300,
        trace_dir,
    })
}

/// A replayed trace: its verdict and transcript.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The case the trace holds.
    pub case: Case,
    /// The run, with its transcript.
    pub outcome: RunOutcome,
}

impl Replay {
    /// The transcript, then the verdict, stats and digest.
    pub fn text(&self) -> String {
        let mut out = self.outcome.transcript.join("\n");
        let verdict = match &self.outcome.violation {
            Some(v) => format!("verdict: {v}"),
            None => "verdict: ok".to_owned(),
        };
        let s = &self.outcome.stats;
        out.push_str(&format!(
            "\n{verdict}\nstats: {} leases created, {} ready, {} failed, {} restarts, end t={}ms\ndigest: {}\n",
            s.leases_created, s.nodes_ready, s.nodes_failed, s.restarts, s.end_ms, self.outcome.digest
        ));
        out
    }
}

/// Reads a trace file.
pub fn read_trace(path: &Path) -> Result<Case, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    trace::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Replays a trace (its explicit plan, not its seed) with a transcript.
pub fn replay(path: &Path) -> Result<Replay, String> {
    let case = read_trace(path)?;
    let outcome = Real::default().run(&case, RunOptions { transcript: true });
    Ok(Replay { case, outcome })
}

/// Shrinks a failing trace; writes `<name>.shrunk.trace` next to it.
pub fn shrink(path: &Path) -> Result<(Case, PathBuf), String> {
    let case = read_trace(path)?;
    let backend = Real::default();
    let (_, failure) = battery::check_case(&backend, &case);
    let failure = failure.ok_or_else(|| format!("{}: the trace does not fail", path.display()))?;
    let shrunk = battery::shrink_failure(&backend, &case, &failure, 2_000);
    let out = path.with_extension("shrunk.trace");
    let reproduce = battery::reproduce_line(&case.scenario, case.seed);
    std::fs::write(&out, trace_text(&shrunk, &failure, &reproduce))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok((shrunk, out))
}

pub use conformance::bench::Bench;

/// Runs `seeds` seeds of the standard scenario (3 nodes, 10 simulated
/// minutes, faults on), each once, on `threads` threads (0: all cores).
pub fn bench(seeds: u64, threads_requested: usize) -> Bench {
    conformance::bench::bench(
        &Real::default(),
        Scenario::Standard,
        seeds,
        threads(threads_requested),
    )
}

/// Runs `seeds` run-phase cases (the three run scenarios in turn), each
/// once, on this thread: (cases, seconds, violations).
pub fn bench_run(seeds: u64) -> (u64, f64, u64) {
    use conformance::run::{RunScenario, generate_run};
    let started = std::time::Instant::now();
    let mut violations = 0;
    for seed in 0..seeds {
        let scenario = RunScenario::ALL[(seed % RunScenario::ALL.len() as u64) as usize];
        let case = generate_run(scenario, seed);
        let outcome =
            crate::run_world::battery::run_case(&case, conformance::RunOptions::default());
        violations += u64::from(outcome.violation.is_some());
    }
    (seeds, started.elapsed().as_secs_f64(), violations)
}
