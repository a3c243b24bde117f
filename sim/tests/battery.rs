//! The default battery: every scenario, many seeds, each run twice. A
//! failure prints the one command that reproduces it, is shrunk, and its
//! trace is written to `traces/`.
//!
//! Bugs the battery has found in core-fsm machines and that are not fixed
//! yet are listed in `KNOWN`, each with its committed trace (which replays
//! as a snapshot in `replay.rs`, so a fix shows up there). Any other failure
//! fails this test.

use conformance::Scenario;
use sim::cli::{self, BatteryOptions};

/// (invariant, message fragment, the known bug and its trace). Empty: every
/// bug the battery found so far is fixed and replays as a regression trace.
const KNOWN: &[(&str, &str, &str)] = &[];

fn known(failure: &conformance::battery::Failure) -> Option<&'static str> {
    let text = failure.to_string();
    KNOWN
        .iter()
        .find(|(id, fragment, _)| failure.id() == *id && text.contains(fragment))
        .map(|(_, _, bug)| *bug)
}

#[test]
fn battery_of_every_scenario_passes() {
    let options = BatteryOptions {
        scenarios: vec![
            Scenario::SmallPool,
            Scenario::Mvp,
            Scenario::BadHosts,
            Scenario::CrashStorm,
            Scenario::Standard,
        ],
        seeds: 500,
        first_seed: 0,
        threads: 0,
        // Known bugs are not shrunk again on every run; new ones are.
        shrink_budget: 0,
        trace_dir: None,
    };
    let report = cli::run_battery(&options);
    println!("{}", report.coverage.report());
    println!("{}", report.summary());
    assert_eq!(report.cases, 2500);
    let mut unknown = Vec::new();
    let mut known_counts = std::collections::BTreeMap::new();
    for f in &report.failures {
        match known(&f.failure) {
            Some(bug) => *known_counts.entry(bug).or_insert(0u32) += 1,
            None => unknown.push(f),
        }
    }
    for (bug, count) in &known_counts {
        println!("known bug {bug}: {count} seeds");
    }
    for f in &unknown {
        // Shrink and write the trace of every new failure.
        let again = cli::run_seed(f.scenario, f.seed, Some(cli::default_trace_dir()));
        for g in &again.failures {
            eprintln!(
                "NEW FAILURE {}\n  reproduce: {}\n  trace: {:?}",
                g.failure, g.reproduce, g.trace
            );
        }
    }
    assert!(
        unknown.is_empty(),
        "{} new failures (see above)",
        unknown.len()
    );
    // The battery must actually exercise the machines: every node stage and
    // every named fault at least once.
    // `New` is left within the step that creates the node, so no snapshot
    // after a step can see it.
    let missing_stages = report.coverage.missing_stages();
    assert!(
        missing_stages == [core_fsm::node::Lifecycle::New],
        "stages never hit: {missing_stages:?}"
    );
    let missing_faults = report.coverage.missing_faults();
    assert!(
        missing_faults.is_empty(),
        "faults never injected: {missing_faults:?}"
    );
    assert!(
        report.nodes_ready > 500,
        "too few nodes became ready: {}",
        report.nodes_ready
    );
    assert!(
        report.restarts > 100,
        "too few restarts: {}",
        report.restarts
    );
}
