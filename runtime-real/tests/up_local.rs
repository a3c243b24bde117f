//! `drover up` end to end on the local provider: real node processes, real
//! SSH, real iroh, the built binaries. Every wait is on an event (a line of
//! `up`'s output, a process exit) with a bound.

mod up_support;

use core_fsm::ids::GroupId;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);

fn is_settled(line: &serde_json::Value) -> bool {
    line["event"] == "settled"
}

#[test]
fn three_nodes_reach_dormant_ready_with_no_ssh_session_left_then_stop_destroys_all() {
    let dir = scratch("three");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(3));
    let mut up = Up::start(&state, &plan);
    let settled = up.wait_line(SETTLE, is_settled);
    let nodes = settled["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{settled}");
    let status = status(&state);
    for i in 0..3 {
        let node = dormant_ready(&status, i);
        assert!(
            node["lease"].as_str().unwrap().starts_with("local:"),
            "{node}"
        );
        assert!(node["failed_reason"].is_null());
    }
    // Handoff closed every SSH connection: none is established to a node.
    let ports = node_ports(&state);
    assert_eq!(ports.len(), 3);
    assert_eq!(
        established_to(&ports),
        0,
        "SSH sessions left open to {ports:?}"
    );
    let pids = node_pids(&state);
    assert_eq!(running(&pids).len(), 3);
    assert_eq!(admitted(&state).len(), 3, "every agent is admitted");

    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    // A destroyed lease's agent may not rejoin: the control plane forgot it.
    assert_eq!(admitted(&state), Vec::<String>::new());
    let status = status_after(&state);
    assert_all_destroyed(&status, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_up_after_a_run_that_ended_starts_a_new_run_and_keeps_the_old_journal() {
    let dir = scratch("again");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(2));
    let mut first = Up::start(&state, &plan);
    first.wait_line(SETTLE, is_settled);
    let first_leases: Vec<String> = (0..2).map(|i| lease_of(&status(&state), i)).collect();
    let first_pids = node_pids(&state);
    first.type_stop();
    assert_eq!(first.wait_exit(EXIT), 0, "{}", first.seen.join("\n"));

    // Every lease of the first run is destroyed: the same command on the
    // same state dir brings the plan up again, as a new run.
    let mut second = Up::start(&state, &plan);
    let settled = second.wait_line(SETTLE, is_settled);
    assert_eq!(settled["nodes"].as_array().unwrap().len(), 2, "{settled}");
    let status = status(&state);
    for i in 0..2 {
        let node = dormant_ready(&status, i);
        assert!(
            !first_leases.contains(&lease_of(&status, i)),
            "a new lease, not the destroyed one: {node}"
        );
    }
    // The ended run's journal and logs are kept aside, not resumed.
    let kept = runtime_real::up::previous_run_dir(&state);
    let old = runtime_real::journal::Journal::read(&kept).unwrap();
    assert!(
        old.records
            .iter()
            .any(|r| matches!(r, core_fsm::port::JournalRecord::LeaseReleased { .. })),
        "the first run's journal, with its releases, is in {kept:?}"
    );
    assert!(kept.join("datastream").is_dir());
    let second_pids = node_pids(&state);
    second.type_stop();
    assert_eq!(second.wait_exit(EXIT), 0, "{}", second.seen.join("\n"));
    let all: Vec<u32> = first_pids.into_iter().chain(second_pids).collect();
    assert_eq!(running(&all), Vec::<u32>::new(), "node processes left");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `workers-{i}` in a status document, which must be Dormant and ready.
fn dormant_ready(status: &serde_json::Value, i: u32) -> &serde_json::Value {
    let node = node(status, &format!("workers-{i}"));
    assert_eq!(
        (node["stage"].as_str(), node["ready"].as_bool()),
        (Some("Dormant"), Some(true)),
        "{node}"
    );
    node
}

/// The lease of `workers-{i}` in a status document.
fn lease_of(status: &serde_json::Value, i: u32) -> String {
    let node = node(status, &format!("workers-{i}"));
    node["lease"].as_str().unwrap().to_owned()
}

fn status_after(state: &std::path::Path) -> serde_json::Value {
    status(state)
}

/// The nodes whose agents the control plane admits (and would let rejoin).
fn admitted(state: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(state.join("control/admitted.json")).unwrap();
    let list: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    list.iter()
        .map(|a| a["binding"]["node"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_failing_verify_fails_its_node_with_reason_and_logs_others_ready_and_down_destroys_all() {
    let dir = scratch("verify");
    let state = dir.join("state");
    let mut plan = local_plan(2);
    let mut bad = plan.groups[0].clone();
    bad.group_id = GroupId::from("bad");
    bad.count = 1;
    bad.boot.verify_commands = vec!["echo checking the gpu; echo no gpu found >&2; exit 3".into()];
    plan.groups.push(bad);
    let plan = write_plan(&dir, &plan);
    let mut up = Up::start(&state, &plan);
    up.wait_line(SETTLE, is_settled);
    let status = status(&state);
    for good in ["workers-0", "workers-1"] {
        assert_eq!(node(&status, good)["ready"], true, "{status}");
    }
    let failed = node(&status, "bad-0");
    assert_eq!(
        (failed["stage"].as_str(), failed["ready"].as_bool()),
        (Some("Failed"), Some(false)),
        "{failed}"
    );
    let reason = failed["failed_reason"].as_str().unwrap();
    assert!(
        reason.contains('3'),
        "the reason names the exit status: {reason}"
    );
    let logs = drover(&state, &["logs", "bad-0"]);
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.contains("checking the gpu") && logs.contains("no gpu found"),
        "{logs}"
    );
    let pids = node_pids(&state);
    assert_eq!(running(&pids).len(), 3);

    // `down` from another shell: `up` tears down and exits 1 (a node failed).
    let down = drover(&state, &["down"]);
    assert!(
        down.status.success(),
        "down: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(up.wait_exit(EXIT), 1);
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_nodes_commands_see_a_machines_environment_not_the_secrets_drover_was_started_with() {
    let dir = scratch("env");
    let state = dir.join("state");
    let mut plan = local_plan(1);
    plan.groups[0].boot.verify_commands = vec!["env".into()];
    let plan = write_plan(&dir, &plan);
    let secret = "vast-key-that-must-stay-home-7f3a";
    let env = [("VAST_API_KEY", secret), ("DROVER_TEST_TOKEN", secret)];
    let mut up = Up::start_with_env(&state, &plan, &["--json"], &env);
    up.wait_line(SETTLE, is_settled);
    assert_eq!(node(&status(&state), "workers-0")["ready"], true);
    let logs = drover(&state, &["logs", "workers-0"]);
    let logs = String::from_utf8_lossy(&logs.stdout);
    // The verify command printed the node's environment: a machine's own.
    assert!(logs.contains("PATH=") && logs.contains("HOME="), "{logs}");
    assert!(!logs.contains(secret), "a secret reached the node: {logs}");
    assert!(!logs.contains("VAST_API_KEY"), "{logs}");
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kill_9_of_up_mid_bootstrap_then_down_leaves_no_node_process() {
    kill_9_mid_bootstrap_then_down("kill9", false);
}

/// `down` with its plan copy gone: the journal alone names the leases, and
/// the composite it restores destroys every one.
#[test]
fn kill_9_of_up_then_down_without_the_plan_copy_leaves_no_node_process() {
    kill_9_mid_bootstrap_then_down("kill9-noplan", true);
}

fn kill_9_mid_bootstrap_then_down(name: &str, remove_plan_copy: bool) {
    let dir = scratch(name);
    let state = dir.join("state");
    let mut plan = local_plan(3);
    // Bootstrap blocks in verify: the kill lands mid-bootstrap.
    plan.groups[0].boot.verify_commands = vec!["echo verifying; sleep 600".into()];
    let plan = write_plan(&dir, &plan);
    let mut up = Up::start(&state, &plan);
    for _ in 0..3 {
        up.wait_line(SETTLE, |l| {
            l["event"] == "node" && l["stage"] == "BootstrapRunning"
        });
    }
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    let pids = node_pids(&state);
    assert_eq!(running(&pids).len(), 3, "three nodes run after the crash");
    if remove_plan_copy {
        std::fs::remove_file(state.join("plan.json")).unwrap();
    }
    let down = drover(&state, &["down"]);
    assert!(
        down.status.success(),
        "down: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(
        running(&pids),
        Vec::<u32>::new(),
        "node processes left after down"
    );
    assert!(!state.join("nodes/0").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_malformed_plan_exits_2_naming_line_and_field_and_writes_nothing() {
    let dir = scratch("malformed");
    let state = dir.join("state");
    let plan = dir.join("bad.toml");
    let mut text = runtime_real::plan_toml::to_string(&local_plan(1));
    text.insert_str(0, "run_id = = 3\n");
    std::fs::write(&plan, &text).unwrap();
    let out = drover(&state, &["up", plan.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.toml:1:"),
        "names the file and line: {stderr}"
    );
    assert!(!state.exists(), "a config error writes nothing");

    let mut invalid = local_plan(1);
    invalid.groups[0].count = 0;
    std::fs::write(&plan, runtime_real::plan_toml::to_string(&invalid)).unwrap();
    let out = drover(&state, &["up", plan.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("group[0].count"),
        "names the field: {stderr}"
    );
    assert!(!state.exists(), "a config error writes nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_a_terminal_up_prints_plain_lines_and_a_summary_table() {
    let dir = scratch("plain");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(2));
    let mut up = Up::start_with(&state, &plan, &[]);
    up.wait_text(SETTLE, |l| l.starts_with("all 2 node(s) settled in"));
    up.wait_text(SETTLE, |l| l.starts_with("running; stop with"));
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    let seen = up.seen.join("\n");
    assert!(
        !seen.contains('\x1b'),
        "no terminal escapes in a pipe:\n{seen}"
    );
    // The dashboard's URL may come first; then the control plane's address.
    let first = up
        .seen
        .iter()
        .find(|l| !l.starts_with("dashboard: "))
        .unwrap();
    assert!(first.starts_with("control plane: "), "{seen}");
    // One line per stage change: time, node, stage, lease.
    for node in ["workers-0", "workers-1"] {
        let stages: Vec<Vec<&str>> = up
            .seen
            .iter()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|w| w.len() >= 4 && w[1] == node)
            .collect();
        let names: Vec<&str> = stages.iter().map(|w| w[2]).collect();
        assert_eq!(names.first(), Some(&"LeaseRequested"), "{seen}");
        assert!(names.contains(&"Dormant"), "{seen}");
        assert_eq!(names.last(), Some(&"Destroyed"), "{seen}");
        assert!(stages.iter().all(|w| w[0].ends_with('s')), "{seen}");
        let dormant = stages.iter().find(|w| w[2] == "Dormant").unwrap();
        assert!(dormant[3].starts_with("local:"), "{seen}");
    }
    // The summary table: a header and a row per node with its lease.
    assert!(
        seen.contains("node                     stage            lease"),
        "{seen}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `drover --json logs NODE --follow`, its records as they come.
fn follow_logs(
    state: &std::path::Path,
    node: &str,
) -> (
    std::process::Child,
    std::sync::mpsc::Receiver<serde_json::Value>,
) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(DROVER)
        .arg("--state-dir")
        .arg(state)
        .args(["--json", "logs", node, "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let Ok(value) = serde_json::from_str(&line) else {
                continue;
            };
            if tx.send(value).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

#[test]
fn a_restarted_up_numbers_log_lines_above_what_the_datastream_holds() {
    let dir = scratch("seqs");
    let state = dir.join("state");
    let mut plan = local_plan(1);
    // Bootstrap blocks in verify: the kill lands mid-session, its lines
    // above what the journal names.
    plan.groups[0].boot.verify_commands = vec!["echo verifying; sleep 600".into()];
    let plan = write_plan(&dir, &plan);
    let mut up = Up::start(&state, &plan);
    up.wait_line(SETTLE, |l| {
        l["event"] == "node" && l["stage"] == "BootstrapRunning"
    });
    let (mut logs, records) = follow_logs(&state, "workers-0");
    let mut before = Vec::new();
    loop {
        let record = records.recv_timeout(SETTLE).expect("the verify line");
        let verifying = record["line"] == "verifying";
        before.push(record);
        if verifying {
            break;
        }
    }
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    logs.kill().unwrap();
    logs.wait().unwrap();
    let last_out = before
        .iter()
        .filter(|r| r["stream"] == "stdout")
        .map(|r| r["seq"].as_u64().unwrap())
        .max()
        .unwrap();

    let mut up = Up::start(&state, &plan);
    // `up.pid` is written before the control plane binds: a follower
    // started after this line follows the second life.
    up.wait_line(SETTLE, |l| l["event"] == "control");
    let (mut logs, records) = follow_logs(&state, "workers-0");
    // The file replays the first life's records, then the second life's.
    let mut seen = 0;
    let next = loop {
        let record = records
            .recv_timeout(SETTLE)
            .expect("a line of the restarted bootstrap");
        seen += 1;
        if seen > before.len() && record["stream"] == "stdout" {
            break record;
        }
    };
    assert_eq!(next["seq"].as_u64(), Some(last_out + 1), "{next}");
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    logs.kill().unwrap();
    logs.wait().unwrap();
    let pids = node_pids(&state);
    let down = drover(&state, &["down"]);
    assert!(
        down.status.success(),
        "down: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    std::fs::remove_dir_all(&dir).unwrap();
}
