//! Liveness after handoff (membership in the real runtime): a node whose
//! agent is killed is Dead within the bound, `drover status` says so and
//! never shows it ready, and the run that lost it ends with exit code 1 and
//! every lease destroyed. Real processes, real SSH, real iroh.

mod up_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);
/// Dead after 5 s of silence; the bound leaves room for a loaded machine.
const DEAD: Duration = Duration::from_secs(30);

#[test]
fn a_killed_agent_is_dead_within_the_bound_never_ready_and_fails_the_run() {
    let dir = scratch("liveness");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(3));
    let mut up = Up::start(&state, &plan);
    up.wait_line(SETTLE, |l| l["event"] == "settled");
    let agents = processes(&state, "drover-agent");
    assert_eq!(agents.len(), 3, "{agents:?}");
    // Every node is Alive and heartbeating.
    let alive = status(&state);
    for i in 0..3 {
        let row = node(&alive, &format!("workers-{i}"));
        assert_eq!(row["liveness"], "Alive", "{alive}");
        assert_eq!(row["ready"], true, "{alive}");
    }
    let pids = node_pids(&state);
    let (victim, _) = agents[0];
    let killed = Command::new("kill")
        .arg("-9")
        .arg(victim.to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let dead = up.wait_line(DEAD, |l| {
        l["event"] == "liveness" && l["liveness"] == "Dead"
    });
    let id = dead["id"].as_str().unwrap().to_owned();
    let seen = status(&state);
    let row = node(&seen, &id);
    assert_eq!(row["liveness"], "Dead", "{seen}");
    assert_eq!(
        row["ready"], false,
        "a Dead node is never shown ready: {seen}"
    );
    assert!(row["heartbeat_age_ms"].as_u64().unwrap() >= 4000, "{seen}");
    let others: Vec<_> = (0..3)
        .map(|i| format!("workers-{i}"))
        .filter(|n| *n != id)
        .collect();
    for other in &others {
        assert_eq!(node(&seen, other)["liveness"], "Alive", "{seen}");
    }
    // Policy `none`: the node stays failed; its lease is destroyed at
    // teardown, and the run reports the failure.
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    let after = status(&state);
    assert_all_destroyed(&after, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_bounded_replacement_a_killed_node_is_replaced_and_ready_again() {
    let dir = scratch("liveness-bounded");
    let state = dir.join("state");
    let plan = bounded(local_plan(2));
    let plan = write_plan(&dir, &plan);
    let mut up = Up::start(&state, &plan);
    up.wait_line(SETTLE, |l| l["event"] == "settled");
    let before = status(&state);
    let old_lease = node(&before, "workers-0")["lease"]
        .as_str()
        .unwrap()
        .to_owned();
    // Kill workers-0's agent and its node process.
    let node_dir = processes(&state, "drover-agent")
        .into_iter()
        .find(|(_, cwd)| cwd.join("agent.log").is_file() && lease_dir_is(cwd, &state, &old_lease))
        .expect("workers-0's agent");
    let node_pids: Vec<u32> = processes(&state, "drover")
        .into_iter()
        .filter(|(_, cwd)| *cwd == node_dir.1)
        .map(|(pid, _)| pid)
        .chain([node_dir.0])
        .collect();
    for pid in &node_pids {
        Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status()
            .unwrap();
    }
    up.wait_line(DEAD, |l| {
        l["event"] == "liveness" && l["id"] == "workers-0" && l["liveness"] == "Dead"
    });
    // Failed, then a new lease, bootstrapped, and Dormant again.
    up.wait_line(SETTLE, |l| l["id"] == "workers-0" && l["stage"] == "Failed");
    let back = up.wait_line(SETTLE, |l| {
        l["id"] == "workers-0" && l["stage"] == "Dormant"
    });
    let after = status(&state);
    let row = node(&after, "workers-0");
    assert_eq!(row["ready"], true, "{after}");
    assert_ne!(row["lease"].as_str().unwrap(), old_lease, "{back}");
    assert_eq!(node(&after, "workers-1")["ready"], true, "{after}");
    up.type_stop();
    let code = up.wait_exit(EXIT);
    // The replaced lease was destroyed exactly once: at the replacement,
    // not again at teardown.
    let destroying: Vec<&String> = up
        .seen
        .iter()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .is_ok_and(|v| v["stage"] == "Destroying" && v["lease"] == old_lease.as_str())
        })
        .collect();
    assert_eq!(destroying.len(), 1, "{}", up.seen.join("\n"));
    // A node failed during the run: exit 1, as for any node failure.
    assert_eq!(code, 1, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether the node folder `cwd` is the one of `lease` (`local:N` runs in
/// `<state>/nodes/N`).
fn lease_dir_is(cwd: &Path, state: &Path, lease: &str) -> bool {
    let n = lease.trim_start_matches("local:");
    std::fs::canonicalize(state.join("nodes").join(n)).is_ok_and(|d| d == cwd)
}
