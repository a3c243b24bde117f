//! The madsim world as a conformance [`Backend`], and the battery runner:
//! every seed runs twice on a fresh runtime each, and the two digests of
//! every transition must agree step by step.

use crate::chaos::{self, Level};
use conformance::battery::{Failure, check_case};
use conformance::{Backend, Case, RunOptions, RunOutcome, Scenario, System};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Runs cases in the madsim world against the system `S`.
pub struct TierTwo<S> {
    level: Level,
    system: PhantomData<fn() -> S>,
}

impl<S> TierTwo<S> {
    /// A backend whose tier-2 faults are at `level`.
    pub fn new(level: Level) -> TierTwo<S> {
        TierTwo {
            level,
            system: PhantomData,
        }
    }
}

impl<S> Default for TierTwo<S> {
    fn default() -> Self {
        TierTwo::new(Level::On)
    }
}

impl<S: System + 'static> Backend for TierTwo<S> {
    fn name(&self) -> &'static str {
        "madsim"
    }

    fn run(&self, case: &Case, options: RunOptions) -> RunOutcome {
        let chaos = chaos::draw(case, self.level);
        // madsim keeps its context in thread locals: each run gets a fresh
        // thread, so nothing of an earlier run (or of the caller) leaks in.
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name(format!("madsim-{}", case.seed))
                .spawn_scoped(scope, || crate::world::run_case::<S>(case, chaos, options))
                .expect("a thread can be spawned")
                .join()
                .unwrap_or_else(|_| panic!("the madsim world of seed {} panicked", case.seed))
        })
    }
}

/// The backend the battery runs: the real orchestrator composite.
pub type Real = TierTwo<sim::system::Composite>;

/// One seed's verdict.
#[derive(Debug)]
pub struct Verdict {
    /// The seed.
    pub seed: u64,
    /// The first run's outcome.
    pub outcome: RunOutcome,
    /// Why it failed, if it did.
    pub failure: Option<Failure>,
}

/// A battery's result.
#[derive(Debug)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// Every seed's verdict, in seed order.
    pub verdicts: Vec<Verdict>,
    /// Wall-clock time of the whole battery.
    pub elapsed: Duration,
}

impl Report {
    /// The failed verdicts.
    pub fn failures(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.failure.is_some())
    }

    /// Seeds per second (each seed ran twice).
    pub fn seeds_per_second(&self) -> f64 {
        self.verdicts.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// One line per failure with the command that reproduces it, and a
    /// summary line.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for v in self.failures() {
            let failure = v
                .failure
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            out.push_str(&format!(
                "FAIL {} seed {}: {failure}\n  reproduce: {}\n",
                self.scenario.name(),
                v.seed,
                crate::reproduce_line(self.scenario.name(), v.seed)
            ));
        }
        let mut coverage = conformance::coverage::Coverage::default();
        let (mut restarts, mut ready, mut failed_nodes, mut steps) = (0, 0, 0, 0);
        for v in &self.verdicts {
            coverage.merge(&v.outcome.coverage);
            restarts += v.outcome.stats.restarts;
            ready += v.outcome.stats.nodes_ready;
            failed_nodes += v.outcome.stats.nodes_failed;
            steps += v.outcome.stats.steps;
        }
        let tier_two: Vec<&str> = ["partition", "packet-loss", "machine-reboot"]
            .into_iter()
            .filter(|n| coverage.faults.contains(n))
            .collect();
        let kit = coverage.faults.len() - tier_two.len();
        out.push_str(&format!(
            "  {steps} steps, {ready} ready / {failed_nodes} failed nodes, {restarts} restarts; kit faults injected: {kit} of {}, tier-2: {}\n",
            conformance::fault::ALL.len(),
            tier_two.join(" ")
        ));
        let missing = coverage.missing_faults();
        if !missing.is_empty() {
            out.push_str(&format!("  never injected: {}\n", missing.join(" ")));
        }
        let failed = self.failures().count();
        out.push_str(&format!(
            "madsim {}: {} passed, {failed} failed ({} seeds, each run twice, in {:.1}s, {:.1} seeds/s)\n",
            self.scenario.name(),
            self.verdicts.len() - failed,
            self.verdicts.len(),
            self.elapsed.as_secs_f64(),
            self.seeds_per_second()
        ));
        out
    }
}

/// Runs `seeds` of `scenario` on `jobs` threads; each seed runs twice and
/// is judged by the kit's battery rule (oracle, liveness, digests).
pub fn battery(
    backend: &dyn Backend,
    scenario: Scenario,
    seeds: impl IntoIterator<Item = u64>,
    jobs: usize,
) -> Report {
    let started = Instant::now();
    let verdicts = on_threads(seeds, jobs, |seed| {
        let case = conformance::generate(scenario, seed);
        let (outcome, failure) = check_case(backend, &case);
        Verdict {
            seed,
            outcome,
            failure,
        }
    });
    Report {
        scenario,
        verdicts,
        elapsed: started.elapsed(),
    }
}

/// Runs `each` for every seed on `jobs` threads (each takes the next seed
/// as it finishes one); the results come back in seed order.
pub fn on_threads<T: Send>(
    seeds: impl IntoIterator<Item = u64>,
    jobs: usize,
    each: impl Fn(u64) -> T + Sync,
) -> Vec<T> {
    let seeds: Vec<u64> = seeds.into_iter().collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(u64, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&seed) = seeds.get(i) else { break };
                        done.push((seed, each(seed)));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a battery worker panicked"))
            .collect()
    });
    done.sort_by_key(|(seed, _)| *seed);
    done.into_iter().map(|(_, t)| t).collect()
}

/// Worker threads for a battery: the machine's cores.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub use conformance::bench::Bench;

/// One line for people about a bench.
pub fn bench_line(bench: &Bench) -> String {
    format!(
        "madsim bench: {} seeds of standard (each once) on {} thread(s) in {:.2}s: {:.0} seeds/s per core, {:.0} steps/s, {} violations",
        bench.seeds,
        bench.threads,
        bench.elapsed_s,
        bench.seeds_per_second_per_core(),
        bench.steps as f64 / bench.elapsed_s.max(1e-9),
        bench.violations
    )
}

/// Runs `seeds` seeds of the standard scenario (3 nodes, 10 simulated
/// minutes, faults on), each once, on `threads` threads, like tier 1's bench.
pub fn bench(seeds: u64, threads: usize) -> Bench {
    conformance::bench::bench(&Real::default(), Scenario::Standard, seeds, threads)
}
