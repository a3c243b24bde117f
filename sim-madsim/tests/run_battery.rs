//! The run phase under madsim (simulator build only):
//! `CARGO_TARGET_DIR=target/madsim RUSTFLAGS="--cfg madsim" cargo test --release -p sim-madsim --test run_battery`.
//!
//! `MADSIM_BATTERY_SEEDS` sets the seeds (default 200).

#![cfg(madsim)]

use sim_madsim::run;

fn seeds() -> u64 {
    std::env::var("MADSIM_BATTERY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// Every phase the run passes through, the repairs and resumes the
/// faults must cause, and a node the composite replaced.
const LABELS: [&str; 18] = [
    "agent:respawned",
    "run:AwaitingReadiness",
    "run:Acknowledging",
    "run:LoadingWeights",
    "run:AwaitingStageReady",
    "run:OpeningPrompt",
    "run:Serving/active",
    "run:Repairing",
    "run:TearingDown",
    "run:Stopped",
    "run:Failed/NodeDead",
    "run:enlist/first",
    "run:enlist/replacement",
    "run:resumed/mid-request",
    "outcome:Stopped",
    "request:Done/MaxTokens",
    "stage:Busy",
    "composite:replaced",
];

#[test]
fn the_pipeline_scenario_passes_in_both_runs_of_each_seed_and_reaches_every_fault() {
    let report = run::battery(0..seeds(), sim_madsim::backend::default_jobs());
    print!("{}", report.summary());
    let failed: Vec<u64> = report.failures().map(|v| v.seed).collect();
    assert!(
        failed.is_empty(),
        "failing seeds (each line above reproduces one): {failed:?}"
    );
    let hits = report.hits();
    for fault in run::SUPPORTED.iter().map(|f| f.name()).chain(["partition"]) {
        let (on, hit) = hits.get(fault).copied().unwrap_or((0, 0));
        assert!(on > 0, "no profile enables {fault}");
        assert!(
            hit * 100 >= on * 95,
            "{fault} hit in {hit} of {on} profiles"
        );
    }
    let coverage = report.coverage();
    for label in LABELS {
        assert!(coverage.labels.contains(label), "never reached: {label}");
    }
    let restarts: u32 = report
        .verdicts
        .iter()
        .map(|v| v.outcome.stats.restarts)
        .sum();
    assert!(restarts > 0, "no orchestrator restarted");
}

#[test]
fn a_pipeline_seed_runs_the_same_alone_as_in_a_batch() {
    let report = run::battery(0..12, 2);
    for verdict in &report.verdicts {
        let alone = run::run_case(
            &run::generate(verdict.seed),
            conformance::RunOptions::default(),
        );
        assert!(alone.stats.steps > 0, "seed {} ran", verdict.seed);
        assert_eq!(
            alone.step_digests, verdict.outcome.step_digests,
            "seed {}: alone and in a batch differ",
            verdict.seed
        );
    }
}
