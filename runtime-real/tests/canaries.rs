//! Secrets never leak (issue #23, item 6): canary values for the Vast.ai
//! API key (`VAST_API_KEY`), a join token, an `HF_TOKEN` in `up`'s
//! environment, the SSH private key and a secret written in the plan are
//! planted; a full `up` of a local plan with a pipeline runs, with a verify
//! command that echoes its environment, a prompt served and one refused;
//! a second `up` whose verify command fails; a `plan` of a Vast.ai group
//! against the fake with a bad API key. Then every file under the test's
//! folder (the state dirs, the frame archive, the nodes' own disks, every
//! CLI output and the dashboard's responses saved there) is searched for
//! each canary: zero hits. Every wait is on an event, with a bound.

mod up_support;
mod vast_support;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use up_support::DROVER;

const HF_TOKEN: &str = "hf_canaryHF3f9a1c7e5b2d4086";
const VAST_KEY: &str = "vk-canaryVAST8e21d7f04a6b93c5";
const PLAN_SECRET: &str = "canaryPLAN51b0e9d7c3a2f468";
const SERVE: Duration = Duration::from_secs(120);
const EXIT: Duration = Duration::from_secs(90);

fn model() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models/stories260k.gguf");
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// A local plan of one node serving the model; `verify` its verify
/// commands. The start command writes the join token it was given to
/// `seen` (outside the state dir: the test's copy of the canary) and
/// passes the plan's secret to the agent.
fn plan(dir: &Path, verify: &str, seen: &Path) -> PathBuf {
    let text = format!(
        r#"run_id = 1

[model]
path = "{model}"

[pipeline]
group = "workers"

[prompt]
rpc_addr = "127.0.0.1:0"

[observability]
frame_log = "archive/frames.ndjson"

[[group]]
name = "workers"
role = "worker"
count = 1
provider = "local"

[group.shape]
image = "local"
disk_gb = 1

[group.boot]
ssh_user = "drover"
verify_commands = [{verify}]
start_command = "printf %s '${{JOIN_TOKEN}}' > '{seen}'; DROVER_PLAN_SECRET='{PLAN_SECRET}' DROVER_JOIN_TOKEN='${{JOIN_TOKEN}}' DROVER_CACHE_DIR=../../slice-cache nohup drover-agent --join '${{ORCH_ADDR}}' --node '${{LOGICAL_NODE_ID}}' --heartbeat-ms 200 > agent.log 2>&1 &"

[group.boot.timeouts]
ssh_connect_timeout = "30s"
ssh_retry_interval = "200ms"
join_timeout = "30s"
"#,
        model = model().display(),
        seen = seen.display(),
    );
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("plan.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A `drover` command with the canaries in its environment.
fn drover_cmd(state: &Path) -> Command {
    let mut command = Command::new(DROVER);
    command
        .env("HF_TOKEN", HF_TOKEN)
        .env("VAST_API_KEY", VAST_KEY)
        .env_remove("VAST_URL")
        .arg("--state-dir")
        .arg(state);
    command
}

/// Runs `drover ARGS..` and saves its stdout and stderr under `out` as
/// `NAME.stdout`, `NAME.stderr`; its exit code and stdout.
fn run_saved(state: &Path, out: &Path, name: &str, args: &[&str]) -> (i32, String) {
    let output = drover_cmd(state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    std::fs::create_dir_all(out).unwrap();
    std::fs::write(out.join(format!("{name}.stdout")), &output.stdout).unwrap();
    std::fs::write(out.join(format!("{name}.stderr")), &output.stderr).unwrap();
    let code = output.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `drover --json up PLAN` in the background, its stderr into
/// `out/NAME.stderr`, its stdout lines as they come.
struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Up {
    fn start(state: &Path, plan: &Path, out: &Path, name: &str) -> Up {
        std::fs::create_dir_all(out).unwrap();
        let stderr = std::fs::File::create(out.join(format!("{name}.stderr"))).unwrap();
        let mut child = drover_cmd(state)
            .args(["--json", "up"])
            .arg(plan)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
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
        Up {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn wait_line(&mut self, bound: Duration, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                panic!(
                    "no matching line within {bound:?}; seen:\n{}",
                    self.seen.join("\n")
                );
            };
            self.seen.push(line.clone());
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && want(&value)
            {
                return value;
            }
        }
    }

    /// Types `stop`, waits for the exit; saves every stdout line.
    fn stop(mut self, out: &Path, name: &str) -> i32 {
        // An `up` that already stopped (a refused plan) has no stdin left.
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = writeln!(stdin, "stop");
        }
        let deadline = Instant::now() + EXIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!("up did not exit within {EXIT:?}:\n{}", self.seen.join("\n"));
                }
            }
        }
        std::fs::write(out.join(format!("{name}.stdout")), self.seen.join("\n")).unwrap();
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP GET of the dashboard at `base` (`http://127.0.0.1:PORT`); the
/// whole response, head and body. An event stream is read until its first
/// event or `bound`, whichever is first.
fn http_get(base: &str, path: &str, bound: Duration) -> String {
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(bound)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&got);
        if path.starts_with("/events") && text.contains("\ndata:") && text.ends_with("\n\n") {
            break;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Plants an OpenSSH private key made by ssh-keygen as `state`'s identity
/// (folders made, 0700); its path and the body lines only this key has
/// (every ed25519 key file begins with the same encoded header, so lines
/// another fresh key shares are not canaries).
fn plant_ssh_key(state: &Path, scratch: &Path) -> (PathBuf, Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let keys = state.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = keys.join("id_ed25519");
    let other = scratch.join("other_ed25519");
    for key in [&path, &other] {
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "canary", "-f"])
            .arg(key)
            .status()
            .unwrap();
        assert!(status.success(), "ssh-keygen {}", key.display());
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let common = std::fs::read_to_string(&other).unwrap();
    std::fs::remove_file(&other).unwrap();
    let body: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 24)
        .filter(|l| !common.lines().any(|c| c == *l))
        .map(str::to_owned)
        .collect();
    assert!(body.len() >= 2, "{text}");
    (path, body)
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_under(&entry.path(), out);
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
}

/// Every (file, canary) where a file under `dir` holds a canary, except
/// the files in `homes` (where that secret lives: the key file, the test's
/// copy of the token).
fn hits(dir: &Path, canaries: &[(&str, String)], homes: &[PathBuf]) -> Vec<String> {
    let mut files = Vec::new();
    files_under(dir, &mut files);
    let mut found = Vec::new();
    for file in files {
        if homes.contains(&file) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for (name, value) in canaries {
            if text.contains(value.as_str()) {
                found.push(format!("{}: {name}", file.display()));
            }
        }
    }
    found
}

#[test]
fn no_canary_reaches_a_file_an_output_or_the_dashboard() {
    let dir = up_support::scratch("canaries");
    let out = dir.join("out");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();

    // Run 1: serves; its verify command echoes its environment (only the
    // start command may name the join token: a plan rule).
    let state = dir.join("state");
    let (key_path, key_body) = plant_ssh_key(&state, &outside);
    let seen = outside.join("join-token-1");
    let plan1 = plan(&dir.join("plan1"), r#""env""#, &seen);
    let (code, _) = run_saved(
        &state,
        &out,
        "plan",
        &["--json", "plan", plan1.to_str().unwrap()],
    );
    assert_eq!(code, 0, "plan");
    let mut up = Up::start(&state, &plan1, &out, "up1");
    let dashboard = up.wait_line(SERVE, |l| l["event"] == "dashboard");
    up.wait_line(SERVE, |l| l["event"] == "serving");
    let (code, _) = run_saved(
        &state,
        &out,
        "prompt",
        &["--json", "prompt", "Once upon a time", "--max-tokens", "4"],
    );
    assert_eq!(code, 0, "prompt");
    // A request the run refuses: a fault on the prompt channel.
    let long = "time ".repeat(4000);
    run_saved(
        &state,
        &out,
        "prompt-refused",
        &["--json", "prompt", &long, "--max-tokens", "4"],
    );
    run_saved(&state, &out, "status", &["--json", "status"]);
    run_saved(&state, &out, "logs-node", &["--json", "logs", "workers-0"]);
    run_saved(&state, &out, "logs-run", &["--json", "logs", "--run"]);
    let url = dashboard["url"].as_str().unwrap();
    let (base, token) = url.split_once("/?token=").unwrap();
    for (name, path) in [
        ("api-state", format!("/api/state?token={token}")),
        ("api-logs", format!("/api/logs/workers-0?token={token}")),
        ("events", format!("/events?token={token}")),
    ] {
        let response = http_get(base, &path, Duration::from_secs(5));
        assert!(response.starts_with("HTTP/1.1 200"), "{name}: {response}");
        std::fs::write(out.join(format!("dashboard-{name}.txt")), response).unwrap();
    }
    assert_eq!(up.stop(&out, "up1"), 0);
    let join_token_1 = std::fs::read_to_string(&seen).unwrap();
    assert!(join_token_1.len() >= 16, "the start command saw the token");

    // Run 2: its verify command echoes its environment and fails.
    let state2 = dir.join("state2");
    let seen2 = outside.join("join-token-2");
    let plan2 = plan(&dir.join("plan2"), r#""env; exit 7""#, &seen2);
    let mut up = Up::start(&state2, &plan2, &out, "up2");
    // It fails the node, destroys it and exits on its own.
    let settled = up.wait_line(SERVE, |l| l["event"] == "settled");
    assert!(
        settled
            .to_string()
            .contains("verify command 0 exited with 7"),
        "{settled}"
    );
    assert_ne!(up.stop(&out, "up2"), 0, "a failed pipeline fails up");
    run_saved(&state2, &out, "status2", &["--json", "status"]);
    run_saved(
        &state2,
        &out,
        "logs-node2",
        &["--json", "logs", "workers-0"],
    );

    // A Vast.ai plan against the fake with a bad key.
    let mut fake = vast_support::Fake::start(&dir);
    std::fs::create_dir_all(dir.join("plan3")).unwrap();
    let vast_plan =
        vast_support::write_plan(&dir.join("plan3"), &vast_support::vast_plan(&fake.url, 1));
    let (code, _) = run_saved(
        &dir.join("state3"),
        &out,
        "plan-vast",
        &["--json", "plan", vast_plan.to_str().unwrap()],
    );
    assert_ne!(code, 0, "a bad key is refused");
    // `up`: the lease request meets the bad key; then it is stopped.
    let mut up = Up::start(&dir.join("state3"), &vast_plan, &out, "up3");
    let refused = up.wait_line(SERVE, |l| {
        l["event"] == "settled" || (l["event"] == "node" && !l["failed_reason"].is_null())
    });
    assert!(refused.to_string().contains("auth"), "{refused}");
    up.stop(&out, "up3");
    // The refusal is on the orchestrator's `provider` channel, the key not.
    let (_, run3) = run_saved(
        &dir.join("state3"),
        &out,
        "logs-run3",
        &["--json", "logs", "--run", "--channel", "provider"],
    );
    assert!(
        run3.lines()
            .any(|l| l.contains("create lease failed") && l.contains("auth")),
        "{run3}"
    );
    drop(fake.stop());

    let mut canaries = vec![
        ("HF_TOKEN", HF_TOKEN.to_owned()),
        ("VAST_API_KEY", VAST_KEY.to_owned()),
        ("plan secret", PLAN_SECRET.to_owned()),
        ("join token", join_token_1),
    ];
    // Run 2 failed at its verify command, before its start command: its
    // join token never left the orchestrator, so there is none to look for.
    assert!(!seen2.exists(), "run 2's start command ran");
    for line in key_body {
        canaries.push(("ssh private key", line));
    }
    // The search finds each canary where it lives (so zero hits below
    // means absent, not unsearched).
    let everywhere = hits(&dir, &canaries, &[]);
    for (home, name) in [
        (&key_path, "ssh private key"),
        (&seen, "join token"),
        (&plan1, "plan secret"),
    ] {
        let want = format!("{}: {name}", home.display());
        assert!(everywhere.contains(&want), "{want}: {everywhere:#?}");
    }
    let homes = [key_path, seen, seen2, plan1, plan2];
    let found = hits(&dir, &canaries, &homes);
    assert!(found.is_empty(), "canaries found:\n{}", found.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
