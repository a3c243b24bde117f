//! The run-phase battery (tier 1): every run scenario, many seeds, each run
//! twice. A failure is shrunk, its trace written to `traces/run/`, and its
//! one reproduce line printed. Every fault of the run alphabet must be hit
//! in at least 95% of the profiles that enable it.

use conformance::run::{RunScenario, generate_run, write_run};
use sim::run_world::battery::{self, run_battery};

const SEEDS: u64 = 250;

#[test]
fn run_battery_passes_and_hits_every_fault() {
    let dir = battery::trace_dir();
    let report = run_battery(&RunScenario::ALL, 0..SEEDS, 200, Some(&dir));
    println!("{}", report.summary());
    let labels: Vec<&str> = report.coverage.labels.iter().map(String::as_str).collect();
    println!("labels: {}", labels.join(" "));
    assert_eq!(report.cases, SEEDS * RunScenario::ALL.len() as u64);
    assert!(
        report.failures.is_empty(),
        "{} failures (see above)",
        report.failures.len()
    );
    // Every fault is enabled often enough to measure and hit in >= 95%
    // of the profiles that enable it.
    let low = report.below(950);
    assert!(
        low.is_empty(),
        "faults below 95% (name, enabled, hit): {low:?}"
    );
    for (name, (on, _)) in &report.hits {
        assert!(*on >= 10, "{name} enabled in only {on} profiles");
    }
    // The machines were driven through their phases and the requests
    // through every ending.
    for label in [
        "run:AwaitingReadiness",
        "run:Acknowledging",
        "run:LoadingWeights",
        "run:AwaitingStageReady",
        "run:OpeningPrompt",
        "run:Serving/active",
        "run:TearingDown",
        "run:Stopped",
        "run:Failed/NodeDead",
        "run:Failed/StageFault",
        "run:Failed/WeightLoadTimeout",
        // Repairs: a replacement told its stage, the pipeline rebuilt, and
        // a request resumed from the middle of its stream.
        "run:Repairing",
        "run:enlist/first",
        "run:enlist/replacement",
        // ... and that replacement came from the composite: the dead
        // node's lease destroyed, a second one created for it.
        "composite:lease-destroyed",
        "composite:replaced",
        "run:resumed/mid-request",
        // A worker crash while serving, repaired on its own node with a
        // new worker.
        "agent:respawned",
        "stage:AwaitingReady",
        "stage:Ready",
        "stage:Busy",
        // Prompts travel in chunks: the rings held one step, and more.
        "stage:Busy/queued1",
        "stage:Busy/queued2",
        "stage:Faulted",
        "stage:Stopping",
        "stage:Stopped",
        "agent:Running",
        "agent:Gone",
        "request:Done/Eos",
        "request:Done/MaxTokens",
        "request:Done/Context",
        "request:Timeout",
        "request:RunFailed",
    ] {
        assert!(labels.contains(&label), "never hit: {label}");
    }
    assert!(
        report.replacements > SEEDS / 2,
        "too few nodes replaced: {}",
        report.replacements
    );
    assert!(
        report.done > SEEDS,
        "too few requests served: {}",
        report.done
    );
}

#[test]
fn a_run_trace_replays_the_case_it_holds() {
    let case = generate_run(RunScenario::Fatal, 11);
    let dir = std::env::temp_dir().join(format!("drover-run-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("case.trace");
    std::fs::write(&path, write_run(&case)).expect("written");
    let (back, replayed) = battery::replay_run(&path).expect("replays");
    let direct = battery::run_case(&case, conformance::RunOptions::default());
    assert_eq!(back.profile, case.profile);
    assert_eq!(replayed.digest, direct.digest);
    assert!(!replayed.transcript.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dead_node_is_replaced_by_the_composite_on_a_new_lease() {
    // Seed 0 of `run-repair`: an operator's kill of stage 2's agent, which
    // membership finds Dead; the composite fails the node, destroys its
    // lease and provisions another, whose agent rejoins the run.
    let case = generate_run(RunScenario::Repair, 0);
    let options = conformance::RunOptions { transcript: true };
    let outcome = battery::run_case(&case, options);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    let starts: Vec<(&str, &str)> = outcome
        .transcript
        .iter()
        .filter_map(|line| {
            let rest = line.split_once("world: ")?.1;
            let (agent, lease) = rest.split_once(" starts on ")?;
            Some((agent, lease))
        })
        .collect();
    let stages = case.profile.stages as usize;
    assert!(
        starts.len() > stages,
        "a replacement agent started: {starts:?}"
    );
    let mut leases: Vec<&str> = starts.iter().map(|(_, lease)| *lease).collect();
    leases.sort_unstable();
    leases.dedup();
    assert_eq!(leases.len(), starts.len(), "every agent on its own lease");
    for label in [
        "composite:lease-destroyed",
        "composite:replaced",
        "run:enlist/replacement",
    ] {
        assert!(
            outcome.coverage.labels.contains(label),
            "never hit: {label}"
        );
    }
    assert_eq!(outcome.stats.leases_created as usize, starts.len());
}

#[test]
fn requests_still_queued_when_the_fault_phase_ends_are_served_before_the_stop() {
    // Seed 3958 of `run-repair`: three repairs and a slow stage leave a
    // request queued when the fault phase ends. The operator's stop waits
    // for it (liveness: every queued request completes), where it used to
    // fault it with `Shutdown` (RW10).
    let case = generate_run(RunScenario::Repair, 3958);
    let options = conformance::RunOptions { transcript: true };
    let outcome = battery::run_case(&case, options);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    let waited = outcome
        .transcript
        .iter()
        .position(|l| l.contains("the fault phase ends; requests still wait"));
    let stopped = outcome
        .transcript
        .iter()
        .position(|l| l.contains("every client has its answer; the operator stops"));
    assert!(
        waited.is_some() && stopped > waited,
        "the stop came after the last answer"
    );
}
