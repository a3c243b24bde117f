//! The node image on the real Docker engine: built `FROM scratch` from this
//! build's binaries, their libraries and a static busybox (no base image,
//! no registry), found again by its content-hash tag, and able to run
//! drover's binaries under `/bin/sh`.

mod docker_support;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, LogsOptions, WaitContainerOptions};
use docker_support::*;
use futures_util::StreamExt;
use runtime_real::provider::docker::image;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_secs(120);

#[test]
fn the_node_image_builds_from_scratch_and_runs_drovers_binaries_under_sh() {
    let label = format!("drover.test=image-{}", std::process::id());
    let _guard = Guard {
        label: label.clone(),
    };
    runtime().block_on(async {
        let engine = engine();
        let started = Instant::now();
        let tag = image::ensure(&engine, bin_dir()).await.unwrap();
        eprintln!("timing: image {tag} ready in {:?}", started.elapsed());
        assert!(tag.starts_with("drover-node:"), "{tag}");
        // The same binaries hash to the same tag, which the engine has.
        let started = Instant::now();
        assert_eq!(image::ensure(&engine, bin_dir()).await.unwrap(), tag);
        eprintln!("timing: image found again in {:?}", started.elapsed());

        let docker = engine.client().await.unwrap();
        let inspected = docker.inspect_image(&tag).await.unwrap();
        // No label a container would inherit.
        let labels = inspected.config.and_then(|c| c.labels).unwrap_or_default();
        assert!(labels.is_empty(), "{labels:?}");

        let (key, value) = label.split_once('=').unwrap();
        let body = ContainerCreateBody {
            image: Some(tag.clone()),
            cmd: Some(vec![
                "/bin/sh".into(),
                "-c".into(),
                "drover-agent --version && drover --version && nohup true && test -d /node && echo shell-ok"
                    .into(),
            ]),
            labels: Some(HashMap::from([(key.to_owned(), value.to_owned())])),
            ..Default::default()
        };
        let created = docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
            .unwrap();
        docker.start_container(&created.id, None).await.unwrap();
        let mut wait = docker.wait_container(&created.id, None::<WaitContainerOptions>);
        let exit = tokio::time::timeout(BOUND, wait.next())
            .await
            .expect("the container exits within the bound");
        let code = match exit {
            Some(Ok(response)) => response.status_code,
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            other => panic!("wait: {other:?}"),
        };
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: "all".to_owned(),
            ..Default::default()
        };
        let mut logs = docker.logs(&created.id, Some(options));
        let mut output = String::new();
        while let Some(chunk) = logs.next().await {
            output.push_str(&chunk.unwrap().to_string());
        }
        assert_eq!(code, 0, "{output}");
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            output.contains(&format!("drover-agent {version}")),
            "{output}"
        );
        assert!(output.contains(&format!("drover {version}")), "{output}");
        assert!(output.contains("shell-ok"), "{output}");
    });
}
