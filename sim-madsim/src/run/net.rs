//! What crosses the run world's network, as typed payloads (the real
//! runtime's codecs are tested in `runtime-real`): control frames both
//! ways on an agent's control connection, and edge frames on activation
//! and token edges, each connection opened by a word saying who dials.

use crate::orch::SimClock;
use core_fsm::agent;
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId};
use core_fsm::pipeline;
use core_fsm::time::Instant;
use driver::InputSource;
use madsim::net::{Endpoint, Sender};
use std::any::Any;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// A frame on a control connection.
#[derive(Clone, Debug)]
pub enum Msg {
    /// The agent's first frame: who it is, and the lease its start
    /// command bound it to (the join token's binding).
    Hello {
        /// Its stage.
        stage: u32,
        /// Its node.
        node: LogicalNodeId,
        /// The lease it runs on.
        lease_id: LeaseId,
        /// Its identity.
        agent: AgentId,
    },
    /// Agent to orchestrator: a report or a heartbeat.
    ToHost(pipeline::Input),
    /// Orchestrator to agent: an acknowledgement, a provision, a stop.
    ToAgent(agent::Input),
}

/// The first frame of an edge: the dialing stage (`None`: the
/// orchestrator's token-in).
#[derive(Clone, Copy, Debug)]
pub struct EdgeOpen {
    /// The dialing stage.
    pub from: Option<u32>,
}

/// Writes `value` on a connection; false when it is closed. A madsim
/// stream's write never waits (it queues), so it is polled once.
pub fn send<T: Any + Send + Sync>(sender: &Sender, value: T) -> bool {
    let mut write = pin!(sender.send(Box::new(value)));
    let mut cx = Context::from_waker(Waker::noop());
    matches!(write.as_mut().poll(&mut cx), Poll::Ready(Ok(())))
}

/// An effect loop's input source: its channel, or a deadline as a madsim
/// sleep.
pub struct Inbox<I> {
    /// The channel.
    pub rx: UnboundedReceiver<I>,
    /// The clock.
    pub clock: SimClock,
}

impl<I> InputSource<I> for Inbox<I> {
    async fn next(&mut self, deadline: Option<Instant>) -> Option<I> {
        match deadline {
            Some(at) => {
                let sleep = madsim::time::sleep_until(self.clock.at(at));
                tokio::select! {
                    biased;
                    input = self.rx.recv() => input,
                    () = sleep => None,
                }
            }
            None => self.rx.recv().await,
        }
    }
}

/// Dials an edge and says who dials; `None` when it cannot be reached in
/// time.
pub async fn dial(to: SocketAddr, open: EdgeOpen, bound: Duration) -> Option<Sender> {
    let attempt = async {
        loop {
            if let Ok(ep) = Endpoint::bind("0.0.0.0:0").await
                && let Ok((sender, _receiver)) = ep.connect1(to).await
                && send(&sender, open)
            {
                return sender;
            }
            madsim::time::sleep(Duration::from_millis(200)).await;
        }
    };
    madsim::time::timeout(bound, attempt).await.ok()
}
