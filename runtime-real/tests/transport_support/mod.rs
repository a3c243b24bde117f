//! Helpers shared by the control-plane tests: state dirs, bindings, bounded
//! waits on control events, raw iroh clients that speak bad frames.

#![allow(dead_code)]

use core_fsm::ids::{LeaseId, LogicalNodeId, RunId};
use core_fsm::port::JoinBinding;
use iroh::endpoint::{Connection, Endpoint, RelayMode, presets};
use runtime_real::transport::agent::{Agent, AgentConfig, AgentExit};
use runtime_real::transport::wire::{ALPN, JoinToken};
use runtime_real::transport::{ControlEvent, parse_addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The bound on every wait of these tests.
pub const WAIT: Duration = Duration::from_secs(20);

/// A fresh, empty state dir for one test.
pub fn state_dir(name: &str) -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("drover-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The binding of node `node` of run 7 on lease `local:<node>`.
pub fn binding(node: &str) -> JoinBinding {
    JoinBinding {
        run_id: RunId(7),
        node: LogicalNodeId::from(node),
        lease_id: LeaseId::new(format!("local:{node}")),
    }
}

/// Waits, bounded, for the first event that `pick` accepts; others are skipped.
pub async fn wait_for<T>(
    events: &mut mpsc::Receiver<ControlEvent>,
    what: &str,
    mut pick: impl FnMut(&ControlEvent) -> Option<T>,
) -> T {
    let found = tokio::time::timeout(WAIT, async {
        loop {
            let event = events.recv().await.expect("the event channel closed");
            if let Some(found) = pick(&event) {
                return found;
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no {what} within {WAIT:?}"))
}

/// An in-process agent with fast timings.
pub async fn agent(addr: &str, node: &str, token: &str) -> Agent {
    let mut config = AgentConfig::new(
        parse_addr(addr).unwrap(),
        LogicalNodeId::from(node),
        JoinToken::new(token),
    );
    config.heartbeat = Duration::from_millis(50);
    config.reconnect_for = Duration::from_secs(10);
    config.backoff_base = Duration::from_millis(20);
    config.backoff_max = Duration::from_millis(200);
    Agent::bind(config).await.unwrap()
}

/// Runs an agent in its own task.
pub fn spawn(agent: Agent) -> JoinHandle<AgentExit> {
    tokio::spawn(agent.run())
}

/// Waits, bounded, for an agent task to end.
pub async fn exit_of(task: JoinHandle<AgentExit>) -> AgentExit {
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the agent did not end in time")
        .expect("the agent task panicked")
}

/// A bare iroh client (fresh identity) connected to the control plane, for
/// writing frames by hand.
pub async fn raw_client(addr: &str) -> (Endpoint, Connection) {
    let endpoint = bare_endpoint(Vec::new()).await;
    let conn = tokio::time::timeout(WAIT, endpoint.connect(parse_addr(addr).unwrap(), ALPN))
        .await
        .expect("dial timed out")
        .expect("dial failed");
    (endpoint, conn)
}

/// A bare iroh endpoint on loopback (fresh identity, no relay, no
/// lookup) that accepts `alpns`.
pub async fn bare_endpoint(alpns: Vec<Vec<u8>>) -> Endpoint {
    Endpoint::builder(presets::Minimal)
        .relay_mode(RelayMode::Disabled)
        .clear_address_lookup()
        .clear_ip_transports()
        .bind_addr("127.0.0.1:0")
        .unwrap()
        .alpns(alpns)
        .bind()
        .await
        .unwrap()
}

/// Waits, bounded, for a connection to be closed by the peer; its close code.
pub async fn closed_code(conn: &Connection) -> u64 {
    let err = tokio::time::timeout(WAIT, conn.closed())
        .await
        .expect("the connection stayed open");
    match err {
        iroh::endpoint::ConnectionError::ApplicationClosed(close) => close.error_code.into_inner(),
        other => panic!("closed without an application code: {other}"),
    }
}
