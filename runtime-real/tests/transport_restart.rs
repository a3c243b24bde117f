//! A restarted control plane (same state dir, so same key and port)
//! re-admits an agent it admitted before, by endpoint id, without a token;
//! an unknown endpoint cannot rejoin.

mod transport_support;

use runtime_real::transport::wire::{self, Frame, PROTOCOL_VERSION};
use runtime_real::transport::{CLOSE_REJECTED, ControlEvent, ControlPlane, RejectReason};
use std::process::Stdio;
use tokio::process::Command;
use transport_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_control_plane_readmits_a_known_agent() {
    let dir = state_dir("restart");
    let mut first = ControlPlane::bind(&dir).await.unwrap();
    let mut events = first.take_events();
    let addr = first.addr_string();
    let token = first.mint(binding("w-0"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_drover-agent"))
        .args(["--join", &addr, "--node", "w-0", "--token", &token])
        .args(["--heartbeat-ms", "50", "--reconnect-ms", "15000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let agent = wait_for(&mut events, "Joined", |e| match e {
        ControlEvent::Joined { agent, .. } => Some(agent.clone()),
        _ => None,
    })
    .await;
    let before = wait_for(&mut events, "Heartbeat", |e| match e {
        ControlEvent::Heartbeat { seq, .. } => Some(*seq),
        _ => None,
    })
    .await;
    let id = first.id();
    first.shutdown().await;
    drop(first);

    let mut second = ControlPlane::bind(&dir).await.unwrap();
    let mut events = second.take_events();
    assert_eq!(second.id(), id, "the identity survives the restart");
    assert_eq!(second.addr_string(), addr, "so does the address");
    let rejoined = wait_for(&mut events, "Rejoined", |e| match e {
        ControlEvent::Rejoined { binding, agent } => Some((binding.clone(), agent.clone())),
        _ => None,
    })
    .await;
    assert_eq!(rejoined, (binding("w-0"), agent.clone()));
    // The same process keeps counting its heartbeats.
    wait_for(&mut events, "Heartbeat", |e| match e {
        ControlEvent::Heartbeat { agent: a, seq, .. } if *a == agent && *seq > before => Some(()),
        _ => None,
    })
    .await;

    // Another endpoint claiming the same node cannot rejoin.
    let (endpoint, conn) = raw_client(&addr).await;
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    let rejoin = Frame::Rejoin {
        version: PROTOCOL_VERSION,
        node: binding("w-0").node,
    };
    wire::write_frame(&mut send, &rejoin).await.unwrap();
    assert_eq!(closed_code(&conn).await, CLOSE_REJECTED.into_inner());
    let peer = runtime_real::transport::agent_id_of(endpoint.id());
    let reason = wait_for(&mut events, "Rejected", |e| match e {
        ControlEvent::Rejected { peer: p, reason } if *p == peer => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert_eq!(
        reason,
        RejectReason::UnknownAgent {
            node: binding("w-0").node
        }
    );

    assert!(second.shutdown_agent(&agent));
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_agent_cannot_rejoin() {
    let dir = state_dir("forget");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let addr = control.addr_string();
    let token = control.mint(binding("w-0"));
    let agent = agent(&addr, "w-0", &token).await;
    let id = agent.id();
    let task = spawn(agent);
    // Heartbeats mean the agent was welcomed: it will rejoin, not join.
    wait_for(&mut events, "Heartbeat", |e| match e {
        ControlEvent::Heartbeat { agent, .. } if *agent == id => Some(()),
        _ => None,
    })
    .await;
    control.forget(&binding("w-0").node).unwrap();
    control.shutdown().await;
    drop(control);

    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let reason = wait_for(&mut events, "Rejected", |e| match e {
        ControlEvent::Rejected { peer, reason } if *peer == id => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert_eq!(
        reason,
        RejectReason::UnknownAgent {
            node: binding("w-0").node
        }
    );
    let exit = exit_of(task).await;
    assert_eq!(exit.code(), 3);
    control.shutdown().await;
}
