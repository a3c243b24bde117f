//! `drover up` end to end on the real Docker engine: containers of the node
//! image, bootstrapped over SSH through their published port, agents that
//! join the control plane on the bridge's gateway, `stop` or `drover down`
//! removing exactly this state dir's containers. Every wait is on an event
//! (a line of `up`'s output, an exit) with a bound; a guard removes the
//! test's containers (by its state dir's label) even when it fails.

mod docker_support;
mod up_support;

use docker_support::*;
use std::path::Path;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(180);
const EXIT: Duration = Duration::from_secs(90);

fn is_settled(line: &serde_json::Value) -> bool {
    line["event"] == "settled"
}

fn dormant_ready(status: &serde_json::Value, i: u32) -> &serde_json::Value {
    let node = node(status, &format!("workers-{i}"));
    assert_eq!(
        (node["stage"].as_str(), node["ready"].as_bool()),
        (Some("Dormant"), Some(true)),
        "{node}"
    );
    node
}

#[test]
fn three_containers_come_up_ready_over_ssh_and_stop_removes_them_all() {
    let dir = scratch("docker-three");
    let state = dir.join("state");
    let _guard = Guard {
        label: state_label(&state),
    };
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, docker_plan(3, "", AGENT_START)).unwrap();
    let started = std::time::Instant::now();
    let mut up = Up::start(&state, &plan);
    let settled = up.wait_line(SETTLE, is_settled);
    eprintln!(
        "timing: 3 containers up to ready in {:?}",
        started.elapsed()
    );
    assert_eq!(settled["nodes"].as_array().unwrap().len(), 3, "{settled}");
    let status = status(&state);
    for i in 0..3 {
        let node = dormant_ready(&status, i);
        assert!(
            node["lease"].as_str().unwrap().starts_with("docker:"),
            "{node}"
        );
    }
    let live = containers_of(&state);
    assert_eq!(live.len(), 3, "{live:?}");
    assert!(live.iter().all(|(_, s)| s == "running"), "{live:?}");

    let started = std::time::Instant::now();
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    eprintln!(
        "timing: teardown of 3 containers in {:?}",
        started.elapsed()
    );
    assert_eq!(containers_of(&state), Vec::<(String, String)>::new());
    let after = up_support::status(&state);
    for i in 0..3 {
        let node = node(&after, &format!("workers-{i}"));
        assert_eq!(node["stage"], "Destroyed", "{after}");
    }
    no_network_or_volume_of(&state);
    // Each container's own output (its `drover local-node`) is in its
    // node's datastream, from the container's start.
    for i in 0..3 {
        let out = drover(
            &state,
            &[
                "--json",
                "logs",
                &format!("workers-{i}"),
                "--channel",
                "provider.stdout",
            ],
        );
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let first: serde_json::Value =
            serde_json::from_str(text.lines().next().unwrap_or("null")).unwrap();
        assert_eq!(first["line"], "listening 22", "workers-{i}: {text}");
        assert_eq!(first["source"], "provider", "{first}");
        assert!(
            first["lease_id"].as_str().unwrap().starts_with("docker:"),
            "{first}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// No network or volume carries the state dir's label (drover makes
/// none; a container's anonymous volumes go with it).
fn no_network_or_volume_of(state: &Path) {
    let label = state_label(state);
    runtime().block_on(async {
        let engine = engine();
        let docker = engine.client().await.unwrap();
        let filters = std::collections::HashMap::from([("label".to_owned(), vec![label])]);
        let networks = docker
            .list_networks(Some(bollard::query_parameters::ListNetworksOptions {
                filters: Some(filters.clone()),
            }))
            .await
            .unwrap();
        assert!(networks.is_empty(), "{networks:?}");
        let volumes = docker
            .list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
                filters: Some(filters),
            }))
            .await
            .unwrap();
        assert!(volumes.volumes.unwrap_or_default().is_empty());
    });
}

#[test]
fn a_plan_asking_for_gpus_on_an_engine_without_them_is_refused_at_plan_time_and_creates_nothing() {
    let dir = scratch("docker-gpus");
    let state = dir.join("state");
    let _guard = Guard {
        label: state_label(&state),
    };
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, docker_plan(2, "gpus = \"all\"", AGENT_START)).unwrap();
    let nvidia = runtime().block_on(async { engine().nvidia_runtime().await.unwrap() });
    assert!(
        nvidia.is_err(),
        "this test needs an engine without the NVIDIA runtime"
    );
    for command in ["plan", "up"] {
        let out = drover(&state, &[command, plan.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains("NVIDIA runtime"), "{command}: {stderr}");
        assert!(stderr.contains("workers"), "{command}: {stderr}");
        assert!(stderr.contains("/docker.sock"), "{command}: {stderr}");
    }
    assert_eq!(containers_of(&state), Vec::<(String, String)>::new());
    assert!(!state.join("journal.bin").exists(), "nothing written");
    // `gpus` is a docker group's field only, and is "all" or a count.
    let local = docker_plan(1, "gpus = \"all\"", AGENT_START).replace("\"docker\"", "\"local\"");
    let bad = docker_plan(1, "gpus = \"many\"", AGENT_START);
    for (text, reason) in [
        (local, "only a docker group reads `gpus`"),
        (bad, "expected \"all\" or a number"),
    ] {
        std::fs::write(&plan, text).unwrap();
        let out = drover(&state, &["plan", plan.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("group[0].shape.gpus") && stderr.contains(reason),
            "{stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
