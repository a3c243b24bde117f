//! The real `drover-agent` binary against a real control plane on loopback:
//! join, heartbeat, exit 0 on shutdown; exit 3 when rejected; exit 4 when
//! the orchestrator stays unreachable; the token never appears in its output,
//! nor, passed in the environment, in its arguments.

mod transport_support;

use core_fsm::ids::AgentId;
use runtime_real::transport::{ControlEvent, ControlPlane, RejectReason};
use std::process::Stdio;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use transport_support::*;

fn agent_command(addr: &str, node: &str, token: &str) -> Child {
    spawn_agent(addr, node, |command| command.args(["--token", token]))
}

/// The agent for `node`, its token handed over by `token`.
fn spawn_agent(addr: &str, node: &str, token: impl FnOnce(&mut Command) -> &mut Command) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_drover-agent"));
    command.args(["--join", addr, "--node", node]);
    token(&mut command)
        .args(["--heartbeat-ms", "50", "--reconnect-ms", "10000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("drover-agent starts")
}

/// Waits, bounded, for `node`'s agent to join; its id.
async fn joined(events: &mut mpsc::Receiver<ControlEvent>, node: &str) -> AgentId {
    wait_for(events, "Joined", |e| match e {
        ControlEvent::Joined { binding: b, agent } if *b == binding(node) => Some(agent.clone()),
        _ => None,
    })
    .await
}

/// Waits, bounded, for the process to exit; its code and all its output.
async fn finish(mut child: Child) -> (Option<i32>, String) {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    let status = tokio::time::timeout(WAIT, async {
        let (a, b) = tokio::join!(
            stdout.read_to_string(&mut out),
            stderr.read_to_string(&mut err)
        );
        a.unwrap();
        b.unwrap();
        child.wait().await.unwrap()
    })
    .await
    .expect("drover-agent did not exit in time");
    (status.code(), format!("{out}{err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_joins_heartbeats_and_exits_0_on_shutdown() {
    let dir = state_dir("bin-join");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let token = control.mint(binding("w-0"));
    let child = agent_command(&control.addr_string(), "w-0", &token);
    let agent = joined(&mut events, "w-0").await;
    wait_for(&mut events, "Heartbeat", |e| match e {
        ControlEvent::Heartbeat {
            agent: a, seq: 2, ..
        } if *a == agent => Some(()),
        _ => None,
    })
    .await;
    assert!(control.shutdown_agent(&agent));
    let (code, output) = finish(child).await;
    assert_eq!(code, Some(0), "{output}");
    assert!(
        output.contains("joined the orchestrator as node w-0"),
        "{output}"
    );
    assert!(
        output.contains(agent.as_str()),
        "the agent prints its id: {output}"
    );
    assert!(!output.contains(&token), "the token leaked: {output}");
    control.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_3_when_rejected() {
    let dir = state_dir("bin-reject");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let token = "ab".repeat(32);
    let child = agent_command(&control.addr_string(), "w-0", &token);
    let (code, output) = finish(child).await;
    assert_eq!(code, Some(3), "{output}");
    assert!(output.contains("rejected: unknown join token"), "{output}");
    assert!(!output.contains(&token), "the token leaked: {output}");
    let reason = wait_for(&mut events, "Rejected", |e| match e {
        ControlEvent::Rejected { reason, .. } => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert_eq!(reason, RejectReason::UnknownToken);
    control.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_4_when_nobody_answers() {
    let dir = state_dir("bin-unreachable");
    let control = ControlPlane::bind(&dir).await.unwrap();
    let addr = control.addr_string();
    control.shutdown().await;
    drop(control);
    let child = Command::new(env!("CARGO_BIN_EXE_drover-agent"))
        .args(["--join", &addr, "--node", "w-0", "--token", "secret-token"])
        .args(["--reconnect-ms", "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (code, output) = finish(child).await;
    assert_eq!(code, Some(4), "{output}");
    assert!(output.contains("giving up"), "{output}");
    assert!(
        !output.contains("secret-token"),
        "the token leaked: {output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_exit_2_without_echoing_the_token() {
    let output = Command::new(env!("CARGO_BIN_EXE_drover-agent"))
        .args([
            "--join",
            "not-an-address",
            "--node",
            "w-0",
            "--token",
            "secret-token",
        ])
        .output();
    let output = tokio::time::timeout(WAIT, output).await.unwrap().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("orchestrator address"), "{text}");
    assert!(!text.contains("secret-token"), "{text}");
}

/// A token passed as `DROVER_JOIN_TOKEN` joins as one on the command line
/// does, and never appears in the agent's arguments, which every user of
/// the host can read (`/proc/PID/cmdline`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_environment_joins_and_stays_out_of_the_process_list() {
    let dir = state_dir("bin-env-token");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let token = control.mint(binding("w-0"));
    let child = spawn_agent(&control.addr_string(), "w-0", |command| {
        command.env("DROVER_JOIN_TOKEN", &token)
    });
    let agent = joined(&mut events, "w-0").await;
    let pid = child.id().expect("the agent runs");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("its arguments");
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains("--node w-0"), "{cmdline}");
    assert!(
        !cmdline.contains(&token),
        "the token is in the process list"
    );
    assert!(control.shutdown_agent(&agent));
    let (code, output) = finish(child).await;
    assert_eq!(code, Some(0), "{output}");
    assert!(!output.contains(&token), "the token leaked: {output}");
    control.shutdown().await;
}

/// With no token on the command line or in the environment, the agent
/// exits 2 and says which argument is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_binary_exits_2_naming_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_drover-agent"))
        .args(["--join", "x@127.0.0.1:1", "--node", "w-0"])
        .env_remove("DROVER_JOIN_TOKEN")
        .output();
    let output = tokio::time::timeout(WAIT, output).await.unwrap().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("--token"), "{text}");
}
