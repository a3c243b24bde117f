//! The datastream after the handoff, end to end on local nodes (real
//! processes, real SSH, real iroh): a node's agent and worker lines reach
//! `drover logs NODE` after its bootstrap lines, numbered on; lines the
//! agent printed while the orchestrator was away arrive after its rejoin;
//! the frame archive holds every line once; an archive that cannot be
//! opened stops `up` before anything starts. Every wait is on an event (a
//! line, an exit) with a bound.

mod up_support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use up_support::*;

const SETTLE: Duration = Duration::from_secs(60);
const SERVE: Duration = Duration::from_secs(120);
const EXIT: Duration = Duration::from_secs(90);

fn is_settled(line: &Value) -> bool {
    line["event"] == "settled"
}

/// A plan of one local node serving the model (as `tests/pipeline.rs`).
fn pipeline_plan(dir: &Path) -> PathBuf {
    let worker = Path::new(DROVER).with_file_name("drover-worker");
    assert!(
        worker.is_file(),
        "{} is missing: `cargo build -p workers`",
        worker.display()
    );
    let text = pipeline_plan_text(1, "echo verifying", "");
    let path = dir.join("plan.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `drover --json logs ARGS.. --follow`, its records as they come (or the
/// line that is not one).
fn follow(state: &Path, args: &[&str]) -> (Child, Receiver<Result<Value, String>>) {
    use std::io::BufRead;
    let mut child = Command::new(DROVER)
        .arg("--state-dir")
        .arg(state)
        .args(["--json", "logs"])
        .args(args)
        .arg("--follow")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let record = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"));
            if tx.send(record).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Reads records until one matches `want`, at most `bound`; every record
/// read is kept in `seen`.
fn until(
    records: &Receiver<Result<Value, String>>,
    seen: &mut Vec<Value>,
    bound: Duration,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let record = match records.recv_timeout(left) {
            Ok(Ok(record)) => record,
            Ok(Err(e)) => panic!("`--json` printed a line that is not a record: {e}"),
            Err(e) => panic!("no matching record within {bound:?} ({e}); seen:\n{seen:#?}"),
        };
        seen.push(record.clone());
        if want(&record) {
            return record;
        }
    }
}

/// Per stream, the seqs run 1, 2, 3.. in file order: increasing, no gaps.
fn assert_numbered_without_gaps(lines: &[Value]) {
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for line in lines {
        let stream = line["stream"].as_str().unwrap().to_owned();
        let seq = line["seq"].as_u64().unwrap();
        let before = last.insert(stream.clone(), seq).unwrap_or(0);
        assert_eq!(
            seq,
            before + 1,
            "{stream} after #{before}: {line}\nall: {lines:#?}"
        );
    }
}

fn channel(line: &Value) -> &str {
    line["channel"].as_str().unwrap_or("")
}

#[test]
fn agent_and_worker_lines_follow_the_bootstrap_lines_and_the_archive_holds_every_line() {
    let dir = scratch("ds-pipe");
    let state = dir.join("state");
    let plan = pipeline_plan(&dir);
    // The plan names the archive, relative to the plan's folder.
    let mut text = std::fs::read_to_string(&plan).unwrap();
    text.push_str("\n[observability]\nframe_log = \"deep/archive/frames.ndjson\"\n");
    std::fs::write(&plan, text).unwrap();
    let archive = dir.join("deep/archive/frames.ndjson");
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, |l| l["event"] == "serving");
    let (mut follower, records) = follow(&state, &["workers-0"]);
    let mut seen = Vec::new();
    // Both kinds, in whatever order they came.
    let joined = |r: &Value| {
        channel(r) == "agent.stdout"
            && r["line"]
                .as_str()
                .unwrap_or("")
                .contains("joined the orchestrator")
    };
    let worker = |r: &Value| channel(r) == "worker.stderr";
    while !(seen.iter().any(joined) && seen.iter().any(worker)) {
        until(&records, &mut seen, SERVE, |r| joined(r) || worker(r));
    }
    // One request: its events on the orchestrator's `prompt` channel, its
    // steps on the node's `worker.telemetry`.
    let asked = drover(&state, &["prompt", "Once upon a time", "--max-tokens", "4"]);
    assert!(
        asked.status.success(),
        "{}",
        String::from_utf8_lossy(&asked.stderr)
    );
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    follower.kill().unwrap();
    follower.wait().unwrap();

    let lines = logs_json(&state, &["workers-0"]);
    assert_numbered_without_gaps(&lines);
    let first_forwarded = lines
        .iter()
        .position(|l| channel(l).starts_with("agent.") || channel(l) == "worker.stderr")
        .expect("forwarded lines");
    let last_bootstrap = lines
        .iter()
        .rposition(|l| channel(l).starts_with("bootstrap."))
        .expect("bootstrap lines");
    assert!(
        last_bootstrap < first_forwarded,
        "bootstrap first: {lines:#?}"
    );
    assert_eq!(lines[last_bootstrap]["line"], "verifying");
    let worker: Vec<&Value> = lines
        .iter()
        .filter(|l| channel(l) == "worker.stderr")
        .collect();
    assert!(
        worker
            .iter()
            .any(|l| l["line"].as_str().unwrap().contains("ready")),
        "{worker:?}"
    );
    assert!(
        worker
            .iter()
            .all(|l| l["source"] == "worker" && l["stream"] == "stderr")
    );
    // The agent's own numbers run without a gap too (one agent process).
    let positions: Vec<u64> = lines
        .iter()
        .filter_map(|l| l["position"].as_u64())
        .collect();
    assert!(positions.windows(2).all(|w| w[1] > w[0]), "{positions:?}");
    assert!(!lines.iter().any(|l| channel(l) == "gap"), "{lines:#?}");
    // `--channel` keeps one channel.
    let only = logs_json(&state, &["workers-0", "--channel", "worker.stderr"]);
    assert_eq!(only.len(), worker.len());
    // The orchestrator's own channels.
    let run = logs_json(&state, &["--run"]);
    for wanted in ["lifecycle", "membership", "stage"] {
        assert!(
            run.iter().any(|l| channel(l) == wanted),
            "{wanted}: {run:#?}"
        );
    }
    assert_numbered_without_gaps(&run);
    let prompt: Vec<&str> = run
        .iter()
        .filter(|l| channel(l) == "prompt")
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    assert_eq!(prompt.len(), 3, "{prompt:#?}");
    assert!(prompt[0].starts_with("request 1 accepted: "), "{prompt:?}");
    assert!(
        prompt[1].starts_with("request 1 dispatched: "),
        "{prompt:?}"
    );
    assert_eq!(prompt[2], "request 1 completed: 4 tokens, reason MaxTokens");
    assert!(
        !prompt.iter().any(|l| l.contains("Once upon")),
        "{prompt:?}"
    );
    let telemetry: Vec<&Value> = lines
        .iter()
        .filter(|l| channel(l) == "worker.telemetry")
        .collect();
    // One stage: the prompt's step, then one a generated token (the last
    // token ends the request without a step of its own).
    assert_eq!(telemetry.len(), 4, "{telemetry:#?}");
    for line in &telemetry {
        let text = line["line"].as_str().unwrap();
        assert!(text.starts_with("stage=0 step="), "{text}");
        assert!(text.contains(" out=token out_bytes=4"), "{text}");
        assert_eq!(line["source"], "worker");
    }

    // The archive: every line of every file once, arrivals 1..=n.
    let text = std::fs::read_to_string(&archive).unwrap();
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let arrivals: Vec<u64> = records
        .iter()
        .map(|r| r["arrival"].as_u64().unwrap())
        .collect();
    assert_eq!(arrivals, (1..=records.len() as u64).collect::<Vec<_>>());
    let key = |node: &Value, stream: &Value, seq: &Value, payload: &Value| {
        format!("{node} {stream} {seq} {payload}")
    };
    let mut archived: Vec<String> = records
        .iter()
        .map(|r| key(&r["node"], &r["stream"], &r["position"], &r["payload"]))
        .collect();
    let mut written: Vec<String> = lines
        .iter()
        .chain(run.iter())
        .map(|l| key(&l["node"], &l["stream"], &l["seq"], &l["line"]))
        .collect();
    archived.sort();
    written.sort();
    assert_eq!(archived, written);
    assert!(records.iter().all(|r| r["encoding"] == "text"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lines_the_agent_printed_while_up_was_away_arrive_after_its_rejoin() {
    let dir = scratch("ds-rejoin");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(1));
    let mut up = Up::start(&state, &plan);
    up.wait_line(SETTLE, is_settled);
    let (mut follower, records) = follow(&state, &["workers-0"]);
    let mut first = Vec::new();
    let joined = until(&records, &mut first, SETTLE, |r| {
        channel(r) == "agent.stdout"
            && r["line"]
                .as_str()
                .unwrap_or("")
                .contains("joined the orchestrator")
    });
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    follower.kill().unwrap();
    follower.wait().unwrap();

    let mut up = Up::start(&state, &plan);
    // `up.pid` is written before the control plane binds: a follower
    // started after this line follows the second life.
    up.wait_line(SETTLE, |l| l["event"] == "control");
    let (mut follower, records) = follow(&state, &["workers-0"]);
    let mut seen = Vec::new();
    let rejoined = until(&records, &mut seen, SETTLE, |r| {
        channel(r) == "agent.stdout"
            && r["line"]
                .as_str()
                .unwrap_or("")
                .contains("rejoined the orchestrator")
    });
    up.wait_line(SETTLE, is_settled);
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    follower.kill().unwrap();
    follower.wait().unwrap();

    let lines = logs_json(&state, &["workers-0"]);
    assert_numbered_without_gaps(&lines);
    let at = |want: &Value| lines.iter().position(|l| l == want).unwrap();
    // The agent noticed the loss while nobody listened: that line was
    // buffered and sent once it was back, between its join and its rejoin
    // in its own numbering, after its join in the file.
    let lost = lines
        .iter()
        .find(|l| {
            channel(l) == "agent.stderr" && l["line"].as_str().unwrap().contains("connection lost")
        })
        .unwrap_or_else(|| panic!("no `connection lost` line: {lines:#?}"));
    let position = |l: &Value| l["position"].as_u64().unwrap();
    assert!(position(&joined) < position(lost) && position(lost) < position(&rejoined));
    assert!(
        at(&joined) < at(lost) && at(lost) < at(&rejoined),
        "{lines:#?}"
    );
    // Nothing sent twice, nothing lost: one agent process, positions 1.. in order.
    let positions: Vec<u64> = lines
        .iter()
        .filter_map(|l| l["position"].as_u64())
        .collect();
    assert_eq!(
        positions,
        (1..=positions.len() as u64).collect::<Vec<_>>(),
        "{lines:#?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_frame_log_that_cannot_be_opened_fails_up_with_exit_2_naming_it() {
    let dir = scratch("ds-noarchive");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(1));
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let bad = blocker.join("frames.ndjson");
    let plan_arg = plan.display().to_string();
    let bad_arg = bad.display().to_string();
    let out = drover(&state, &["up", &plan_arg, "--frame-log", &bad_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&bad_arg) && stderr.contains("frame log"),
        "{stderr}"
    );
    assert!(!state.join("journal.bin").exists(), "nothing started");

    // The same from the plan; and an empty path is a plan error with its place.
    let mut text = std::fs::read_to_string(&plan).unwrap();
    text.push_str(&format!("\n[observability]\nframe_log = \"{bad_arg}\"\n"));
    std::fs::write(&plan, &text).unwrap();
    let out = drover(&state, &["up", &plan_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&bad_arg), "{stderr}");
    let empty = text.replace(&format!("\"{bad_arg}\""), "\"\"");
    std::fs::write(&plan, empty).unwrap();
    let out = drover(&state, &["plan", &plan_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("observability.frame_log"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Lines written by the datastream's own writer, as `up` writes them: two
/// bootstrap records and two forwarded agent lines of `workers-0`, and two
/// orchestrator events.
fn written_lines(state: &Path) {
    use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
    use core_fsm::port::{LogRecord, LogStream};
    use runtime_real::datastream::{Forwarded, Writer, channel};
    let node = LogicalNodeId::from("workers-0");
    let mut writer = Writer::with(state, RunId(1), None);
    for (seq, text) in [(1, "verifying"), (2, "agent started")] {
        let record = LogRecord {
            run_id: RunId(1),
            node: node.clone(),
            lease_id: "lease-1".into(),
            source: "ssh-bootstrap".into(),
            stream: LogStream::Stdout,
            seq,
            at: core_fsm::time::Instant(seq),
            line: text.into(),
        };
        writer.append(&record).unwrap();
    }
    for (position, text) in [(1, "joined the orchestrator"), (2, "stage 0 loaded")] {
        let line = Forwarded {
            node: node.clone(),
            lease: None,
            agent: AgentId::from("agent-a"),
            channel: channel::AGENT_STDOUT,
            position,
            bytes: text.as_bytes().to_vec(),
        };
        assert!(writer.forwarded(line).unwrap());
    }
    writer.event(channel::LIFECYCLE, Some(&node), "workers-0: Ready".into());
    writer.event(channel::PROMPT, None, "request 1 accepted".into());
    writer.flush().unwrap();
}

#[test]
fn logs_since_shows_the_lines_numbered_above_it_as_ndjson_and_run_the_orchestrators() {
    let dir = scratch("ds-since");
    let state = dir.join("state");
    written_lines(&state);
    let all = logs_json(&state, &["workers-0"]);
    assert_eq!(all.len(), 4, "{all:#?}");
    assert_numbered_without_gaps(&all);
    // Above 2: the two forwarded lines, numbered on from the bootstrap's.
    for args in [
        &["workers-0", "--since", "2"][..],
        &["workers-0", "--since", "2", "--follow"][..],
    ] {
        let since = logs_json(&state, args);
        let seqs: Vec<u64> = since.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, [3, 4], "{args:?}: {since:#?}");
        assert!(since.iter().all(|l| channel(l) == "agent.stdout"));
        assert_eq!(since[0]["line"], "joined the orchestrator");
    }
    assert!(logs_json(&state, &["workers-0", "--since", "4"]).is_empty());
    let combined = logs_json(
        &state,
        &["workers-0", "--since", "1", "--channel", "bootstrap.stdout"],
    );
    assert_eq!(combined.len(), 1, "{combined:#?}");
    assert_eq!(combined[0]["line"], "agent started");
    // `--run`: the orchestrator's channels, each line the subject it is about.
    let run = logs_json(&state, &["--run"]);
    let channels: Vec<&str> = run.iter().map(channel).collect();
    assert_eq!(channels, ["lifecycle", "prompt"], "{run:#?}");
    assert_eq!(run[0]["about"], "workers-0");
    assert_eq!(logs_json(&state, &["--run", "--since", "1"]).len(), 1);
    // Formatted, one line each, the seq shown.
    let out = drover(&state, &["logs", "workers-0", "--since", "3"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.starts_with("workers-0 agent.stdout #4 "), "{text}");
    // Not a number: a usage error naming the flag.
    let bad = drover(&state, &["logs", "workers-0", "--since", "x"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn logs_into_a_reader_that_closed_its_pipe_end_quietly() {
    // `drover logs ... | head` once `head` has gone: the first line written
    // fails. No panic, no error: the listing is over, exit code 0.
    let dir = scratch("ds-closed-pipe");
    let state = dir.join("state");
    written_lines(&state);
    for args in [&["logs", "workers-0"][..], &["--json", "logs", "--run"][..]] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let child = Command::new(env!("CARGO_BIN_EXE_drover"))
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .expect("running drover");
        let out = finish_within(child, &format!("drover {args:?}"), COMMAND_BOUND);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
