//! The control plane with real iroh endpoints on loopback: joins, token
//! rules, heartbeats, shutdown, and bad frames that close one connection only.

mod transport_support;

use core_fsm::ids::AgentId;
use iroh::endpoint::{Connection, Endpoint, RecvStream, SendStream};
use runtime_real::transport::agent::AgentExit;
use runtime_real::transport::wire::{self, Frame, JoinToken, PROTOCOL_VERSION};
use runtime_real::transport::{
    CLOSE_PROTOCOL, CLOSE_REJECTED, ControlEvent, ControlPlane, RejectReason,
};
use transport_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_token_joins_heartbeats_and_shuts_down() {
    let dir = state_dir("join");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let token = control.mint(binding("w-0"));
    let agent = agent(&control.addr_string(), "w-0", &token).await;
    let id = agent.id();
    let task = spawn(agent);

    let joined = wait_for(&mut events, "Joined", |e| match e {
        ControlEvent::Joined { binding, agent } => Some((binding.clone(), agent.clone())),
        _ => None,
    })
    .await;
    assert_eq!(joined, (binding("w-0"), id.clone()));
    assert_eq!(control.pending_tokens(), 0);
    // Heartbeats arrive in order, numbered from 1.
    for expected in 1..=3 {
        let seq = wait_for(&mut events, "Heartbeat", |e| match e {
            ControlEvent::Heartbeat { agent, node, seq } if *agent == id => {
                assert_eq!(node.as_str(), "w-0");
                Some(*seq)
            }
            _ => None,
        })
        .await;
        assert_eq!(seq, expected);
    }
    assert!(control.shutdown_agent(&id));
    assert_eq!(exit_of(task).await, AgentExit::Shutdown);
    let gone = wait_for(&mut events, "Disconnected", |e| match e {
        ControlEvent::Disconnected { agent, node } => Some((agent.clone(), node.clone())),
        _ => None,
    })
    .await;
    assert_eq!(gone, (id.clone(), binding("w-0").node));
    assert!(
        !control.shutdown_agent(&id),
        "a gone agent is not connected"
    );
    control.shutdown().await;
}

/// Waits for the Rejected event of `peer`; its reason.
async fn rejection_of(
    events: &mut tokio::sync::mpsc::Receiver<ControlEvent>,
    peer: &AgentId,
) -> RejectReason {
    wait_for(events, "Rejected", |e| match e {
        ControlEvent::Rejected { peer: p, reason } if p == peer => Some(reason.clone()),
        _ => None,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_replayed_and_revoked_tokens_are_rejected() {
    let dir = state_dir("tokens");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let addr = control.addr_string();

    // A token this orchestrator never minted.
    let wrong = agent(&addr, "w-0", &"0".repeat(64)).await;
    let wrong_id = wrong.id();
    let exit = exit_of(spawn(wrong)).await;
    assert!(matches!(exit, AgentExit::Rejected { .. }), "{exit:?}");
    assert_eq!(exit.code(), 3);
    assert_eq!(
        rejection_of(&mut events, &wrong_id).await,
        RejectReason::UnknownToken
    );

    // The first use of a token joins; a second use, by anyone, is a replay.
    let token = control.mint(binding("w-0"));
    let first = agent(&addr, "w-0", &token).await;
    let first_id = first.id();
    let first_task = spawn(first);
    wait_for(&mut events, "Joined", |e| match e {
        ControlEvent::Joined { agent, .. } if *agent == first_id => Some(()),
        _ => None,
    })
    .await;
    let replay = agent(&addr, "w-0", &token).await;
    let replay_id = replay.id();
    let exit = exit_of(spawn(replay)).await;
    assert!(matches!(exit, AgentExit::Rejected { .. }), "{exit:?}");
    assert_eq!(
        rejection_of(&mut events, &replay_id).await,
        RejectReason::TokenReplayed
    );

    // A revoked token, and a token presented for the wrong node.
    let revoked = control.mint(binding("w-1"));
    control.revoke(&binding("w-1"));
    let late = agent(&addr, "w-1", &revoked).await;
    let late_id = late.id();
    assert!(matches!(
        exit_of(spawn(late)).await,
        AgentExit::Rejected { .. }
    ));
    assert_eq!(
        rejection_of(&mut events, &late_id).await,
        RejectReason::TokenRevoked
    );
    let other_node = control.mint(binding("w-2"));
    let liar = agent(&addr, "w-3", &other_node).await;
    let liar_id = liar.id();
    assert!(matches!(
        exit_of(spawn(liar)).await,
        AgentExit::Rejected { .. }
    ));
    assert_eq!(
        rejection_of(&mut events, &liar_id).await,
        RejectReason::BindingMismatch {
            node: binding("w-3").node
        }
    );

    // The first agent was never disturbed.
    assert!(control.connected().contains_key(&first_id));
    assert!(control.shutdown_agent(&first_id));
    assert_eq!(exit_of(first_task).await, AgentExit::Shutdown);
    control.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_raw_connection_is_closed() {
    let dir = state_dir("raw-reject");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let join = Frame::Join {
        version: PROTOCOL_VERSION,
        token: JoinToken::new("f".repeat(64)),
        node: binding("w-0").node,
        run: None,
        lease: None,
    };
    let (endpoint, conn, _send, _recv, answer) = raw_hello(&control.addr_string(), &join).await;
    assert!(
        matches!(answer, Ok(Some(Frame::Rejected { .. }))),
        "{answer:?}"
    );
    // We do not close: the orchestrator must close for us.
    assert_eq!(closed_code(&conn).await, CLOSE_REJECTED.into_inner());
    let peer = runtime_real::transport::agent_id_of(endpoint.id());
    assert_eq!(
        rejection_of(&mut events, &peer).await,
        RejectReason::UnknownToken
    );
    control.shutdown().await;
}

/// A heartbeat of `id` with a sequence number above `above`.
async fn heartbeat_above(
    events: &mut tokio::sync::mpsc::Receiver<ControlEvent>,
    id: &AgentId,
    above: u64,
) -> u64 {
    wait_for(events, "Heartbeat", |e| match e {
        ControlEvent::Heartbeat { agent, seq, .. } if agent == id && *seq > above => Some(*seq),
        _ => None,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_only_their_own_connection() {
    let dir = state_dir("bad-frames");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let addr = control.addr_string();
    let token = control.mint(binding("w-0"));
    let good = agent(&addr, "w-0", &token).await;
    let good_id = good.id();
    let good_task = spawn(good);
    let mut seq = heartbeat_above(&mut events, &good_id, 0).await;

    let oversized = (u32::try_from(wire::FRAME_BYTES_MAX).unwrap() + 1)
        .to_be_bytes()
        .to_vec();
    let cases: [(&str, Vec<u8>); 3] = [
        (
            "malformed",
            vec![0, 0, 0, 3, wire::WIRE_VERSION, 0xff, 0xff],
        ),
        ("oversized", oversized),
        ("empty", vec![0, 0, 0, 0]),
    ];
    for (name, bytes) in cases {
        let (endpoint, conn) = raw_client(&addr).await;
        let (mut send, _recv) = conn.open_bi().await.unwrap();
        send.write_all(&bytes).await.unwrap();
        assert_eq!(
            closed_code(&conn).await,
            CLOSE_PROTOCOL.into_inner(),
            "{name}"
        );
        let peer = runtime_real::transport::agent_id_of(endpoint.id());
        let reason = rejection_of(&mut events, &peer).await;
        assert!(
            matches!(reason, RejectReason::BadFrame { .. }),
            "{name}: {reason:?}"
        );
        // The joined agent keeps heartbeating on its own connection.
        seq = heartbeat_above(&mut events, &good_id, seq).await;
    }

    // A first frame of another wire version (an agent of another build)
    // is refused with the code every version takes as final, and a reason
    // that says what to do.
    let (endpoint, conn) = raw_client(&addr).await;
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    let old = wire::WIRE_VERSION - 1;
    send.write_all(&[0, 0, 0, 2, old, 0]).await.unwrap();
    assert_eq!(closed_code(&conn).await, CLOSE_REJECTED.into_inner());
    let said = match conn.close_reason() {
        Some(iroh::endpoint::ConnectionError::ApplicationClosed(close)) => {
            String::from_utf8_lossy(&close.reason).into_owned()
        }
        other => panic!("{other:?}"),
    };
    let want = format!(
        "the agent speaks control wire version {old}, this orchestrator {}: \
         run the drover-agent of this drover's build",
        wire::WIRE_VERSION
    );
    assert_eq!(said, want);
    let peer = runtime_real::transport::agent_id_of(endpoint.id());
    let reason = rejection_of(&mut events, &peer).await;
    assert!(
        matches!(reason, RejectReason::WireVersion { version } if version == old),
        "{reason:?}"
    );
    seq = heartbeat_above(&mut events, &good_id, seq).await;

    // An admitted connection that turns bad is closed and reported gone;
    // the other agent is not.
    let (endpoint, conn, mut send, _recv) = joined_raw_client(&mut control, "w-1").await;
    let raw_id = runtime_real::transport::agent_id_of(endpoint.id());
    send.write_all(&[0, 0, 0, 2, wire::WIRE_VERSION, 0xee])
        .await
        .unwrap();
    assert_eq!(closed_code(&conn).await, CLOSE_PROTOCOL.into_inner());
    let gone = wait_for(&mut events, "Disconnected", |e| match e {
        ControlEvent::Disconnected { agent, .. } => Some(agent.clone()),
        _ => None,
    })
    .await;
    assert_eq!(gone, raw_id);
    heartbeat_above(&mut events, &good_id, seq).await;
    assert!(control.shutdown_agent(&good_id));
    assert_eq!(exit_of(good_task).await, AgentExit::Shutdown);
    control.shutdown().await;
}

/// What an agent says of its slices (the fetch's progress every few
/// seconds, then the slice on the node) reaches the orchestrator as
/// pipeline events of its node, and the connection stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_weights_progress_reaches_the_orchestrator() {
    let dir = state_dir("weights-progress");
    let mut control = ControlPlane::bind(&dir).await.unwrap();
    let mut events = control.take_events();
    let (_endpoint, conn, mut send, _recv) = joined_raw_client(&mut control, "w-0").await;
    let frames = [
        Frame::WeightsFetching {
            first_layer: 0,
            end_layer: 2,
            bytes: 1 << 20,
            total: 3 << 20,
        },
        Frame::WeightsFetched {
            first_layer: 0,
            end_layer: 2,
            bytes: 3 << 20,
            refetched: false,
        },
    ];
    for sent in frames {
        wire::write_frame(&mut send, &sent).await.unwrap();
        let got = wait_for(&mut events, "a pipeline event", |e| match e {
            ControlEvent::Pipeline { node, frame, .. } => Some((node.clone(), (**frame).clone())),
            _ => None,
        })
        .await;
        assert_eq!(got, (binding("w-0").node, sent));
    }
    assert!(conn.close_reason().is_none(), "{:?}", conn.close_reason());
    control.shutdown().await;
}

/// A bare client joined as `node` of run 7 with a token `control` mints,
/// welcomed: its endpoint, connection and control stream's halves.
async fn joined_raw_client(
    control: &mut ControlPlane,
    node: &str,
) -> (Endpoint, Connection, SendStream, RecvStream) {
    let token = control.mint(binding(node));
    let join = Frame::Join {
        version: PROTOCOL_VERSION,
        token: JoinToken::new(token),
        node: binding(node).node,
        run: Some(binding(node).run_id),
        lease: Some(binding(node).lease_id),
    };
    let (endpoint, conn, send, recv, answer) = raw_hello(&control.addr_string(), &join).await;
    assert!(
        matches!(answer, Ok(Some(Frame::Welcome { .. }))),
        "{answer:?}"
    );
    (endpoint, conn, send, recv)
}

/// A bare client that says `hello` to the control plane at `addr`: its
/// endpoint, connection, control stream's halves, and the answer read
/// (bounded).
async fn raw_hello(
    addr: &str,
    hello: &Frame,
) -> (
    Endpoint,
    Connection,
    SendStream,
    RecvStream,
    Result<Option<Frame>, wire::FrameError>,
) {
    let (endpoint, conn) = raw_client(addr).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    wire::write_frame(&mut send, hello).await.unwrap();
    let answer = tokio::time::timeout(WAIT, wire::read_frame(&mut recv))
        .await
        .unwrap();
    (endpoint, conn, send, recv, answer)
}

/// An orchestrator of another build, whose answer to the hello is of
/// another control wire version: the agent stops at once (exit code 3),
/// saying what to do, instead of dialling for `reconnect_for`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_of_another_wire_version_refuses_the_agent_at_once() {
    let orchestrator = bare_endpoint(vec![wire::ALPN.to_vec()]).await;
    let mut addr = iroh::EndpointAddr::new(orchestrator.id());
    for socket in orchestrator.bound_sockets() {
        addr = addr.with_ip_addr(socket);
    }
    let addr = runtime_real::transport::format_addr(&addr);
    let newer = wire::WIRE_VERSION + 1;
    let answer = tokio::spawn(async move {
        let conn = orchestrator.accept().await.unwrap().await.unwrap();
        let (mut send, mut recv) = conn.accept_bi().await.unwrap();
        let hello = wire::read_frame(&mut recv).await.unwrap();
        assert!(matches!(hello, Some(Frame::Join { .. })), "{hello:?}");
        send.write_all(&[0, 0, 0, 2, newer, 0]).await.unwrap();
        // Held open until the agent has read it and gone.
        let _ = tokio::time::timeout(WAIT, conn.closed()).await;
    });
    let agent = agent(&addr, "w-0", "a-token").await;
    let exit = exit_of(spawn(agent)).await;
    let reason = format!(
        "the orchestrator speaks control wire version {newer}, this agent {}: \
         run the drover-agent of the orchestrator's build",
        wire::WIRE_VERSION
    );
    assert_eq!(exit, AgentExit::Rejected { reason });
    tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
}
