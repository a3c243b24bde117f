//! What the benchmark examples share (each uses a part of it).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// `drover --json up PLAN`, its stdout lines read as they come, each
/// stamped with when it was read.
pub struct UpLines {
    child: Child,
    lines: mpsc::Receiver<(Instant, serde_json::Value)>,
    bench: &'static str,
    bound: Duration,
}

impl UpLines {
    /// Starts `drover --json up ARGS.. PLAN`; a wait gives up after
    /// `bound` (naming `bench`).
    pub fn start(
        drover: &Path,
        state: &Path,
        plan: &Path,
        args: &[&str],
        bench: &'static str,
        bound: Duration,
    ) -> UpLines {
        let mut child = Command::new(drover)
            .arg("--state-dir")
            .arg(state)
            .args(["--json", "up"])
            .args(args)
            .arg(plan)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("drover up runs");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line)
                    && tx.send((Instant::now(), v)).is_err()
                {
                    return;
                }
            }
        });
        UpLines {
            child,
            lines,
            bench,
            bound,
        }
    }

    /// The next line `want` accepts, and when it was read.
    pub fn wait(
        &self,
        what: &str,
        want: &dyn Fn(&serde_json::Value) -> bool,
    ) -> (Instant, serde_json::Value) {
        loop {
            match self.lines.recv_timeout(self.bound) {
                Ok((at, v)) if want(&v) => return (at, v),
                Ok(_) => {}
                Err(_) => panic!("{}: no {what} within {:?}", self.bench, self.bound),
            }
        }
    }

    /// Types `stop` on its stdin.
    pub fn type_stop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            writeln!(stdin, "stop").expect("stop");
        }
    }

    /// Waits for `up` to exit.
    pub fn wait_exit(mut self) {
        let _ = self.child.wait();
    }

    /// Types `stop` and waits for `up` to exit.
    pub fn stop(mut self) {
        self.type_stop();
        self.wait_exit();
    }
}
