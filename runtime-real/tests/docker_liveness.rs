//! `docker kill` of a container after handoff on the real Docker engine:
//! its agent falls silent, membership holds it Dead, the node fails, and
//! with `bounded` replacement a new container takes its place, ready.

mod docker_support;
mod up_support;

use docker_support::*;
use std::process::Command;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(180);
const DEAD: Duration = Duration::from_secs(35);
const EXIT: Duration = Duration::from_secs(90);

#[test]
fn a_killed_container_is_dead_then_replaced_by_a_new_ready_container() {
    let dir = scratch("docker-liveness");
    let state = dir.join("state");
    let _guard = Guard {
        label: state_label(&state),
    };
    let text = docker_plan(2, "", AGENT_START).replacen(
        "\n[[group]]",
        "\n[replacement]\npolicy = \"bounded\"\nattempts_max = 3\nbackoff_base = \"100ms\"\nbackoff_max = \"1s\"\nquarantine_after_failures = 10\n\n[[group]]",
        1,
    );
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, text).unwrap();
    let mut up = Up::start(&state, &plan);
    up.wait_line(SETTLE, |l| l["event"] == "settled");
    let before = containers_of(&state);
    assert_eq!(before.len(), 2, "{before:?}");
    let victim = before
        .iter()
        .find(|(name, _)| name.contains("workers-0"))
        .expect("workers-0's container")
        .0
        .trim_start_matches('/')
        .to_owned();
    let killed = Command::new("docker")
        .args(["kill", &victim])
        .output()
        .unwrap();
    assert!(
        killed.status.success(),
        "{}",
        String::from_utf8_lossy(&killed.stderr)
    );
    up.wait_line(DEAD, |l| {
        l["event"] == "liveness" && l["id"] == "workers-0" && l["liveness"] == "Dead"
    });
    up.wait_line(SETTLE, |l| l["id"] == "workers-0" && l["stage"] == "Failed");
    up.wait_line(SETTLE, |l| {
        l["id"] == "workers-0" && l["stage"] == "Dormant"
    });
    let status = status(&state);
    assert_eq!(node(&status, "workers-0")["ready"], true, "{status}");
    let after = containers_of(&state);
    assert_eq!(after.len(), 2, "the killed container is removed: {after:?}");
    assert!(
        after
            .iter()
            .all(|(name, s)| s == "running" && !name.contains(&victim)),
        "{after:?}"
    );
    up.type_stop();
    // A node failed during the run: exit 1; every container removed.
    assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));
    assert_eq!(containers_of(&state), Vec::<(String, String)>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}
