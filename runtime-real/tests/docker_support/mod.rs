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
