//! The throughput bench every world runs the same way: seeds of one
//! scenario, each once, spread over threads; violations are counted, not
//! stopped for (the battery is what judges seeds).

use crate::backend::{Backend, RunOptions};
use crate::generate::{Scenario, generate};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a bench measured.
#[derive(Clone, Copy, Debug)]
pub struct Bench {
    /// Seeds run (each once).
    pub seeds: u64,
    /// Threads used.
    pub threads: usize,
    /// Wall-clock seconds.
    pub elapsed_s: f64,
    /// Orchestrator steps, all seeds.
    pub steps: u64,
    /// Seeds that broke an invariant.
    pub violations: u64,
}

impl Bench {
    /// Seeds per second per core, the unit both tiers report.
    pub fn seeds_per_second_per_core(&self) -> f64 {
        self.seeds as f64 / self.elapsed_s.max(1e-9) / self.threads.max(1) as f64
    }
}

/// Runs seeds `0..seeds` of `scenario` on `backend`, each once with the
/// battery's options, on `threads` threads (at least one).
pub fn bench<B: Backend + Sync>(
    backend: &B,
    scenario: Scenario,
    seeds: u64,
    threads: usize,
) -> Bench {
    let threads = threads.max(1);
    let next = AtomicU64::new(0);
    let steps = AtomicU64::new(0);
    let violations = AtomicU64::new(0);
    // Wall time is what a bench measures; nothing here feeds a machine.
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds {
                        return;
                    }
                    let case = generate(scenario, seed);
                    let outcome = backend.run(&case, RunOptions::default());
                    steps.fetch_add(outcome.stats.steps, Ordering::Relaxed);
                    violations.fetch_add(u64::from(outcome.violation.is_some()), Ordering::Relaxed);
                }
            });
        }
    });
    Bench {
        seeds,
        threads,
        elapsed_s: started.elapsed().as_secs_f64(),
        steps: steps.into_inner(),
        violations: violations.into_inner(),
    }
}
