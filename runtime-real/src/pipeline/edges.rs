//! Edges on iroh, both ends: the sender dials, says `Hello`, writes steps;
//! the receiver accepts, checks the sender's identity and the edge's
//! number against what it expects, and reads steps.
//!
//! A connection may arrive before its stage is provisioned (the
//! orchestrator opens token-in early): it waits in the [`Rendezvous`] until
//! the stage asks for it.

use super::wire::{self, EDGE_ALPN, EdgeError, EdgeFrame};
use core_fsm::ids::{AgentId, RunId};
use iroh::EndpointAddr;
use iroh::endpoint::{Connection, Endpoint, RecvStream};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long a dial of an edge keeps retrying (the receiver may still be
/// starting).
const DIAL_FOR: Duration = Duration::from_secs(30);
/// The first pause between two dials of an edge; it doubles per failure.
const DIAL_PAUSE_MIN: Duration = Duration::from_millis(20);
/// The longest pause between two dials of an edge.
const DIAL_PAUSE_MAX: Duration = Duration::from_secs(1);

/// An accepted inbound edge: who sent it and its stream.
pub struct Inbound {
    /// The sender's identity.
    pub from: AgentId,
    /// The stream, after the hello.
    pub recv: RecvStream,
    /// The connection (kept open while the edge is).
    pub conn: Connection,
}

/// Inbound edges by number: arrived and not yet claimed, or claimed and not
/// yet arrived.
#[derive(Clone, Default)]
pub struct Rendezvous {
    inner: Arc<Mutex<Slots>>,
}

#[derive(Default)]
struct Slots {
    arrived: BTreeMap<u32, Inbound>,
    waiting: BTreeMap<u32, oneshot::Sender<Inbound>>,
}

impl Rendezvous {
    /// Hands an accepted edge to whoever waits for it, or keeps it.
    pub fn arrive(&self, edge: u32, inbound: Inbound) {
        let mut slots = self.inner.lock().expect("rendezvous");
        let inbound = match slots.waiting.remove(&edge) {
            Some(waiter) => match waiter.send(inbound) {
                Ok(()) => return,
                Err(inbound) => inbound,
            },
            None => inbound,
        };
        // A newer connection for the edge replaces an unclaimed older one.
        slots.arrived.insert(edge, inbound);
    }

    /// Waits for edge `edge`.
    pub async fn claim(&self, edge: u32) -> Option<Inbound> {
        let rx = {
            let mut slots = self.inner.lock().expect("rendezvous");
            if let Some(inbound) = slots.arrived.remove(&edge) {
                return Some(inbound);
            }
            let (tx, rx) = oneshot::channel();
            slots.waiting.insert(edge, tx);
            rx
        };
        rx.await.ok()
    }
}

/// Accepts edge connections on `conns` for `run_id` into `rendezvous`.
pub async fn accept(run_id: RunId, mut conns: mpsc::Receiver<Connection>, rendezvous: Rendezvous) {
    while let Some(conn) = conns.recv().await {
        let rendezvous = rendezvous.clone();
        tokio::spawn(async move {
            let from = crate::transport::agent_id_of(conn.remote_id());
            let Ok(Ok(mut recv)) =
                tokio::time::timeout(Duration::from_secs(10), conn.accept_uni()).await
            else {
                return;
            };
            match wire::read::<EdgeFrame, _>(&mut recv).await {
                Ok(EdgeFrame::Hello { run_id: r, edge }) if r == run_id => {
                    rendezvous.arrive(edge, Inbound { from, recv, conn });
                }
                Ok(other) => {
                    let why = format!("expected a Hello for {run_id}, got {other:?}");
                    conn.close(2u32.into(), why.as_bytes());
                }
                Err(e) => conn.close(2u32.into(), e.to_string().as_bytes()),
            }
        });
    }
}

/// Every incoming connection of `endpoint` with the edge protocol goes to
/// `edges` (the agent's endpoint serves nothing else).
pub async fn accept_loop(endpoint: Endpoint, edges: mpsc::Sender<Connection>) {
    while let Some(incoming) = endpoint.accept().await {
        let edges = edges.clone();
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else {
                return;
            };
            if conn.alpn() == EDGE_ALPN {
                let _ = edges.send(conn).await;
            } else {
                conn.close(2u32.into(), b"no such protocol here");
            }
        });
    }
}

/// Dials edge `edge` at `to` and returns a queue whose frames are written
/// in order (a full queue holds its sender back); the writer task ends
/// when the queue is dropped or a write fails (then `failed` hears why).
pub async fn dial(
    endpoint: &Endpoint,
    to: EndpointAddr,
    run_id: RunId,
    edge: u32,
    failed: impl FnOnce(String) + Send + 'static,
) -> Result<(mpsc::Sender<EdgeFrame>, Connection), String> {
    let deadline = tokio::time::Instant::now() + DIAL_FOR;
    let mut failures = 0;
    let conn = loop {
        match endpoint.connect(to.clone(), EDGE_ALPN).await {
            Ok(conn) => break conn,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("dialing edge {edge}: {e}"));
            }
            Err(_) => {
                failures += 1;
                let pause = crate::retry::pause(failures, DIAL_PAUSE_MIN, DIAL_PAUSE_MAX);
                tokio::time::sleep(pause).await;
            }
        }
    };
    let mut send = conn
        .open_uni()
        .await
        .map_err(|e| format!("opening edge {edge}: {e}"))?;
    wire::write(&mut send, &EdgeFrame::Hello { run_id, edge })
        .await
        .map_err(|e| format!("edge {edge}: {e}"))?;
    // Two frames at most wait here: the receiver reads ahead on its side
    // (`node/backlog.rs`), so a sender its receiver holds back holds little.
    let (tx, mut rx) = mpsc::channel::<EdgeFrame>(2);
    tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if let Err(e) = wire::write(&mut send, &frame).await {
                failed(format!("edge {edge}: {e}"));
                return;
            }
        }
        let _ = send.finish();
    });
    Ok((tx, conn))
}

/// The next frame of an inbound edge: `Ok(None)` when it closed in order.
pub async fn next(recv: &mut RecvStream) -> Result<Option<EdgeFrame>, String> {
    match wire::read::<EdgeFrame, _>(recv).await {
        Ok(frame) => Ok(Some(frame)),
        Err(EdgeError::Closed) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
