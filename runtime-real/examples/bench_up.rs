//! `cargo xtask bench up`: wall time from `drover up` to all nodes ready,
//! and the teardown time, for 1, 4 and 16 local nodes with real SSH and
//! real agents joining over iroh.
//!
//! Builds the `drover` and `drover-agent` binaries of this profile first
//! (`cargo run --example` does not), then drives them like an operator.

use core_fsm::plan::RunPlan;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [u32; 3] = [1, 4, 16];
const AGENT_START: &str = "nohup drover-agent --join '${ORCH_ADDR}' --node '${LOGICAL_NODE_ID}' \
     --token '${JOIN_TOKEN}' > agent.log 2>&1 &";

fn main() {
    let drover = build_binaries();
    println!(
        "{:>6} {:>14} {:>14}",
        "nodes", "all-ready ms", "teardown ms"
    );
    for n in SIZES {
        match bench(&drover, n) {
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

/// Builds the binaries next to this example's profile; returns `drover`.
fn build_binaries() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/examples/bench_up");
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "-p", "runtime-real", "--bins"]);
    if release {
        build.arg("--release");
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "building drover and drover-agent failed");
    profile_dir.join("drover")
}

fn bench(drover: &Path, nodes: u32) -> Result<(Duration, Duration), String> {
    let dir = std::env::temp_dir().join(format!("drover-bench-{nodes}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut plan = RunPlan::local(nodes);
    plan.groups[0].boot.start_command = AGENT_START.into();
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
