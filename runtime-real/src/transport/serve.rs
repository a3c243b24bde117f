//! One connection on the orchestrator: the hello (`Join` or `Rejoin`), then
//! heartbeats in and control frames out until either side ends it.
//!
//! A bad frame closes this connection only; every other connection has its
//! own task and never sees it.

use super::control::{Live, Shared};
use super::store::Admission;
use super::tokens::Claim;
use super::wire::{Frame, FrameError, PROTOCOL_VERSION, read_frame, write_frame};
use super::{
    CLOSE_PROTOCOL, CLOSE_REJECTED, CLOSE_SHUTDOWN, CLOSE_SUPERSEDED, ControlEvent, RejectReason,
    agent_id_of,
};
use core_fsm::ids::AgentId;
use core_fsm::port::JoinBinding;
use iroh::endpoint::{Connection, Incoming, RecvStream, SendStream};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Frames queued for one agent.
const OUTBOX_CAPACITY: usize = 64;

/// How long a refused or shut-down peer gets to read the last frame and close
/// the connection itself before it is closed from here.
const LINGER: Duration = Duration::from_secs(2);

/// Serves one incoming connection to its end.
pub(crate) async fn serve(shared: Arc<Shared>, incoming: Incoming) {
    let Ok(accepting) = incoming.accept() else {
        return;
    };
    // A failed handshake is not a peer we know anything about.
    let Ok(conn) = accepting.await else {
        return;
    };
    if conn.alpn() != super::wire::ALPN {
        let handler = shared
            .side
            .lock()
            .expect("side lock")
            .get(conn.alpn())
            .cloned();
        if let Some(handler) = handler {
            let _ = handler.send(conn).await;
        } else {
            conn.close(CLOSE_PROTOCOL, b"no handler for this protocol");
        }
        return;
    }
    let peer = agent_id_of(conn.remote_id());
    let Some((mut send, recv, hello)) = hello(&shared, &conn, &peer).await else {
        return;
    };
    match admit(&shared, &peer, hello) {
        Ok((binding, rejoined)) => {
            session(&shared, conn, peer, send, recv, binding, rejoined).await
        }
        Err(reason) => {
            let frame = Frame::Rejected {
                reason: reason.to_string(),
            };
            let _ = write_frame(&mut send, &frame).await;
            let _ = send.finish();
            emit(
                &shared,
                ControlEvent::Rejected {
                    peer,
                    reason: reason.clone(),
                },
            )
            .await;
            let _ = tokio::time::timeout(LINGER, conn.closed()).await;
            conn.close(CLOSE_REJECTED, reason.to_string().as_bytes());
        }
    }
}

/// Waits, bounded, for the agent's stream and first frame.
async fn hello(
    shared: &Shared,
    conn: &Connection,
    peer: &AgentId,
) -> Option<(SendStream, RecvStream, Frame)> {
    let timeout = shared.config.hello_timeout;
    let first = tokio::time::timeout(timeout, async {
        let (send, mut recv) = conn.accept_bi().await.ok()?;
        Some(read_frame(&mut recv).await.map(|f| (send, recv, f)))
    })
    .await;
    let reason = match first {
        Ok(Some(Ok((send, recv, Some(frame))))) => return Some((send, recv, frame)),
        Ok(Some(Err(FrameError::WrongVersion { version }))) => {
            RejectReason::WireVersion { version }
        }
        Ok(Some(Err(err))) => bad_frame_reason(&err)?,
        // The peer went away before saying anything.
        Ok(None) | Ok(Some(Ok((_, _, None)))) => return None,
        Err(_) => RejectReason::NoHello,
    };
    // An agent of another wire version cannot read a `Rejected` frame of
    // this one, but every version takes this close code as a refusal and
    // stops dialling, with the reason.
    let code = match reason {
        RejectReason::WireVersion { .. } => CLOSE_REJECTED,
        _ => CLOSE_PROTOCOL,
    };
    conn.close(code, reason.to_string().as_bytes());
    emit(
        shared,
        ControlEvent::Rejected {
            peer: peer.clone(),
            reason,
        },
    )
    .await;
    None
}

/// Decides a hello: the binding admitted, and whether it was a rejoin.
fn admit(
    shared: &Shared,
    peer: &AgentId,
    hello: Frame,
) -> Result<(JoinBinding, bool), RejectReason> {
    let mut state = shared.state.lock().expect("control state lock");
    match hello {
        Frame::Join {
            version,
            token,
            node,
            run,
            lease,
        } => {
            if version != PROTOCOL_VERSION {
                return Err(RejectReason::VersionMismatch { version });
            }
            let claim = Claim {
                token: token.expose(),
                node: &node,
                run,
                lease: lease.as_ref(),
            };
            let binding = state.tokens.redeem(&claim)?;
            let admission = Admission {
                binding: binding.clone(),
                agent: peer.clone(),
            };
            state.admissions.insert(node, admission);
            if let Err(err) = shared.store.save_admissions(&state.admissions) {
                // The join stands; only a later rejoin after a restart of
                // this orchestrator would fail.
                crate::stdout::eline!("drover: could not save admitted agents: {err:#}");
            }
            Ok((binding, false))
        }
        Frame::Rejoin { version, node } => {
            if version != PROTOCOL_VERSION {
                return Err(RejectReason::VersionMismatch { version });
            }
            match state.admissions.get(&node) {
                Some(admission) if admission.agent == *peer => {
                    Ok((admission.binding.clone(), true))
                }
                _ => Err(RejectReason::UnknownAgent { node }),
            }
        }
        other => Err(RejectReason::UnexpectedFrame {
            frame: frame_name(&other),
        }),
    }
}

/// An admitted agent's connection: registered as live, welcomed, then
/// heartbeats are read and the outbox written until the connection ends.
async fn session(
    shared: &Shared,
    conn: Connection,
    peer: AgentId,
    mut send: SendStream,
    mut recv: RecvStream,
    binding: JoinBinding,
    rejoined: bool,
) {
    let (outbox, mut outbox_rx) = mpsc::channel(OUTBOX_CAPACITY);
    let generation = register(shared, &peer, &binding, outbox, conn.clone());
    let event = if rejoined {
        ControlEvent::Rejoined {
            binding: binding.clone(),
            agent: peer.clone(),
        }
    } else {
        ControlEvent::Joined {
            binding: binding.clone(),
            agent: peer.clone(),
        }
    };
    emit(shared, event).await;
    let welcome = Frame::Welcome {
        node: binding.node.clone(),
    };
    if write_frame(&mut send, &welcome).await.is_ok() {
        let reader = read_heartbeats(shared, &conn, &peer, &binding, &mut recv);
        let writer = write_outbox(&conn, &mut send, &mut outbox_rx);
        tokio::select! {
            biased;
            () = reader => {}
            () = writer => {}
        }
    }
    let current = {
        let mut state = shared.state.lock().expect("control state lock");
        let current = state
            .live
            .get(&peer)
            .is_some_and(|l| l.generation == generation);
        if current {
            state.live.remove(&peer);
        }
        current
    };
    // A superseded connection's end is not the agent's end.
    if current {
        emit(
            shared,
            ControlEvent::Disconnected {
                agent: peer,
                node: binding.node,
            },
        )
        .await;
    }
}

/// Registers a live connection; an older one of the same agent is closed.
fn register(
    shared: &Shared,
    peer: &AgentId,
    binding: &JoinBinding,
    outbox: mpsc::Sender<Frame>,
    conn: Connection,
) -> u64 {
    let mut state = shared.state.lock().expect("control state lock");
    state.next_generation += 1;
    let generation = state.next_generation;
    let live = Live {
        node: binding.node.clone(),
        generation,
        outbox,
        conn,
    };
    if let Some(old) = state.live.insert(peer.clone(), live) {
        old.conn
            .close(CLOSE_SUPERSEDED, b"superseded by a newer connection");
    }
    generation
}

async fn read_heartbeats(
    shared: &Shared,
    conn: &Connection,
    peer: &AgentId,
    binding: &JoinBinding,
    recv: &mut RecvStream,
) {
    loop {
        let reason = match read_frame(recv).await {
            Ok(Some(Frame::Heartbeat { seq })) => {
                let event = ControlEvent::Heartbeat {
                    agent: peer.clone(),
                    node: binding.node.clone(),
                    seq,
                };
                if shared.events.try_send(event).is_err() {
                    shared
                        .state
                        .lock()
                        .expect("control state lock")
                        .heartbeats_dropped += 1;
                }
                continue;
            }
            Ok(None) => return,
            Ok(Some(
                frame @ (Frame::RuntimeReady { .. }
                | Frame::ReadyAcked { .. }
                | Frame::StageReport(_)
                | Frame::WeightsFetched { .. }
                | Frame::WeightsFetching { .. }),
            )) => {
                let event = ControlEvent::Pipeline {
                    agent: peer.clone(),
                    node: binding.node.clone(),
                    frame: Box::new(frame),
                };
                emit(shared, event).await;
                continue;
            }
            Ok(Some(other)) => RejectReason::UnexpectedFrame {
                frame: frame_name(&other),
            },
            Err(err) => match bad_frame_reason(&err) {
                Some(reason) => reason,
                None => return,
            },
        };
        conn.close(CLOSE_PROTOCOL, reason.to_string().as_bytes());
        emit(
            shared,
            ControlEvent::Rejected {
                peer: peer.clone(),
                reason,
            },
        )
        .await;
        return;
    }
}

async fn write_outbox(
    conn: &Connection,
    send: &mut SendStream,
    outbox: &mut mpsc::Receiver<Frame>,
) {
    while let Some(frame) = outbox.recv().await {
        if write_frame(send, &frame).await.is_err() {
            return;
        }
        if frame == Frame::Shutdown {
            let _ = send.finish();
            // The agent closes on Shutdown; close from here if it does not.
            let _ = tokio::time::timeout(LINGER, conn.closed()).await;
            conn.close(CLOSE_SHUTDOWN, b"shutdown");
            return;
        }
    }
}

/// The reason to report for a frame error; `None` for a plain I/O end (the
/// connection was lost, nothing to blame on the frame).
fn bad_frame_reason(err: &FrameError) -> Option<RejectReason> {
    match err {
        FrameError::Io(_) => None,
        other => Some(RejectReason::BadFrame {
            detail: other.to_string(),
        }),
    }
}

fn frame_name(frame: &Frame) -> &'static str {
    match frame {
        Frame::Join { .. } => "Join",
        Frame::Rejoin { .. } => "Rejoin",
        Frame::Welcome { .. } => "Welcome",
        Frame::Rejected { .. } => "Rejected",
        Frame::Heartbeat { .. } => "Heartbeat",
        Frame::Shutdown => "Shutdown",
        Frame::Pipeline { .. } => "Pipeline",
        Frame::RuntimeReady { .. } => "RuntimeReady",
        Frame::ReadyAck { .. } => "ReadyAck",
        Frame::ReadyAcked { .. } => "ReadyAcked",
        Frame::Provision(_) => "Provision",
        Frame::Prefetch(_) => "Prefetch",
        Frame::StopStage { .. } => "StopStage",
        Frame::StageReport(_) => "StageReport",
        Frame::WeightsFetched { .. } => "WeightsFetched",
        Frame::Crash => "Crash",
        Frame::WeightsFetching { .. } => "WeightsFetching",
    }
}

async fn emit(shared: &Shared, event: ControlEvent) {
    // A dropped receiver means nobody listens any more; nothing to do.
    let _ = shared.events.send(event).await;
}
