//! The real Docker engine for tests: a client, and a guard that removes
//! every container carrying the test's own label when the test ends, also
//! when it fails (nothing of another user's is touched: the filter is the
//! test's unique label).

#![allow(dead_code)]

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use runtime_real::provider::docker::engine::Engine;
use std::collections::HashMap;
use std::path::Path;

/// The engine the tests use (as drover does: `DOCKER_HOST` or the default
/// socket).
pub fn engine() -> Engine {
    Engine::from_env()
}

/// A current-thread runtime for a test's async part.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The folder of the built binaries (`drover`, `drover-agent`).
pub fn bin_dir() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_drover")).parent().unwrap()
}

/// Containers matching one label filter (`key=value`), running or not.
pub async fn containers(docker: &Docker, label: &str) -> Vec<bollard::models::ContainerSummary> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![label.to_owned()],
        )])),
        ..Default::default()
    };
    docker.list_containers(Some(options)).await.unwrap()
}

/// Removes, when dropped, every container whose labels match `label`
/// (`key=value`).
pub struct Guard {
    pub label: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let label = self.label.clone();
        // Its own thread and runtime: a guard may drop inside a test's.
        let _ = std::thread::spawn(move || {
            runtime().block_on(async move {
                let engine = engine();
                let Ok(docker) = engine.client().await else {
                    return;
                };
                for c in containers(docker, &label).await {
                    let options = RemoveContainerOptions {
                        force: true,
                        v: true,
                        ..Default::default()
                    };
                    let id = c.id.unwrap_or_default();
                    let _ = docker.remove_container(&id, Some(options)).await;
                }
            })
        })
        .join();
    }
}

/// A plan of `count` docker workers whose agents start for real.
pub fn docker_plan(count: u32, extra_shape: &str, start: &str) -> String {
    format!(
        r#"run_id = 1

[[group]]
name = "workers"
role = "worker"
count = {count}
provider = "docker"

[group.shape]
image = "drover-node"
disk_gb = 1
{extra_shape}

[group.boot]
ssh_user = "drover"
verify_commands = ["test -x /opt/drover/bin/drover-agent"]
start_command = "{start}"

[group.boot.timeouts]
ssh_connect_timeout = "60s"
ssh_retry_interval = "100ms"
join_timeout = "60s"
"#
    )
}

/// The label filter of a state dir's containers.
pub fn state_label(state: &Path) -> String {
    format!(
        "drover.state={}",
        runtime_real::provider::docker::state_hash(state)
    )
}

/// This state dir's containers: (name, state).
pub fn containers_of(state: &Path) -> Vec<(String, String)> {
    let label = state_label(state);
    runtime().block_on(async {
        let engine = engine();
        let docker = engine.client().await.unwrap();
        let mut found: Vec<(String, String)> = containers(docker, &label)
            .await
            .into_iter()
            .map(|c| {
                let name = c.names.unwrap_or_default().join(",");
                let state = c.state.map(|s| s.to_string()).unwrap_or_default();
                (name, state)
            })
            .collect();
        found.sort();
        found
    })
}

/// A fresh, empty folder for one test.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
