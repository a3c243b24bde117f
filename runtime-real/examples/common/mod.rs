//! What the benchmark examples share (each uses a part of it).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the binaries next to this example's profile; returns `drover`.
pub fn build_binaries(example: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("target/<profile>/examples/{example}"));
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

/// A node's lease, from `drover status --json`.
pub fn lease_of(drover: &Path, state: &Path, node: &str) -> String {
    let out = Command::new(drover)
        .arg("--state-dir")
        .arg(state)
        .args(["--json", "status"])
        .output()
        .expect("status runs");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    (status["nodes"].as_array().expect("nodes").iter())
        .find(|n| n["id"] == node)
        .and_then(|n| n["lease"].as_str())
        .expect("a lease")
        .to_owned()
}

/// The processes working in the lease's node folder (`local:N` runs in
/// `<state>/nodes/N`): node server, agent, worker.
pub fn node_pids(state: &Path, lease: &str) -> Vec<u32> {
    let folder: PathBuf = state.join("nodes").join(lease.trim_start_matches("local:"));
    let Ok(folder) = std::fs::canonicalize(folder) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
        if cwd == folder {
            pids.push(pid);
        }
    }
    pids
}
