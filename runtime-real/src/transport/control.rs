//! The orchestrator side of the control plane: the endpoint, the token book,
//! the admitted agents and the live connections.

use super::serve::serve;
use super::store::{Admission, Store};
use super::tokens::TokenBook;
use super::wire::{ALPN, Frame};
use super::{CLOSE_GOING_AWAY, ControlEvent, build_endpoint, format_addr};
use anyhow::Result;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::port::JoinBinding;
use iroh::endpoint::{Connection, Endpoint};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};

/// Capacity of the event channel; heartbeats beyond it are dropped (and
/// counted), other events wait for room.
pub(crate) const EVENTS_CAPACITY: usize = 1024;

/// Most connections served at once; further dials are refused.
const CONNECTIONS_MAX: usize = 1024;

/// How long `shutdown` waits for connection tasks to end.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// How long a bind retries the port of the previous run (the previous
/// process may still be releasing it) before taking any free port.
const PORT_REUSE_TRIES: u32 = 100;

/// How the control plane binds.
#[derive(Clone, Debug)]
pub struct ControlConfig {
    /// The interface to bind and advertise; loopback by default (the local
    /// provider's nodes run on this machine).
    pub bind_ip: IpAddr,
    /// A fixed port; `None` reuses the previous run's port when it is free,
    /// so agents of that run can reconnect, else takes any free port.
    pub port: Option<u16>,
    /// How long a new connection may take to open its stream and send its
    /// first frame.
    pub hello_timeout: Duration,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
            hello_timeout: Duration::from_secs(10),
        }
    }
}

/// A live, admitted connection.
pub(crate) struct Live {
    pub node: LogicalNodeId,
    pub generation: u64,
    pub outbox: mpsc::Sender<Frame>,
    pub conn: Connection,
}

/// Everything the connection tasks share.
pub(crate) struct Shared {
    /// Where connections of other protocols (edges, weights) go, by ALPN.
    pub side: Mutex<BTreeMap<Vec<u8>, mpsc::Sender<Connection>>>,
    pub store: Store,
    pub config: ControlConfig,
    pub state: Mutex<State>,
    pub events: mpsc::Sender<ControlEvent>,
}

/// Mutable state; the lock is never held across an await.
#[derive(Default)]
pub(crate) struct State {
    pub tokens: TokenBook,
    pub admissions: BTreeMap<LogicalNodeId, Admission>,
    pub live: BTreeMap<AgentId, Live>,
    pub next_generation: u64,
    /// Heartbeat events dropped because the channel was full.
    pub heartbeats_dropped: u64,
}

/// The orchestrator's control-plane endpoint.
pub struct ControlPlane {
    endpoint: Endpoint,
    shared: Arc<Shared>,
    events: Option<mpsc::Receiver<ControlEvent>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl ControlPlane {
    /// Binds on 127.0.0.1 with the identity kept in `<state_dir>/keys/iroh.key`
    /// (created on first use) and the admitted agents of a previous run.
    pub async fn bind(state_dir: &Path) -> Result<ControlPlane> {
        ControlPlane::bind_with(state_dir, ControlConfig::default()).await
    }

    /// Binds with an explicit configuration.
    pub async fn bind_with(state_dir: &Path, config: ControlConfig) -> Result<ControlPlane> {
        let store = Store::new(state_dir);
        let key = store.load_or_create_key()?;
        let admissions = store.load_admissions()?;
        let endpoint = bind_port(&store, &config, key).await?;
        if let Some(socket) = endpoint.bound_sockets().first() {
            store.save_port(socket.port())?;
        }
        let (events_tx, events_rx) = mpsc::channel(EVENTS_CAPACITY);
        let shared = Arc::new(Shared {
            side: Mutex::new(BTreeMap::new()),
            store,
            config,
            state: Mutex::new(State {
                admissions,
                ..State::default()
            }),
            events: events_tx,
        });
        let accept = tokio::spawn(accept_loop(endpoint.clone(), shared.clone()));
        Ok(ControlPlane {
            endpoint,
            shared,
            events: Some(events_rx),
            accept: Mutex::new(Some(accept)),
        })
    }

    /// What `${ORCH_ADDR}` becomes: `<endpoint id>@<ip:port>,...`.
    pub fn addr_string(&self) -> String {
        let mut addr = iroh::EndpointAddr::new(self.endpoint.id());
        for socket in self.endpoint.bound_sockets() {
            addr = addr.with_ip_addr(socket);
        }
        format_addr(&addr)
    }

    /// The orchestrator's own endpoint id.
    pub fn id(&self) -> AgentId {
        super::agent_id_of(self.endpoint.id())
    }

    /// Takes the event receiver. There is one; taking it twice is a
    /// programmer error.
    pub fn take_events(&mut self) -> mpsc::Receiver<ControlEvent> {
        self.events.take().expect("control events already taken")
    }

    /// Mints a one-time join token for `binding` (256 bits of OS randomness,
    /// hex). A pending token minted earlier for the same binding is revoked.
    /// Never log the result.
    pub fn mint(&self, binding: JoinBinding) -> String {
        self.lock().tokens.mint(binding)
    }

    /// Revokes the pending token of `binding`, if it has one.
    pub fn revoke(&self, binding: &JoinBinding) {
        self.lock().tokens.revoke(binding);
    }

    /// Admits `agent` for `binding` without a token, so it may rejoin: what a
    /// restarted orchestrator does for the `NodeReady` records of its journal
    /// (the control plane also remembers its own admissions on disk).
    pub fn admit(&self, binding: JoinBinding, agent: AgentId) -> Result<()> {
        let mut state = self.lock();
        let node = binding.node.clone();
        state.admissions.insert(node, Admission { binding, agent });
        self.shared.store.save_admissions(&state.admissions)
    }

    /// Forgets the agent admitted for `node` (its lease is being destroyed):
    /// it can no longer rejoin.
    pub fn forget(&self, node: &LogicalNodeId) -> Result<()> {
        let mut state = self.lock();
        if state.admissions.remove(node).is_some() {
            self.shared.store.save_admissions(&state.admissions)?;
        }
        Ok(())
    }

    /// Sends `Shutdown` to a connected agent: it closes and exits 0. False
    /// when the agent is not connected (or its outbox is full).
    pub fn shutdown_agent(&self, agent: &AgentId) -> bool {
        let state = self.lock();
        state
            .live
            .get(agent)
            .is_some_and(|live| live.outbox.try_send(Frame::Shutdown).is_ok())
    }

    /// Closes the connection of an agent membership holds Dead: a killed
    /// process never closes its own, and until it times out the agent
    /// would look connected (a destroy of its lease would wait for it to
    /// say goodbye). False when it is not connected.
    pub fn close_dead(&self, agent: &AgentId) -> bool {
        let state = self.lock();
        let Some(live) = state.live.get(agent) else {
            return false;
        };
        live.conn
            .close(super::CLOSE_DEAD, b"membership holds this agent Dead");
        true
    }

    /// Queues `frame` for a connected agent. False when the agent is not
    /// connected or its outbox is full.
    pub fn send(&self, agent: &AgentId, frame: Frame) -> bool {
        let state = self.lock();
        state
            .live
            .get(agent)
            .is_some_and(|live| live.outbox.try_send(frame).is_ok())
    }

    /// Connections of protocol `alpn` (one the endpoint offers besides the
    /// control plane's) go to `handler` once their handshake is done.
    pub fn route(&self, alpn: &[u8], handler: mpsc::Sender<Connection>) {
        self.shared
            .side
            .lock()
            .expect("side lock")
            .insert(alpn.to_vec(), handler);
    }

    /// The endpoint, for the pipeline's own dials (token-in).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The agents connected now, with their nodes.
    pub fn connected(&self) -> BTreeMap<AgentId, LogicalNodeId> {
        let state = self.lock();
        state
            .live
            .iter()
            .map(|(agent, live)| (agent.clone(), live.node.clone()))
            .collect()
    }

    /// Unredeemed tokens.
    pub fn pending_tokens(&self) -> usize {
        self.lock().tokens.pending()
    }

    /// Heartbeat events dropped because the event channel was full.
    pub fn heartbeats_dropped(&self) -> u64 {
        self.lock().heartbeats_dropped
    }

    /// Closes every connection as "going away" (agents keep their process
    /// and try to rejoin) and the endpoint; waits, bounded, for the
    /// connection tasks to end so the port is free for a successor.
    pub async fn shutdown(&self) {
        let conns: Vec<Connection> = self.lock().live.values().map(|l| l.conn.clone()).collect();
        for conn in conns {
            conn.close(CLOSE_GOING_AWAY, b"orchestrator going away");
        }
        self.endpoint.close().await;
        let accept = self.accept.lock().expect("accept lock").take();
        if let Some(mut accept) = accept
            && tokio::time::timeout(SHUTDOWN_WAIT, &mut accept)
                .await
                .is_err()
        {
            accept.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().expect("control state lock")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every
        // connection task: nothing outlives the control plane.
        if let Ok(mut accept) = self.accept.lock()
            && let Some(accept) = accept.take()
        {
            accept.abort();
        }
    }
}

/// Binds the configured port, or the previous run's port (retrying a little
/// while the previous process releases it), or any free port.
async fn bind_port(
    store: &Store,
    config: &ControlConfig,
    key: iroh::SecretKey,
) -> Result<Endpoint> {
    let alpns = vec![
        ALPN.to_vec(),
        crate::pipeline::wire::EDGE_ALPN.to_vec(),
        crate::pipeline::wire::WEIGHTS_ALPN.to_vec(),
        super::logs::LOG_ALPN.to_vec(),
    ];
    if let Some(port) = config.port {
        return build_endpoint(key, SocketAddr::new(config.bind_ip, port), alpns).await;
    }
    if let Some(port) = store.last_port() {
        let socket = SocketAddr::new(config.bind_ip, port);
        for _ in 0..PORT_REUSE_TRIES {
            if let Ok(endpoint) = build_endpoint(key.clone(), socket, alpns.clone()).await {
                return Ok(endpoint);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        crate::stdout::eline!(
            "drover: control port {port} stays busy; binding another one \
             (agents of the previous run cannot rejoin)"
        );
    }
    build_endpoint(key, SocketAddr::new(config.bind_ip, 0), alpns).await
}

async fn accept_loop(endpoint: Endpoint, shared: Arc<Shared>) {
    let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut tasks = JoinSet::new();
    while let Some(incoming) = endpoint.accept().await {
        // Reap finished tasks so the set stays as small as the live set.
        while tasks.try_join_next().is_some() {}
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            incoming.refuse();
            continue;
        };
        let shared = shared.clone();
        tasks.spawn(async move {
            serve(shared, incoming).await;
            drop(permit);
        });
    }
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}
