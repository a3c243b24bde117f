//! The agent against a scripted orchestrator (a bare iroh endpoint): a `Join`
//! that goes unanswered and is then refused (the orchestrator restarted after
//! redeeming the token) is followed by one `Rejoin`; after a welcome, every
//! reconnect is a `Rejoin`.

mod transport_support;

use iroh::EndpointAddr;
use iroh::endpoint::{Connection, Endpoint, RecvStream, RelayMode, SendStream, presets};
use runtime_real::transport::agent::AgentExit;
use runtime_real::transport::wire::{self, ALPN, Frame};
use runtime_real::transport::{CLOSE_GOING_AWAY, format_addr};
use transport_support::*;

async fn scripted_orchestrator() -> (Endpoint, String) {
    let endpoint = Endpoint::builder(presets::Minimal)
        .relay_mode(RelayMode::Disabled)
        .clear_address_lookup()
        .clear_ip_transports()
        .bind_addr("127.0.0.1:0")
        .unwrap()
        .alpns(vec![ALPN.to_vec()])
        .bind()
        .await
        .unwrap();
    let socket = endpoint.bound_sockets()[0];
    let addr = format_addr(&EndpointAddr::new(endpoint.id()).with_ip_addr(socket));
    (endpoint, addr)
}

/// Accepts the next connection and reads its hello; bounded.
async fn next_hello(endpoint: &Endpoint) -> (Connection, (SendStream, RecvStream), Frame) {
    tokio::time::timeout(WAIT, async {
        let conn = endpoint.accept().await.unwrap().await.unwrap();
        let (send, mut recv) = conn.accept_bi().await.unwrap();
        let hello = wire::read_frame(&mut recv).await.unwrap().unwrap();
        (conn, (send, recv), hello)
    })
    .await
    .expect("no hello in time")
}

fn kind(frame: &Frame) -> &'static str {
    match frame {
        Frame::Join { .. } => "Join",
        Frame::Rejoin { .. } => "Rejoin",
        _ => "other",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_then_refused_join_falls_back_to_one_rejoin() {
    let (endpoint, addr) = scripted_orchestrator().await;
    let task = spawn(agent(&addr, "w-0", &"c".repeat(64)).await);

    // 1: the orchestrator takes the Join and dies before answering.
    let (conn, _streams, hello) = next_hello(&endpoint).await;
    assert_eq!(kind(&hello), "Join");
    conn.close(CLOSE_GOING_AWAY, b"crash");
    // 2: its successor does not know the token.
    let (conn, (mut send, _recv), hello) = next_hello(&endpoint).await;
    assert_eq!(kind(&hello), "Join");
    let refusal = Frame::Rejected {
        reason: "unknown join token".to_owned(),
    };
    wire::write_frame(&mut send, &refusal).await.unwrap();
    // 3: the agent asks to be re-admitted by its identity; welcomed.
    let (conn3, (mut send, _recv), hello) = next_hello(&endpoint).await;
    drop(conn);
    assert_eq!(kind(&hello), "Rejoin");
    let node = binding("w-0").node;
    wire::write_frame(&mut send, &Frame::Welcome { node })
        .await
        .unwrap();
    // 4: after a welcome, a lost connection is always rejoined.
    conn3.close(CLOSE_GOING_AWAY, b"restart");
    let (_conn, (mut send, _recv), hello) = next_hello(&endpoint).await;
    assert_eq!(kind(&hello), "Rejoin");
    let node = binding("w-0").node;
    wire::write_frame(&mut send, &Frame::Welcome { node })
        .await
        .unwrap();
    wire::write_frame(&mut send, &Frame::Shutdown)
        .await
        .unwrap();
    assert_eq!(exit_of(task).await, AgentExit::Shutdown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_rejoin_is_final() {
    let (endpoint, addr) = scripted_orchestrator().await;
    let task = spawn(agent(&addr, "w-0", &"c".repeat(64)).await);
    let (conn, _streams, hello) = next_hello(&endpoint).await;
    assert_eq!(kind(&hello), "Join");
    conn.close(CLOSE_GOING_AWAY, b"crash");
    // Connections are kept open: the agent, not us, closes a refused one.
    let mut open: Vec<(Connection, SendStream, RecvStream)> = Vec::new();
    for expected in ["Join", "Rejoin"] {
        let (conn, (mut send, recv), hello) = next_hello(&endpoint).await;
        assert_eq!(kind(&hello), expected);
        let refusal = Frame::Rejected {
            reason: "no".to_owned(),
        };
        wire::write_frame(&mut send, &refusal).await.unwrap();
        open.push((conn, send, recv));
    }
    assert_eq!(
        exit_of(task).await,
        AgentExit::Rejected {
            reason: "no".to_owned()
        }
    );
}
