//! `cargo xtask bench up [--provider docker]`: wall time from `drover up`
//! to all nodes ready, and the teardown time, for 1, 4 and 16 local nodes
//! (or docker containers, the node image already built) with real SSH and
//! real agents joining over iroh. With docker, the image build itself is
//! measured first (its tag removed, then built), and finding it again.
//!
//! Builds the `drover` and `drover-agent` binaries of this profile first
//! (`cargo run --example` does not), then drives them like an operator.

use core_fsm::plan::RunPlan;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [u32; 3] = [1, 4, 16];
const AGENT_START: &str = "nohup drover-agent --join '${ORCH_ADDR}' --node '${LOGICAL_NODE_ID}' \
     --token '${JOIN_TOKEN}' > agent.log 2>&1 &";

#[path = "common/mod.rs"]
mod common;

fn main() {
    let drover = common::build_binaries("bench_up");
    let args: Vec<String> = std::env::args().collect();
    let docker = match args.iter().position(|a| a == "--provider") {
        Some(i) => match args.get(i + 1).map(String::as_str) {
            Some("local") => false,
            Some("docker") => true,
            other => {
                eprintln!("bench_up: --provider local|docker, not {other:?}");
                std::process::exit(2);
            }
        },
        None => false,
    };
    if docker && let Err(e) = bench_image(&drover) {
        eprintln!("bench_up: image: {e}");
        std::process::exit(1);
    }
    println!(
        "{:>6} {:>14} {:>14}",
        "nodes", "all-ready ms", "teardown ms"
    );
    for n in SIZES {
        match bench(&drover, n, docker) {
            Ok((ready, teardown)) => println!(
                "{n:>6} {:>14} {:>14}",
                ready.as_millis(),
                teardown.as_millis()
            ),
            Err(e) => {
                eprintln!("bench_up: {n} nodes: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// The node image: built from nothing (its tag removed first), then found.
fn bench_image(drover: &Path) -> Result<(), String> {
    use runtime_real::provider::docker::{engine::Engine, image};
    let bin_dir = drover.parent().ok_or("drover has no folder")?;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let engine = Engine::from_env();
        let tag = image::Context::for_binaries(bin_dir)?.tag()?;
        let docker = engine.client().await.map_err(|e| e.message)?;
        let options = bollard::query_parameters::RemoveImageOptions {
            force: true,
            ..Default::default()
        };
        let _ = docker.remove_image(&tag, Some(options), None).await;
        let started = Instant::now();
        image::ensure(&engine, bin_dir)
            .await
            .map_err(|e| e.message)?;
        let built = started.elapsed();
        let started = Instant::now();
        image::ensure(&engine, bin_dir)
            .await
            .map_err(|e| e.message)?;
        let found = started.elapsed();
        println!(
            "image {tag}: built in {} ms, found again in {} ms",
            built.as_millis(),
            found.as_millis()
        );
        Ok(())
    })
}

fn bench(drover: &Path, nodes: u32, docker: bool) -> Result<(Duration, Duration), String> {
    let dir = std::env::temp_dir().join(format!("drover-bench-{nodes}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut plan = RunPlan::local(nodes);
    plan.groups[0].boot.start_command = AGENT_START.into();
    if docker {
        plan.groups[0].provider = core_fsm::plan::ProviderKind::Docker;
        plan.groups[0].shape.image = "drover-node".into();
        plan.groups[0].boot.timeouts.ssh_retry_interval =
            core_fsm::time::Duration::from_millis(100);
    }
    let plan_path = dir.join("plan.toml");
    std::fs::write(&plan_path, runtime_real::plan_toml::to_string(&plan))
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut up = Command::new(drover)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--json", "up"])
        .arg(&plan_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(up.stdout.take().expect("piped")).lines();
    let mut ready = None;
    for line in lines.by_ref() {
        let line = line.map_err(|e| e.to_string())?;
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if value["event"] == "settled" {
            let all = value["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().all(|n| n["ready"] == true));
            if !all {
                let _ = up.kill();
                return Err(format!("not every node became ready: {value}"));
            }
            ready = Some(started.elapsed());
            break;
        }
    }
    let ready = ready.ok_or("drover up ended before every node settled")?;
    let stopping = Instant::now();
    writeln!(up.stdin.take().expect("piped"), "stop").map_err(|e| e.to_string())?;
    for _ in lines {}
    let status = up.wait().map_err(|e| e.to_string())?;
    let teardown = stopping.elapsed();
    if !status.success() {
        return Err(format!("drover up exited with {status}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok((ready, teardown))
}
