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

/// Seed 0 of `run-repair` (a kill of a stage's agent, which the composite
/// replaces) with `items` as its only replacement faults, run with its
/// transcript.
fn repair_with(items: &[conformance::run::RunItem]) -> conformance::RunOutcome {
    let mut case = generate_run(RunScenario::Repair, 0);
    case.items.retain(|i| !i.fault.is_replacement());
    case.items.extend_from_slice(items);
    let options = conformance::RunOptions { transcript: true };
    battery::run_case(&case, options)
}

/// The text of the transcript's lines from the first holding `from` on.
fn after<'a>(outcome: &'a conformance::RunOutcome, from: &str) -> Vec<&'a str> {
    let lines = &outcome.transcript;
    let at = lines.iter().position(|l| l.contains(from));
    let at = at.unwrap_or_else(|| panic!("no line holds {from:?}"));
    lines[at..].iter().map(String::as_str).collect()
}

/// The nonce of the first `CreateLease` for `node` among `lines`.
fn create_nonce<'a>(lines: &[&'a str], node: &str) -> &'a str {
    let create = format!(" {node} nonce-");
    let line = lines
        .iter()
        .find(|l| l.contains("CreateLease") && l.contains(&create));
    let line = line.unwrap_or_else(|| panic!("no create for {node}"));
    let nonce = line.split(" nonce-").nth(1).expect("a nonce");
    nonce.split(' ').next().expect("its digits")
}

#[test]
fn a_replacement_whose_create_fails_is_still_made() {
    use conformance::run::{RunFault, RunItem};
    // Seed 0 kills stage 2's agent (node w-2); its replacement's first
    // create fails in each of the three ways a provider fails.
    for (arg, answer) in [
        (0, "err Transient"),
        (1, "err Ambiguous"),
        (2, "err Rejected"),
    ] {
        let fault = RunFault::ReplacementCreateFails;
        let outcome = repair_with(&[RunItem {
            fault,
            target: 0,
            arg,
        }]);
        assert!(
            outcome.violation.is_none(),
            "{arg}: {:?}",
            outcome.violation
        );
        let from_fault = after(&outcome, "fault: replacement-create-fails");
        let failed_create = create_nonce(&after(&outcome, "NodeChanged w-2 Failed"), "w-2");
        let answered = after(&outcome, answer);
        let next = &answered[1..];
        match arg {
            // Nothing was created: the same intent is sent again.
            0 => assert_eq!(create_nonce(next, "w-2"), failed_create),
            // The lease exists: the node finds it by listing, creates no
            // other, and its agent starts on it.
            1 => {
                assert!(next[0].contains("-> ListLeases"), "{}", next[0]);
                assert!(!next.iter().any(|l| l.contains("CreateLease")));
                assert!(next.iter().any(|l| l.contains("agent-2-r1 starts on")));
            }
            // Refused: the node fails, and the composite replaces it
            // again with a new intent.
            _ => {
                let failed = "NodeFailed w-2 (lease create failed: no offer fits)";
                let from_failure = after(&outcome, failed);
                assert_ne!(create_nonce(&from_failure, "w-2"), failed_create);
            }
        }
        assert!(
            from_fault
                .iter()
                .any(|l| l.contains("agent-2-r1 starts on")),
            "{arg}: the replacement's agent started"
        );
    }
}

#[test]
fn a_replacement_whose_boot_fails_is_replaced_on_another_lease() {
    use conformance::run::{RunFault, RunItem};
    let fault = RunFault::ReplacementBootFails;
    let outcome = repair_with(&[RunItem {
        fault,
        target: 0,
        arg: 0,
    }]);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    // The replacement lease: the one created after the kill.
    let asked = after(&outcome, "w-2 asks for a new lease");
    let granted = asked
        .iter()
        .find(|l| l.contains("<- LeaseCreated"))
        .expect("granted");
    let lease = granted
        .split(" ok ")
        .nth(1)
        .and_then(|r| r.split(' ').next());
    let lease = lease.expect("a lease id");
    // Its start command fails: the node fails with the session's reason,
    // that lease is destroyed, and another one, on another host, carries
    // the replacement's agent.
    let failed = after(&outcome, "start command exited with 1");
    assert!(failed[0].contains("NodeFailed w-2"), "{}", failed[0]);
    let destroyed = format!("provider: {lease} destroyed");
    assert!(
        failed.iter().any(|l| l.contains(&destroyed)),
        "{lease} destroyed"
    );
    let starts: Vec<&&str> = failed
        .iter()
        .filter(|l| l.contains(" starts on "))
        .collect();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert!(starts[0].contains("agent-2-r1") && !starts[0].ends_with(lease));
    let host = format!("\"host-{}\"", lease.trim_start_matches("vastai:"));
    let recreate = failed
        .iter()
        .find(|l| l.contains("CreateLease") && l.contains(" w-2 "));
    assert!(
        recreate.is_some_and(|l| l.contains(&host)),
        "{host} excluded"
    );
}

#[test]
fn a_restart_while_repairing_finds_the_dead_agent_and_repairs_the_new_startup() {
    // Seed 5 of `run-restart`: the operator kills stage 0's agent; `drover
    // up` crashes while the run repairs and restarts from its journal. The
    // journal says w-0 is ready with agent-0, which never rejoins: the
    // restored composite expects it (Suspect), finds it Dead, fails and
    // replaces the node, and the new run repairs its startup instead of
    // failing.
    let case = generate_run(RunScenario::Restart, 5);
    let options = conformance::RunOptions { transcript: true };
    let outcome = battery::run_case(&case, options);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    let restarted = after(&outcome, "the orchestrator restarts from its journal");
    let expected =
        "Liveness { node: LogicalNodeId(\"w-0\"), agent: AgentId(\"agent-0\"), liveness: Suspect }";
    let dead =
        "Liveness { node: LogicalNodeId(\"w-0\"), agent: AgentId(\"agent-0\"), liveness: Dead }";
    let in_order = [
        expected,
        dead,
        "NodeFailed w-0 (its agent stopped heartbeating (membership: Dead))",
        "Repairing { cause: NodeDead { node: LogicalNodeId(\"w-0\"), during: Readiness }, repair: 1, request: None }",
        "agent-0-r1 starts on",
        "Enlist { node: LogicalNodeId(\"w-0\"), agent: AgentId(\"agent-0-r1\"), stage: 0 }",
        "Repaired { repair: 1, resumed: None }",
        "Finished(Ok(()))",
    ];
    let mut at = 0;
    for needle in in_order {
        let found = restarted[at..].iter().position(|l| l.contains(needle));
        at += found.unwrap_or_else(|| panic!("after the restart, in order: {needle}"));
    }
    // The dead agent is never told its stage by the restarted run.
    let told = "Enlist { node: LogicalNodeId(\"w-0\"), agent: AgentId(\"agent-0\")";
    assert!(!restarted.iter().any(|l| l.contains(told)));
}
