//! Driving the built `drover` binary like an operator does: a plan file, a
//! state dir, `drover up` in the background with its output read line by
//! line, and the other commands from "another shell". Every wait is on an
//! event (a line, an exit) with a bound.

#![allow(dead_code)]

mod bounded;
mod pin;
#[allow(unused_imports)] // not every test binary streams a prompt
pub use bounded::*;
use core_fsm::plan::RunPlan;
#[allow(unused_imports)] // not every test binary checks the pinning
pub use pin::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `drover` binary under test.
pub const DROVER: &str = env!("CARGO_BIN_EXE_drover");

/// A fresh, empty folder for one test (the state dir goes inside it).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `plan` as a plan file in `dir`.
pub fn write_plan(dir: &Path, plan: &RunPlan) -> PathBuf {
    let path = dir.join("plan.toml");
    std::fs::write(&path, runtime_real::plan_toml::to_string(plan)).unwrap();
    path
}

/// The local plan of `count` workers whose agents start for real.
pub fn local_plan(count: u32) -> RunPlan {
    let mut plan = RunPlan::local(count);
    for group in &mut plan.groups {
        group.boot.start_command = AGENT_START.into();
    }
    plan
}

/// Starts the agent in the background, as a real start command would.
pub const AGENT_START: &str = "DROVER_JOIN_TOKEN='${JOIN_TOKEN}' nohup drover-agent \
     --join '${ORCH_ADDR}' --node '${LOGICAL_NODE_ID}' --heartbeat-ms 200 > agent.log 2>&1 &";

/// `drover --json logs ARGS..`, parsed.
pub fn logs_json(state: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["--json", "logs"];
    all.extend_from_slice(args);
    let out = drover(state, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A `drover up` running in the background.
pub struct Up {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every stdout line seen so far.
    pub seen: Vec<String>,
}

impl Up {
    /// `drover --state-dir STATE --json up PLAN`.
    pub fn start(state: &Path, plan: &Path) -> Up {
        Up::start_with(state, plan, &["--json"])
    }

    /// `drover --state-dir STATE ARGS.. up PLAN`, its stdout a pipe.
    pub fn start_with(state: &Path, plan: &Path, args: &[&str]) -> Up {
        Up::start_with_env(state, plan, args, &[])
    }

    /// As [`Up::start_with`], with `env` added to `up`'s environment.
    pub fn start_with_env(state: &Path, plan: &Path, args: &[&str], env: &[(&str, &str)]) -> Up {
        let mut child = Command::new(DROVER)
            .envs(env.iter().copied())
            .arg("--state-dir")
            .arg(state)
            .args(args)
            .arg("up")
            .arg(plan)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Up {
            child,
            stdin,
            lines,
            seen: vec![],
        }
    }

    /// Waits, at most `bound`, for a stdout line matching `want`.
    pub fn wait_line(
        &mut self,
        bound: Duration,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(e) => panic!(
                    "no matching line within {bound:?} ({e}); seen:\n{}",
                    self.seen.join("\n")
                ),
            };
            self.seen.push(line.clone());
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&line)
                && want(&value)
            {
                return value;
            }
        }
    }

    /// Waits, at most `bound`, for a stdout line (as text) matching `want`.
    pub fn wait_text(&mut self, bound: Duration, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(e) => panic!(
                    "no matching line within {bound:?} ({e}); seen:\n{}",
                    self.seen.join("\n")
                ),
            };
            self.seen.push(line.clone());
            if want(&line) {
                return line;
            }
        }
    }

    /// Types `stop` on its stdin.
    pub fn type_stop(&mut self) {
        let mut stdin = self.stdin.take().unwrap();
        writeln!(stdin, "stop").unwrap();
    }

    /// Waits, at most `bound`, for it to exit; its exit code. Its stdout
    /// closes when it exits, which is the event waited on.
    pub fn wait_exit(&mut self, bound: Duration) -> i32 {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "drover up did not exit within {bound:?}; seen:\n{}",
                        self.seen.join("\n")
                    );
                }
            }
        }
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // A failed test must not leave an orchestrator behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `drover status --json`.
pub fn status(state: &Path) -> serde_json::Value {
    let out = drover(state, &["--json", "status"]);
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The node of `status` with this id.
pub fn node<'a>(status: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {status}"))
}

/// Asserts that `status` shows `workers-0` .. `workers-{count-1}` all
/// `Destroyed`.
pub fn assert_all_destroyed(status: &serde_json::Value, count: u32) {
    for i in 0..count {
        assert_eq!(
            node(status, &format!("workers-{i}"))["stage"],
            "Destroyed",
            "{status}"
        );
    }
}

/// Pids of every local node the state dir ever had (from the node folders
/// while they exist, and from the journal's leases).
pub fn node_pids(state: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    if let Ok(entries) = std::fs::read_dir(state.join("nodes")) {
        for entry in entries.flatten() {
            if let Ok(pid) = std::fs::read_to_string(entry.path().join("pid")) {
                pids.push(pid.trim().parse().unwrap());
            }
        }
    }
    let journal = runtime_real::journal::Journal::read(state).unwrap();
    for record in journal.records {
        if let core_fsm::port::JournalRecord::LeaseKnown { lease, .. } = record {
            pids.push(lease.contract_id.parse().unwrap());
        }
    }
    pids.sort();
    pids.dedup();
    pids
}

/// Pids that still run (not exited, not zombies).
pub fn running(pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|p| runtime_real::provider::local::process::is_running(*p))
        .collect()
}

/// Ports the state dir's local nodes listen on.
pub fn node_ports(state: &Path) -> Vec<u16> {
    let mut ports = Vec::new();
    if let Ok(entries) = std::fs::read_dir(state.join("nodes")) {
        for entry in entries.flatten() {
            if let Ok(port) = std::fs::read_to_string(entry.path().join("port")) {
                ports.push(port.trim().parse().unwrap());
            }
        }
    }
    ports
}

/// Established TCP connections whose local or remote port is one of
/// `ports` (IPv4 loopback, from `/proc/net/tcp`).
pub fn established_to(ports: &[u16]) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port_of =
                |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap(), 16).unwrap();
            fields[3] == "01"
                && (ports.contains(&port_of(fields[1])) || ports.contains(&port_of(fields[2])))
        })
        .count()
}

/// The trained model the project reads from `../shared/models/`.
pub fn stories() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models/stories260k.gguf");
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// The text of a plan of `nodes` local nodes serving the trained model:
/// `verify` is the verify command, `extra` lines go into `[pipeline]`.
pub fn pipeline_plan_text(nodes: u32, verify: &str, extra: &str) -> String {
    format!(
        r#"run_id = 1

[model]
path = "{model}"

[pipeline]
group = "workers"
{extra}

[prompt]
rpc_addr = "127.0.0.1:0"

[[group]]
name = "workers"
role = "worker"
count = {nodes}
provider = "local"

[group.shape]
image = "local"
disk_gb = 1

[group.boot]
ssh_user = "drover"
verify_commands = ["{verify}"]
start_command = "DROVER_JOIN_TOKEN='${{JOIN_TOKEN}}' DROVER_CACHE_DIR=../../slice-cache nohup drover-agent --join '${{ORCH_ADDR}}' --node '${{LOGICAL_NODE_ID}}' --heartbeat-ms 200 > agent.log 2>&1 &"

[group.boot.timeouts]
ssh_connect_timeout = "30s"
ssh_retry_interval = "200ms"
join_timeout = "30s"
"#,
        model = stories().display()
    )
}

/// The processes named `name` whose working folder is under `state`:
/// (pid, working folder).
pub fn processes(state: &Path, name: &str) -> Vec<(u32, PathBuf)> {
    let state = std::fs::canonicalize(state).unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
        if exe.file_name().is_some_and(|n| n == name) && cwd.starts_with(&state) {
            found.push((pid, cwd));
        }
    }
    found
}

/// What `drover-worker generate` (built beside `drover`) prints of
/// `prompt` on the whole trained model, greedy.
pub fn generated(prompt: &str, max_tokens: u32) -> String {
    let worker = Path::new(DROVER).with_file_name("drover-worker");
    assert!(
        worker.is_file(),
        "{} is missing: build it with `cargo build -p workers`",
        worker.display()
    );
    let max_tokens = max_tokens.to_string();
    let child = Command::new(worker)
        .args(["generate", "--model"])
        .arg(stories())
        .args(["--prompt", prompt, "--max-tokens", &max_tokens])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting drover-worker generate");
    let what = format!("drover-worker generate --prompt {prompt:?} --max-tokens {max_tokens}");
    let out = finish_within(child, &what, COMMAND_BOUND);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `plan` with bounded replacement: 3 attempts, backoff 100 ms to 1 s.
pub fn bounded(mut plan: RunPlan) -> RunPlan {
    use core_fsm::time::Duration as D;
    plan.replacement = core_fsm::plan::ReplacementPolicy::Bounded {
        attempts_max: 3,
        backoff_base: D::from_millis(100),
        backoff_max: D::from_secs(1),
        quarantine_after_failures: 10,
    };
    plan
}

/// A `drover up` with its dashboard, every node settled.
pub struct WithDashboard {
    /// The run.
    pub up: Up,
    /// Its state dir.
    pub state: PathBuf,
    /// Its plan file.
    pub plan: PathBuf,
    /// The dashboard's base URL.
    pub base: String,
    /// The dashboard's access token.
    pub token: String,
}

/// `drover up` of `nodes` local nodes in `dir` (a fresh scratch dir), with
/// its dashboard, once every node has settled.
pub fn up_with_dashboard(dir: &Path, nodes: u32, settle: Duration) -> WithDashboard {
    let state = dir.join("state");
    let plan = write_plan(dir, &local_plan(nodes));
    let mut up = Up::start(&state, &plan);
    let line = up.wait_line(settle, |l| l["event"] == "dashboard");
    let url = line["url"].as_str().expect("the dashboard's url");
    let (base, token) = url.split_once("/?token=").expect("a url with its token");
    let (base, token) = (base.to_owned(), token.to_owned());
    up.wait_line(settle, |l| l["event"] == "settled");
    WithDashboard {
        up,
        state,
        plan,
        base,
        token,
    }
}

/// A multi-threaded runtime for a test's async part.
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The pipeline plan of three local nodes with `bounded` replacement,
/// written in `dir`.
pub fn repair_plan(dir: &Path) -> std::path::PathBuf {
    let text = format!(
        "{}\n[replacement]\npolicy = \"bounded\"\nattempts_max = 3\nbackoff_base = \"100ms\"\n\
         backoff_max = \"1s\"\nquarantine_after_failures = 10\n",
        pipeline_plan_text(3, "true", "")
    );
    let path = dir.join("plan.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The processes of the local node whose lease is `lease` (`local:N` runs
/// in `<state>/nodes/N`): its agent, its node process, its worker.
pub fn node_processes(state: &Path, lease: &str) -> Vec<u32> {
    processes_named(state, lease, &["drover-agent", "drover", "drover-worker"])
}

/// The processes called one of `names` of the local node of `lease`.
pub fn processes_named(state: &Path, lease: &str, names: &[&str]) -> Vec<u32> {
    let n = lease.trim_start_matches("local:");
    let folder = std::fs::canonicalize(state.join("nodes").join(n)).unwrap();
    names
        .iter()
        .copied()
        .flat_map(|name| processes(state, name))
        .filter(|(_, cwd)| *cwd == folder)
        .map(|(pid, _)| pid)
        .collect()
}

/// `drover up` serving a fresh [`repair_plan`] in a scratch folder named
/// after `name`, with workers-1's lease and its node's processes (the
/// victims a test kills).
pub struct Victim {
    /// The scratch folder.
    pub dir: PathBuf,
    /// The state dir.
    pub state: PathBuf,
    /// The plan file.
    pub plan: PathBuf,
    /// The running `up`, serving.
    pub up: Up,
    /// workers-1's lease.
    pub lease: String,
    /// workers-1's processes: agent, node process, worker.
    pub pids: Vec<u32>,
}

/// Starts `up` on a [`repair_plan`] and waits, at most `bound`, until it
/// serves; then finds workers-1's lease and processes.
pub fn serving_with_victim(name: &str, bound: Duration) -> Victim {
    let dir = scratch(name);
    let state = dir.join("state");
    let plan = repair_plan(&dir);
    let mut up = Up::start(&state, &plan);
    up.wait_line(bound, |l| l["event"] == "serving");
    let lease = node(&status(&state), "workers-1")["lease"]
        .as_str()
        .unwrap()
        .to_owned();
    let pids: Vec<u32> = ["drover-agent", "drover", "drover-worker"]
        .into_iter()
        .map(|name| match processes_named(&state, &lease, &[name])[..] {
            [pid] => pid,
            ref found => panic!("workers-1's {name}: {found:?}"),
        })
        .collect();
    Victim {
        dir,
        state,
        plan,
        up,
        lease,
        pids,
    }
}

/// Kills each of `pids` with SIGKILL.
pub fn kill_9(pids: &[u32]) {
    for pid in pids {
        let killed = Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(killed.success(), "kill -9 {pid}");
    }
}

/// `drover prompt` on `state`'s run prints what the whole model in one
/// process generates for `prompt`.
pub fn assert_served(state: &Path, prompt: &str, max_tokens: u32) {
    let max = max_tokens.to_string();
    let out = drover(state, &["prompt", prompt, "--max-tokens", &max]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        generated(prompt, max_tokens),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
