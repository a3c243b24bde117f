//! The orchestrator itself crashes while serving: `drover up` is killed
//! with SIGKILL while a request streams. Its client sees the connection
//! close; a restarted `drover up` on the same state dir adopts the live
//! nodes, provisions the stages again and serves the same text; nothing is
//! created twice and nothing is left when it stops. A node that dies while
//! `up` is down is found Dead by the restarted `up` and replaced. Real
//! processes, real SSH, real iroh; every wait is on an event with a bound.

mod up_support;

use std::time::Duration;
use up_support::*;

const SERVE: Duration = Duration::from_secs(120);
const EXIT: Duration = Duration::from_secs(90);
const PROMPT: &str = "Once upon a time";

/// Leases the journal says were created.
fn leases_known(state: &std::path::Path) -> usize {
    let journal = runtime_real::journal::Journal::read(state).unwrap();
    journal
        .records
        .iter()
        .filter(|r| matches!(r, core_fsm::port::JournalRecord::LeaseKnown { .. }))
        .count()
}

#[test]
fn a_restarted_up_adopts_the_nodes_and_serves_again_after_a_crash_while_serving() {
    let dir = scratch("pipe-crash");
    let state = dir.join("state");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, pipeline_plan_text(3, "true", "")).unwrap();
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, |l| l["event"] == "serving");
    let pids = node_pids(&state);
    assert_eq!(pids.len(), 3, "{pids:?}");

    // A request streams; at its first bytes the orchestrator is killed.
    let addr = runtime_real::prompt::read_addr(&state).unwrap();
    let client = streaming_prompt(&state, PROMPT, 64);
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    let lost = client.finish(EXIT);
    // The crashed process's request is lost: its client says so.
    assert_eq!(lost.status.code(), Some(1), "the lost request's client");
    let said = String::from_utf8_lossy(&lost.stderr).to_string();
    assert_eq!(
        said,
        format!(
            "drover: prompt failed: the prompt service at {addr} closed the connection \
             before request 1 ended\n"
        ),
        "the client names the failure"
    );
    // The nodes outlive it.
    assert_eq!(running(&pids), pids, "the nodes died with the orchestrator");

    // A restarted `up` adopts them and serves again.
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, |l| l["event"] == "serving");
    assert_served(&state, PROMPT, 64);
    assert_eq!(leases_known(&state), 3, "nothing is created twice");
    assert_eq!(node_pids(&state), pids, "the same nodes");
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_restarted_up_replaces_a_node_that_died_while_it_was_down() {
    let Victim {
        dir,
        state,
        plan,
        mut up,
        lease: old_lease,
        pids: victims,
    } = serving_with_victim("pipe-crash-dead", SERVE);

    // `up` is killed, then, while it is down, workers-1's node dies.
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    kill_9(&victims);

    // The restarted `up` expects workers-1's agent, which never rejoins:
    // the node is found Dead and replaced, and the new run's barrier is
    // repaired with the replacement's agent before the service opens.
    let mut up = Up::start(&state, &plan);
    let repairing = up.wait_line(SERVE, |l| l["event"] == "repairing");
    let cause = repairing["cause"].as_str().unwrap_or_default();
    assert!(cause.contains("workers-1"), "{repairing}");
    assert!(repairing["request"].is_null(), "{repairing}");
    up.wait_line(SERVE, |l| l["event"] == "serving");
    assert_served(&state, PROMPT, 64);
    let after = status(&state);
    let row = node(&after, "workers-1");
    assert_ne!(row["lease"].as_str().unwrap(), old_lease, "{row}");
    assert_eq!(row["ready"], true, "{row}");
    assert_eq!(leases_known(&state), 4, "one replacement");

    up.type_stop();
    // A node failed during the run: exit 1, as for any node failure.
    assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));
    let left = running(&node_pids(&state));
    assert_eq!(left, Vec::<u32>::new(), "node processes left");
    std::fs::remove_dir_all(&dir).unwrap();
}
