//! `drover up` on the static provider against a stock OpenSSH server (a real
//! `sshd` on 127.0.0.1): two nodes reach ready over real SSH with the plan's
//! key file, their agents join over iroh, and teardown stops the agents,
//! over the control plane or, when `up` is gone, over SSH by pid file.
//! Every wait is on an event (a line, a process exit) with a bound.

mod sshd_support;
mod up_support;

use core_fsm::ids::{GroupId, RunId};
use core_fsm::plan::{ProviderKind, RunPlan};
use runtime_real::provider::static_hosts::hosts::{StaticHost, to_labels};
use runtime_real::provider::static_hosts::{default_claims_dir, pid_file};
use sshd_support::Sshd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);

/// A static plan of one node per sshd port, whose start command leaves the
/// agent's pid where a static destroy looks for it.
fn static_plan(sshd: &Sshd, run: u64) -> RunPlan {
    let agent = env!("CARGO_BIN_EXE_drover-agent");
    let mut plan = RunPlan::local(sshd.ports.len() as u32);
    plan.run_id = RunId(run);
    let group = &mut plan.groups[0];
    group.group_id = GroupId::from("hosts");
    group.provider = ProviderKind::Static;
    group.boot.ssh_user = sshd.user.clone();
    group.boot.verify_commands = vec![format!("test -x {agent}").into()];
    group.boot.start_command = format!(
        "mkdir -p .drover/run-${{RUN_ID}}; nohup {agent} --join '${{ORCH_ADDR}}' \
         --node '${{LOGICAL_NODE_ID}}' --token '${{JOIN_TOKEN}}' --heartbeat-ms 200 \
         --pid-file .drover/run-${{RUN_ID}}/${{LOGICAL_NODE_ID}}.pid \
         > .drover/run-${{RUN_ID}}/${{LOGICAL_NODE_ID}}.log 2>&1 < /dev/null &"
    )
    .into();
    let timeouts = &mut group.boot.timeouts;
    timeouts.ssh_connect_timeout = core_fsm::time::Duration::from_secs(30);
    timeouts.ssh_retry_interval = core_fsm::time::Duration::from_millis(200);
    timeouts.join_timeout = core_fsm::time::Duration::from_secs(30);
    let hosts: Vec<StaticHost> = sshd
        .ports
        .iter()
        .map(|&port| StaticHost {
            host: "127.0.0.1".to_owned(),
            port,
            user: sshd.user.clone(),
            key_file: sshd.client_key.display().to_string(),
        })
        .collect();
    to_labels(&mut group.shape.provider_labels, &hosts);
    plan
}

/// The login directory of the test user, where the agents' pid files are.
fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").expect("HOME is set"))
}

/// The pids the agents of `run` wrote, by node.
fn agent_pids(run: u64, nodes: &[&str]) -> Vec<u32> {
    nodes
        .iter()
        .map(|node| {
            let file = home().join(pid_file(RunId(run), node));
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            text.trim().parse().unwrap()
        })
        .collect()
}

/// Waits, bounded, for every pid to exit (on its pidfd).
fn wait_gone(pids: &[u32]) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for &pid in pids {
        let gone = runtime
            .block_on(runtime_real::provider::local::process::wait_exit(
                pid,
                Duration::from_secs(10),
            ))
            .unwrap();
        assert!(gone, "agent {pid} still runs");
    }
}

fn is_drover_agent(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.windows(12).any(|w| w == b"drover-agent"))
}

fn cleanup(dir: &Path, run: u64) {
    let _ = std::fs::remove_dir_all(home().join(format!(".drover/run-{run}")));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn two_static_nodes_on_openssh_reach_ready_and_stop_releases_them_and_stops_the_agents() {
    let dir = scratch("static");
    let state = dir.join("state");
    let sshd = Sshd::start(&dir.join("sshd"), 2);
    let run = 900_000 + u64::from(std::process::id());
    let plan = write_plan(&dir, &static_plan(&sshd, run));
    let mut up = Up::start(&state, &plan);
    let settled = up.wait_line(SETTLE, |l| l["event"] == "settled");
    let ready = status(&state);
    for (i, port) in sshd.ports.iter().enumerate() {
        let node = node(&ready, &format!("hosts-{i}"));
        assert_eq!(
            (node["stage"].as_str(), node["ready"].as_bool()),
            (Some("Dormant"), Some(true)),
            "{settled}\n{node}\nsshd:\n{}",
            sshd.log()
        );
        assert_eq!(node["lease"], format!("static:127.0.0.1:{port}"));
    }
    let pids = agent_pids(run, &["hosts-0", "hosts-1"]);
    assert!(pids.iter().all(|&p| is_drover_agent(p)), "{pids:?}");
    assert_eq!(std::fs::read_dir(state.join("static")).unwrap().count(), 2);
    let claims = default_claims_dir().expect("HOME is set");
    let claim = |port: u16| claims.join(format!("static_127.0.0.1_{port}.json"));
    assert!(sshd.ports.iter().all(|&p| claim(p).exists()));

    // A second run of the plan in another state dir may not take machines
    // this run holds: its nodes fail with a reason naming this state dir,
    // and this run's nodes and agents are untouched.
    let other = dir.join("other-state");
    let mut second = Up::start(&other, &plan);
    second.wait_line(SETTLE, |l| l["event"] == "settled");
    let refused = status(&other);
    for i in 0..2 {
        let node = node(&refused, &format!("hosts-{i}"));
        let reason = node["failed_reason"].as_str().unwrap_or_default();
        assert_eq!(node["stage"], "Failed", "{node}");
        assert!(reason.contains("is reserved by the run in"), "{reason}");
    }
    second.type_stop();
    assert_eq!(second.wait_exit(EXIT), 1, "{}", second.seen.join("\n"));
    assert!(pids.iter().all(|&p| is_drover_agent(p)), "{pids:?}");
    let still = status(&state);
    for i in 0..2 {
        assert_eq!(node(&still, &format!("hosts-{i}"))["ready"], true);
    }

    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    wait_gone(&pids);
    // Released: the claims went with the reservations.
    assert!(sshd.ports.iter().all(|&p| !claim(p).exists()));
    // The agents were told to shut down and removed their own pid files.
    for node in ["hosts-0", "hosts-1"] {
        assert!(!home().join(pid_file(RunId(run), node)).exists());
    }
    assert_eq!(std::fs::read_dir(state.join("static")).unwrap().count(), 0);
    let status = status(&state);
    for i in 0..2 {
        assert_eq!(node(&status, &format!("hosts-{i}"))["stage"], "Destroyed");
    }
    cleanup(&dir, run);
}

#[test]
fn after_kill_9_of_up_down_stops_the_static_agents_over_ssh() {
    let dir = scratch("static-kill9");
    let state = dir.join("state");
    let sshd = Sshd::start(&dir.join("sshd"), 2);
    let run = 910_000 + u64::from(std::process::id());
    let plan = write_plan(&dir, &static_plan(&sshd, run));
    let mut up = Up::start(&state, &plan);
    up.wait_line(SETTLE, |l| l["event"] == "settled");
    let pids = agent_pids(run, &["hosts-0", "hosts-1"]);
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    // Nobody told the agents anything: they run on, redialling.
    assert!(pids.iter().all(|&p| is_drover_agent(p)), "{pids:?}");

    let down = drover(&state, &["down"]);
    assert!(
        down.status.success(),
        "down: {}\nsshd:\n{}",
        String::from_utf8_lossy(&down.stderr),
        sshd.log()
    );
    wait_gone(&pids);
    for node in ["hosts-0", "hosts-1"] {
        assert!(!home().join(pid_file(RunId(run), node)).exists());
    }
    assert_eq!(std::fs::read_dir(state.join("static")).unwrap().count(), 0);
    cleanup(&dir, run);
}

#[test]
fn plan_lists_the_machine_each_static_node_would_reserve_and_touches_nothing() {
    let dir = scratch("static-plan");
    let state = dir.join("state");
    let mut plan = RunPlan::local(2);
    let group = &mut plan.groups[0];
    group.group_id = GroupId::from("hosts");
    group.provider = ProviderKind::Static;
    let key = dir.join("no-such-key");
    let hosts: Vec<StaticHost> = [("10.1.2.3", 22), ("2001:db8::7", 2222)]
        .into_iter()
        .map(|(host, port)| StaticHost {
            host: host.to_owned(),
            port,
            user: "ops".to_owned(),
            key_file: key.display().to_string(),
        })
        .collect();
    to_labels(&mut group.shape.provider_labels, &hosts);
    let file = write_plan(&dir, &plan);

    let out = drover(&state, &["plan", file.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{shown}");
    let listed: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("static machines"))
        .skip(1)
        .collect();
    assert_eq!(listed.len(), 2, "{shown}");
    assert!(
        listed[0].contains("hosts-0") && listed[0].contains("ops@10.1.2.3:22"),
        "{shown}"
    );
    assert!(
        listed[1].contains("hosts-1") && listed[1].contains("ops@[2001:db8::7]:2222"),
        "{shown}"
    );

    let out = drover(&state, &["--json", "plan", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let machines: Vec<&str> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["machine"].as_str().unwrap())
        .collect();
    assert_eq!(machines, ["ops@10.1.2.3:22", "ops@[2001:db8::7]:2222"]);
    assert_eq!(doc["nodes"][0]["key_file"], key.display().to_string());
    assert!(!state.exists(), "plan writes nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `drover --json plan` on a plan whose model comes by url and is not
/// fetched yet: stdout is still the one JSON document (the note that the
/// stage table waits for the fetch goes to stderr), and nothing is fetched.
#[test]
fn plan_json_is_one_document_while_the_model_is_not_fetched() {
    let dir = scratch("plan-json-url");
    let state = dir.join("state");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/pipeline.toml");
    let text = std::fs::read_to_string(example).unwrap();
    let path_line = text
        .lines()
        .find(|l| l.starts_with("path = "))
        .expect("the example's model path")
        .to_owned();
    // Port 9 (discard) on loopback: nothing is asked of it.
    let url = "url = \"http://127.0.0.1:9/stories.gguf\"\nsha256 = \"".to_owned()
        + &"ab".repeat(32)
        + "\"";
    let file = dir.join("url.toml");
    std::fs::write(&file, text.replace(&path_line, &url)).unwrap();
    let out = drover(&state, &["--json", "plan", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(doc["nodes"].as_array().map(Vec::len), Some(3), "{doc}");
    assert!(doc.get("pipeline").is_none(), "{doc}");
    assert!(
        stderr.starts_with("drover: model url http://127.0.0.1:9/stories.gguf: not fetched yet"),
        "{stderr}"
    );
    assert!(!state.join("models").exists(), "plan fetches nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}
