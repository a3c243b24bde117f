//! End-to-end helpers for the vastai provider: `drover fake-vast` (the fake
//! Vast.ai server whose instances are local SSH nodes) and `drover up` /
//! `down` / `plan` on a vastai plan pointed at it, every process real and
//! every wait on an event (an output line, an exit) with a bound.

#![allow(dead_code)]

use core_fsm::ids::GroupId;
use core_fsm::plan::{ProviderKind, RunPlan};
use core_fsm::time::Duration as CoreDuration;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The `drover` binary under test.
pub const DROVER: &str = env!("CARGO_BIN_EXE_drover");

/// The test account's API key: no output, journal or file may contain it.
pub const KEY: &str = "vk-e2e-7d1f0c93b5a84e26";

/// Starts the agent in the background, as a real start command would.
pub const AGENT_START: &str = "nohup drover-agent --join '${ORCH_ADDR}' --node '${LOGICAL_NODE_ID}' \
     --token '${JOIN_TOKEN}' --heartbeat-ms 200 > agent.log 2>&1 &";

/// A fresh, empty folder for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-vast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `drover` command with the test key in its environment.
pub fn command(state: &Path) -> Command {
    let mut command = Command::new(DROVER);
    command
        .env("VAST_API_KEY", KEY)
        .env_remove("VAST_URL")
        .arg("--state-dir")
        .arg(state);
    command
}

/// Runs a `drover` command to completion.
pub fn drover(state: &Path, args: &[&str]) -> Output {
    command(state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Lines of a child's stream, read on a thread, kept for the key check.
pub struct Lines {
    rx: mpsc::Receiver<String>,
    /// Every line seen so far.
    pub seen: Vec<String>,
}

impl Lines {
    fn read(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines { rx, seen: vec![] }
    }

    /// Waits, at most `bound`, for a JSON line matching `want`.
    pub fn wait(&mut self, bound: Duration, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.rx.recv_timeout(left) {
                Ok(line) => line,
                Err(e) => panic!(
                    "no {what} within {bound:?} ({e}); seen:\n{}",
                    self.seen.join("\n")
                ),
            };
            self.seen.push(line.clone());
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && want(&value)
            {
                return value;
            }
        }
    }

    /// Takes the lines that already arrived, without waiting.
    pub fn pump(&mut self) -> &[String] {
        while let Ok(line) = self.rx.try_recv() {
            self.seen.push(line);
        }
        &self.seen
    }

    /// Reads until the stream closes (the process exited), at most `bound`;
    /// false if it did not close in time.
    pub fn drain(&mut self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => return true,
                Err(mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
    }
}

/// Everything any process of a test printed (for the key check).
pub type Transcript = Arc<Mutex<Vec<String>>>;

/// Stderr collected on a thread into `transcript`.
fn collect(stream: impl Read + Send + 'static, transcript: Transcript) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            eprintln!("{line}");
            transcript.lock().unwrap().push(line);
        }
    });
}

/// `drover fake-vast` running in the background.
pub struct Fake {
    child: Child,
    /// Its stdout events.
    pub events: Lines,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its folder (the nodes of its instances).
    pub dir: PathBuf,
    stderr: Transcript,
}

impl Fake {
    /// Starts `drover --json fake-vast --listen 127.0.0.1:0` with the test key.
    pub fn start(test_dir: &Path) -> Fake {
        let dir = test_dir.join("fake");
        let mut child = command(&test_dir.join("fake-state"))
            .args(["--json", "fake-vast", "--listen", "127.0.0.1:0", "--dir"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Transcript::default();
        collect(child.stderr.take().unwrap(), stderr.clone());
        let mut events = Lines::read(child.stdout.take().unwrap());
        let listening = events.wait(Duration::from_secs(30), "listening line", |l| {
            l["event"] == "listening"
        });
        let url = listening["url"].as_str().unwrap().to_owned();
        Fake {
            child,
            events,
            url,
            dir,
            stderr,
        }
    }

    /// Waits until the fake has seen `n` committed creates in all.
    pub fn wait_creates(&mut self, n: usize, bound: Duration) {
        self.wait_count("starting", n, bound);
    }

    /// Waits until `n` instance events of one kind were seen in all.
    pub fn wait_count(&mut self, what: &str, n: usize, bound: Duration) {
        while self.count(what) < n {
            self.events.wait(bound, what, |l| l["what"] == what);
        }
    }

    /// Committed creates seen so far (instance `starting` events).
    pub fn creates_seen(&mut self) -> usize {
        self.count("starting")
    }

    /// Instance events of one kind seen so far (`starting`, `up`, `stopped`).
    pub fn count(&mut self, what: &str) -> usize {
        let needle = format!("\"what\":\"{what}\"");
        self.events
            .pump()
            .iter()
            .filter(|l| l.contains(&needle))
            .count()
    }

    /// `GET /_fake/instances`.
    pub fn instances(&self) -> Vec<Value> {
        let body = http(&self.url, "GET", "/_fake/instances", None);
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// Instances not destroyed (whatever their status).
    pub fn live(&self) -> Vec<Value> {
        self.instances()
            .into_iter()
            .filter(|i| i["destroyed"] == false)
            .collect()
    }

    /// `POST /_fake/scenario` with a rule (JSON).
    pub fn add_rule(&self, rule: Value) {
        http(
            &self.url,
            "POST",
            "/_fake/scenario",
            Some(&rule.to_string()),
        );
    }

    /// `DELETE /_fake/scenario`.
    pub fn clear_rules(&self) {
        http(&self.url, "DELETE", "/_fake/scenario", None);
    }

    /// SIGTERM, then waits (bounded) for it to destroy its nodes and exit.
    pub fn stop(&mut self) -> Vec<String> {
        terminate(&mut self.child, &mut self.events);
        let mut lines = self.events.seen.clone();
        lines.extend(self.stderr.lock().unwrap().iter().cloned());
        lines
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        // A failed test must not leave the fake's nodes behind.
        if self.child.try_wait().ok().flatten().is_none() {
            terminate(&mut self.child, &mut self.events);
        }
    }
}

fn terminate(child: &mut Child, out: &mut Lines) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    if !out.drain(Duration::from_secs(60)) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// One HTTP/1.1 request to the fake's control endpoints; the body of a 2xx.
pub fn http(base: &str, method: &str, path: &str, body: Option<&str>) -> String {
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 2"), "{method} {path}: {head}");
    body.to_owned()
}

/// A plan of `count` vastai workers on the fake: RTX 4090, verified, at most
/// 40 cents an hour (three such offers in the fake's catalog), no pacing,
/// real agents.
pub fn vast_plan(url: &str, count: u32) -> RunPlan {
    let mut plan = RunPlan::local(count);
    let group = &mut plan.groups[0];
    group.group_id = GroupId::from("workers");
    group.provider = ProviderKind::Vastai;
    group.shape.image = "ghcr.io/drover/node:latest".into();
    group.shape.disk_gb = 20;
    group.shape.gpu_name = Some("RTX 4090".into());
    group.shape.min_gpu_ram_mb = Some(24_000);
    group.shape.require_verified = true;
    group.shape.max_price_cents_per_hour = Some(40);
    let labels = &mut group.shape.provider_labels;
    labels.insert("vastai.base_url".into(), url.into());
    labels.insert("vastai.rate_unit_ms".into(), "0".into());
    group.boot.ssh_user = "root".into();
    group.boot.start_command = AGENT_START.into();
    group.boot.timeouts.endpoint_poll_interval = CoreDuration::from_millis(200);
    group.boot.timeouts.ssh_retry_interval = CoreDuration::from_millis(200);
    // The fake answers a create at once, or (F5) never: an unanswered
    // create, and `down`'s lists for an intent with no instance (spaced by
    // this timeout), need not wait the default two minutes.
    group.boot.timeouts.lease_create_timeout = CoreDuration::from_secs(10);
    plan
}

/// Writes `plan` as a plan file in `dir`.
pub fn write_plan(dir: &Path, plan: &RunPlan) -> PathBuf {
    let path = dir.join("plan.toml");
    std::fs::write(&path, runtime_real::plan_toml::to_string(plan)).unwrap();
    path
}

/// A `drover --json up PLAN` in the background.
pub struct Up {
    pub child: Child,
    stdin: Option<ChildStdin>,
    /// Its stdout lines.
    pub out: Lines,
    stderr: Transcript,
}

impl Up {
    /// Starts `up`.
    pub fn start(state: &Path, plan: &Path) -> Up {
        let mut child = command(state)
            .arg("--json")
            .arg("up")
            .arg(plan)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Transcript::default();
        collect(child.stderr.take().unwrap(), stderr.clone());
        let out = Lines::read(child.stdout.take().unwrap());
        Up {
            stdin: child.stdin.take(),
            child,
            out,
            stderr,
        }
    }

    /// Waits for the `settled` summary.
    pub fn wait_settled(&mut self, bound: Duration) -> Value {
        self.out
            .wait(bound, "settled summary", |l| l["event"] == "settled")
    }

    /// Types `stop` and waits (bounded) for the exit; its code.
    pub fn stop(&mut self, bound: Duration) -> i32 {
        writeln!(self.stdin.take().unwrap(), "stop").unwrap();
        assert!(
            self.out.drain(bound),
            "drover up did not exit within {bound:?}; seen:\n{}",
            self.out.seen.join("\n")
        );
        self.child.wait().unwrap().code().unwrap_or(-1)
    }

    /// kill -9.
    pub fn kill_9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Every line it printed, stdout and stderr.
    pub fn transcript(&self) -> Vec<String> {
        let mut lines = self.out.seen.clone();
        lines.extend(self.stderr.lock().unwrap().iter().cloned());
        lines
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `drover --json status`.
pub fn status(state: &Path) -> Value {
    let out = drover(state, &["--json", "status"]);
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The text of an output, stdout then stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts that no file under `root` (journal, datastream, plan copy, node
/// folders, agent logs...) contains the API key; returns how many files were read.
pub fn assert_no_key_in_files(root: &Path) -> usize {
    let mut read = 0;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && let Ok(bytes) = std::fs::read(&path)
            {
                read += 1;
                assert!(
                    !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                    "the API key is in {}",
                    path.display()
                );
            }
        }
    }
    read
}

/// Asserts that no line contains the API key.
pub fn assert_no_key_in_lines(lines: &[String]) {
    for line in lines {
        assert!(!line.contains(KEY), "the API key is in output: {line}");
    }
}
