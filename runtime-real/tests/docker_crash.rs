//! `kill -9` of `drover up` while it creates containers on the real Docker
//! engine. The kill point is an event of the engine (the first container of
//! the state dir created), never a sleep. Then either `drover down` removes
//! every container of that state dir and nothing else, or a second `up`
//! adopts the live ones by label and never creates a second container for
//! an intent.

mod docker_support;
mod up_support;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, EventsOptions};
use docker_support::*;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use up_support::*;

const BOUND: Duration = Duration::from_secs(180);
/// How long a followed line may take to arrive.
const LINE: Duration = Duration::from_secs(30);

/// Starts `up` and kills it -9 as soon as the engine reports the first
/// container of the state dir created; the containers seen then.
fn up_killed_at_first_create(state: &Path, plan: &Path) -> Vec<(String, String)> {
    let label = state_label(state);
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 1;
    let (tx, created) = mpsc::channel();
    // Events since before `up` starts, so the first create cannot be missed.
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let engine = engine();
            let docker = engine.client().await.unwrap();
            let options = EventsOptions {
                since: Some(since.to_string()),
                filters: Some(HashMap::from([
                    ("label".to_owned(), vec![label]),
                    ("event".to_owned(), vec!["create".to_owned()]),
                ])),
                ..Default::default()
            };
            let mut events = docker.events(Some(options));
            if let Some(event) = events.next().await {
                let _ = tx.send(event.is_ok());
            }
        })
    });
    let mut up = Up::start(state, plan);
    let ok = created
        .recv_timeout(BOUND)
        .unwrap_or_else(|e| panic!("no container created ({e}); seen:\n{}", up.seen.join("\n")));
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    assert!(ok, "the engine's event stream failed");
    let seen = containers_of(state);
    assert!(!seen.is_empty(), "the kill came after a create");
    seen
}

fn stranger(docker_label: &str, image: &str) -> ContainerCreateBody {
    let (key, value) = docker_label.split_once('=').unwrap();
    ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(vec!["/bin/sh".into(), "-c".into(), "sleep 600".into()]),
        labels: Some(HashMap::from([(key.to_owned(), value.to_owned())])),
        ..Default::default()
    }
}

/// The node image's tag (built if missing).
fn image_tag() -> String {
    runtime().block_on(async {
        runtime_real::provider::docker::image::ensure(&engine(), bin_dir())
            .await
            .unwrap()
    })
}

#[test]
fn kill_9_of_up_mid_create_then_down_removes_every_container_of_the_state_dir_only() {
    let dir = scratch("docker-kill-down");
    let state = dir.join("state");
    let _guard = Guard {
        label: state_label(&state),
    };
    // Another user's containers: one without any drover label, one of
    // another state dir with the same run id. Neither may be touched.
    let test_label = format!("drover.test=strangers-{}", std::process::id());
    let _strangers = Guard {
        label: test_label.clone(),
    };
    let other_state = format!(
        "drover.state={}",
        runtime_real::provider::docker::state_hash(&dir.join("other"))
    );
    let tag = image_tag();
    let ids: Vec<String> = runtime().block_on(async {
        let engine = engine();
        let docker = engine.client().await.unwrap();
        let mut ids = Vec::new();
        for extra in [None, Some(other_state.as_str())] {
            let mut body = stranger(&test_label, &tag);
            if let Some(label) = extra {
                let (k, v) = label.split_once('=').unwrap();
                let labels = body.labels.as_mut().unwrap();
                labels.insert(k.to_owned(), v.to_owned());
                labels.insert("drover.run".to_owned(), "1".to_owned());
                labels.insert(
                    "drover.lease".to_owned(),
                    "drover:run-1:workers-0:nonce-1".to_owned(),
                );
            }
            let created = docker
                .create_container(None::<CreateContainerOptions>, body)
                .await
                .unwrap();
            docker.start_container(&created.id, None).await.unwrap();
            ids.push(created.id);
        }
        ids
    });
    // One node: the kill lands between its create and its start. (With
    // several, a create already sent to the engine completes after the
    // kill and may land after `down` listed; see spec/docker.md.)
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, docker_plan(1, "", AGENT_START)).unwrap();
    let seen = up_killed_at_first_create(&state, &plan);
    eprintln!("after the kill: {seen:?}");
    let down = drover(&state, &["down"]);
    assert!(
        down.status.success(),
        "down: {}{}",
        String::from_utf8_lossy(&down.stdout),
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(containers_of(&state), Vec::<(String, String)>::new());
    runtime().block_on(async {
        let engine = engine();
        let docker = engine.client().await.unwrap();
        for id in &ids {
            let inspected = docker.inspect_container(id, None).await.unwrap();
            let running = inspected.state.and_then(|s| s.running);
            assert_eq!(running, Some(true), "a stranger's container was touched");
        }
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kill_9_of_up_mid_create_then_up_again_adopts_and_never_creates_twice() {
    let dir = scratch("docker-kill-adopt");
    let state = dir.join("state");
    let _guard = Guard {
        label: state_label(&state),
    };
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, docker_plan(3, "", AGENT_START)).unwrap();
    let before = up_killed_at_first_create(&state, &plan);
    let mut up = Up::start(&state, &plan);
    up.wait_line(BOUND, |l| l["event"] == "settled");
    let status = status(&state);
    let after = containers_of(&state);
    assert_eq!(after.len(), 3, "one container per node: {after:?}");
    assert!(after.iter().all(|(_, s)| s == "running"), "{after:?}");
    // Every container of the first life is still there, adopted (its name
    // is its intent's: a second create of that intent would have been
    // refused by the engine, not made a twin).
    for (name, _) in &before {
        assert!(
            after.iter().any(|(n, _)| n == name),
            "{name} not adopted: {after:?}"
        );
    }
    for i in 0..3 {
        let node = node(&status, &format!("workers-{i}"));
        assert_eq!(node["stage"], "Dormant", "{status}");
        let lease = node["lease"].as_str().unwrap();
        let name = lease.strip_prefix("docker:").unwrap();
        assert!(
            after.iter().any(|(n, _)| n.trim_start_matches('/') == name),
            "{lease}: {after:?}"
        );
    }
    // An adopted container's output is followed again, from the adoption
    // on: a line its init prints now reaches its node's datastream.
    let lease = node(&status, "workers-0")["lease"]
        .as_str()
        .unwrap()
        .to_owned();
    let container = lease.strip_prefix("docker:").unwrap().to_owned();
    let mut follow = std::process::Command::new(DROVER)
        .args([
            "--state-dir",
            state.to_str().unwrap(),
            "--json",
            "logs",
            "workers-0",
        ])
        .args(["--channel", "provider.stdout", "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    runtime().block_on(async {
        use bollard::exec::{CreateExecOptions, StartExecOptions};
        let engine = engine();
        let docker = engine.client().await.unwrap();
        let exec = docker
            .create_exec(
                &container,
                CreateExecOptions {
                    cmd: Some(vec![
                        "sh",
                        "-c",
                        "echo output-after-adoption > /proc/1/fd/1",
                    ]),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let options = StartExecOptions {
            detach: true,
            ..Default::default()
        };
        docker.start_exec(&exec.id, Some(options)).await.unwrap();
    });
    let deadline = std::time::Instant::now() + LINE;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            let all = drover(&state, &["--json", "logs", "workers-0"]);
            let run = drover(
                &state,
                &["--json", "logs", "--run", "--channel", "provider"],
            );
            panic!(
                "the adopted container's line never reached the datastream:\n{}\n{}",
                String::from_utf8_lossy(&all.stdout),
                String::from_utf8_lossy(&run.stdout)
            );
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["line"] == "output-after-adoption" {
            assert_eq!(v["source"], "provider", "{v}");
            assert_eq!(v["lease_id"], lease.as_str(), "{v}");
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    up.type_stop();
    assert_eq!(up.wait_exit(BOUND), 0, "{}", up.seen.join("\n"));
    assert_eq!(containers_of(&state), Vec::<(String, String)>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}
