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
