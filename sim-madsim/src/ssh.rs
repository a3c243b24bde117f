//! The orchestrator's SSH port: one madsim stream per session's connection,
//! the handshake under the port's own connect timeout, commands and their
//! output over the stream, join tokens minted for start commands.
//!
//! The port answers every operation: a connect with its outcome or a
//! timeout, a command with its exit or a reset when the connection breaks,
//! a close at once (closing a connection locally cannot fail). Output of a
//! connection it closed is discarded, as a real client discards the buffers
//! of a closed channel.

use crate::orch::SimClock;
use crate::state::{World, machine_ip};
use crate::wire::{SSH_PORT, SshReply, SshRequest};
use conformance::oracle::Observation;
use core_fsm::ids::{LeaseId, OpId, SessionId};
use core_fsm::port::{Effect, Input, SshEndpoint, SshError, SshErrorKind};
use driver::Clock as _;
use madsim::net::{Endpoint, Receiver, Sender};
use madsim::task::JoinHandle;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// How long the port tries to connect and authenticate. Shorter than the
/// bootstrap machine's per-attempt deadline, so the port answers first.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause between two dials of one connect (a lost SYN, a clogged link).
const DIAL_RETRY: Duration = Duration::from_secs(1);

fn ssh_error(kind: SshErrorKind, message: &str) -> SshError {
    SshError {
        kind,
        message: message.to_owned(),
    }
}

/// One session's connection.
struct Conn {
    lease_id: LeaseId,
    generation: u64,
    open: Option<Rc<Sender>>,
    pending: BTreeSet<OpId>,
    task: Option<JoinHandle<()>>,
}

/// The port's connections, shared with its tasks and the inbox filter.
#[derive(Default)]
pub(crate) struct Sessions {
    conns: BTreeMap<SessionId, Conn>,
    closed: BTreeSet<SessionId>,
    exec_session: BTreeMap<OpId, SessionId>,
}

impl Sessions {
    /// Whether the inbox should deliver `input` (output of a closed
    /// session's commands is discarded).
    pub(crate) fn wanted(&self, input: &Input) -> bool {
        match input {
            Input::SshOutput { op, .. } => self
                .exec_session
                .get(op)
                .is_none_or(|session| !self.closed.contains(session)),
            _ => true,
        }
    }
}

/// Context every connection task needs.
#[derive(Clone)]
struct Ctx {
    world: Arc<World>,
    sessions: Rc<RefCell<Sessions>>,
    tx: UnboundedSender<Input>,
    inc: u32,
    clock: SimClock,
}

impl Ctx {
    /// Records an opened or closed connection with the oracle, if this
    /// incarnation still runs.
    fn observe_conn(&self, session: SessionId, opened: Option<&LeaseId>) {
        let mut w = self.world.lock();
        if w.inc != self.inc || !w.orch_up {
            return;
        }
        let now = self.clock.now();
        match opened {
            Some(lease) => {
                w.open_sessions.insert(session, lease.clone());
                w.observe(now, Observation::ConnectionOpened { session, lease });
            }
            None => {
                if w.open_sessions.remove(&session).is_some() {
                    w.observe(now, Observation::ConnectionClosed(session));
                }
            }
        }
    }
}

/// The orchestrator's SSH port.
pub(crate) struct SshPort {
    ctx: Ctx,
    ep: Rc<Endpoint>,
    generation: u64,
}

impl SshPort {
    /// A port for incarnation `inc`.
    pub(crate) async fn new(
        world: Arc<World>,
        tx: UnboundedSender<Input>,
        inc: u32,
        clock: SimClock,
    ) -> SshPort {
        let ep = Endpoint::bind("0.0.0.0:0")
            .await
            .expect("an ephemeral port is free");
        SshPort {
            ctx: Ctx {
                world,
                sessions: Rc::default(),
                tx,
                inc,
                clock,
            },
            ep: Rc::new(ep),
            generation: 0,
        }
    }

    /// The connections, for the inbox's filter.
    pub(crate) fn shared(&self) -> Rc<RefCell<Sessions>> {
        Rc::clone(&self.ctx.sessions)
    }

    /// Starts the operation of an SSH effect.
    pub(crate) async fn dispatch(&mut self, effect: Effect) {
        match effect {
            Effect::SshConnect {
                op,
                session,
                endpoint,
                lease_id,
            } => self.connect(op, session, endpoint, lease_id),
            Effect::SshExec {
                op,
                session,
                command,
                purpose,
                join,
            } => {
                let token = join.map(|binding| self.ctx.world.lock().mint(binding));
                let request = SshRequest::Exec {
                    op,
                    purpose,
                    command: command.to_string(),
                    token,
                };
                self.exec(op, session, request).await;
            }
            Effect::SshClose { op, session } => {
                if let Some(conn) = self.drop_conn(session)
                    && let Some(sender) = conn.open
                {
                    // Best effort, like an SSH disconnect message.
                    let _ = sender.send(Box::new(SshRequest::Close)).await;
                }
                self.ctx.sessions.borrow_mut().closed.insert(session);
                let _ = self.ctx.tx.send(Input::SshClosed { op });
            }
            other => unreachable!("not an SSH effect: {other:?}"),
        }
    }

    /// Forgets `session`'s connection (closing it) and returns it.
    fn drop_conn(&mut self, session: SessionId) -> Option<Conn> {
        let conn = self.ctx.sessions.borrow_mut().conns.remove(&session)?;
        if let Some(task) = &conn.task {
            task.abort();
        }
        if conn.open.is_some() {
            self.ctx.observe_conn(session, None);
        }
        Some(conn)
    }

    fn connect(&mut self, op: OpId, session: SessionId, endpoint: SshEndpoint, lease_id: LeaseId) {
        // A new attempt replaces the session's previous connection.
        self.drop_conn(session);
        self.generation += 1;
        let generation = self.generation;
        let key = (endpoint.host.to_string(), endpoint.port);
        let target = self.ctx.world.lock().nat.get(&key).copied();
        let target = target.map(|ordinal| SocketAddr::new(machine_ip(ordinal), SSH_PORT));
        let hello = SshRequest::Hello {
            session,
            lease_id: lease_id.clone(),
            user: endpoint.user.to_string(),
        };
        let (ctx, ep) = (self.ctx.clone(), Rc::clone(&self.ep));
        let task = madsim::task::spawn_local(async move {
            let attempt = madsim::time::timeout(CONNECT_TIMEOUT, handshake(&ep, target, hello));
            let result = match attempt.await {
                Err(_) => Err(ssh_error(SshErrorKind::Timeout, "connect timed out")),
                Ok(Err(e)) => Err(e),
                Ok(Ok((sender, receiver))) => {
                    opened(&ctx, session, generation, sender, receiver);
                    Ok(())
                }
            };
            let current = ctx
                .sessions
                .borrow()
                .conns
                .get(&session)
                .is_some_and(|c| c.generation == generation);
            if current {
                let _ = ctx.tx.send(Input::SshConnected { op, result });
            }
        });
        let conn = Conn {
            lease_id,
            generation,
            open: None,
            pending: BTreeSet::new(),
            task: Some(task),
        };
        self.ctx.sessions.borrow_mut().conns.insert(session, conn);
    }

    async fn exec(&mut self, op: OpId, session: SessionId, request: SshRequest) {
        let sender = {
            let mut sessions = self.ctx.sessions.borrow_mut();
            sessions.exec_session.insert(op, session);
            let conn = sessions.conns.get_mut(&session);
            match conn.and_then(|c| c.open.clone().map(|s| (s, c))) {
                Some((sender, conn)) => {
                    conn.pending.insert(op);
                    Some(sender)
                }
                None => None,
            }
        };
        let sent = match sender {
            Some(sender) => sender.send(Box::new(request)).await.is_ok(),
            None => false,
        };
        if !sent {
            if let Some(conn) = self.ctx.sessions.borrow_mut().conns.get_mut(&session) {
                conn.pending.remove(&op);
            }
            let result = Err(ssh_error(SshErrorKind::Reset, "not connected"));
            let _ = self.ctx.tx.send(Input::SshExited { op, result });
        }
    }
}

/// Dials (again and again, like TCP's SYN retries) and authenticates.
async fn handshake(
    ep: &Endpoint,
    target: Option<SocketAddr>,
    hello: SshRequest,
) -> Result<(Sender, Receiver), SshError> {
    let Some(addr) = target else {
        return Err(ssh_error(SshErrorKind::Other, "no route to host"));
    };
    let (sender, mut receiver) = loop {
        match ep.connect1(addr).await {
            Ok(pair) => break pair,
            Err(_) => madsim::time::sleep(DIAL_RETRY).await,
        }
    };
    let reset = || ssh_error(SshErrorKind::Reset, "connection reset during the handshake");
    sender.send(Box::new(hello)).await.map_err(|_| reset())?;
    let payload = receiver.recv().await.map_err(|_| reset())?;
    match payload.downcast::<SshReply>().map(|reply| *reply) {
        Ok(SshReply::Hello(Ok(()))) => Ok((sender, receiver)),
        Ok(SshReply::Hello(Err(e))) => Err(e),
        _ => Err(reset()),
    }
}

/// The handshake succeeded: the connection is open; read it.
fn opened(ctx: &Ctx, session: SessionId, generation: u64, sender: Sender, receiver: Receiver) {
    let lease = {
        let mut sessions = ctx.sessions.borrow_mut();
        let Some(conn) = sessions.conns.get_mut(&session) else {
            return;
        };
        if conn.generation != generation {
            return;
        }
        conn.open = Some(Rc::new(sender));
        conn.lease_id.clone()
    };
    ctx.observe_conn(session, Some(&lease));
    let reader = madsim::task::spawn_local(read(ctx.clone(), session, generation, receiver));
    if let Some(conn) = ctx.sessions.borrow_mut().conns.get_mut(&session) {
        conn.task = Some(reader);
    }
}

/// Forwards output and exits of pending commands until the stream breaks;
/// then every pending command ends with a reset.
async fn read(ctx: Ctx, session: SessionId, generation: u64, mut receiver: Receiver) {
    while let Ok(payload) = receiver.recv().await {
        let Ok(reply) = payload.downcast::<SshReply>() else {
            continue;
        };
        let mut sessions = ctx.sessions.borrow_mut();
        let Some(conn) = sessions.conns.get_mut(&session) else {
            return;
        };
        match *reply {
            SshReply::Output { op, stream, line } if conn.pending.contains(&op) => {
                let _ = ctx.tx.send(Input::SshOutput { op, stream, line });
            }
            // A second exit of one command is absorbed, as a real client
            // has closed that channel.
            SshReply::Exited { op, result } if conn.pending.remove(&op) => {
                let _ = ctx.tx.send(Input::SshExited { op, result });
            }
            _ => {}
        }
    }
    let conn = {
        let mut sessions = ctx.sessions.borrow_mut();
        let current = sessions
            .conns
            .get(&session)
            .is_some_and(|c| c.generation == generation);
        if !current {
            return;
        }
        sessions.conns.remove(&session)
    };
    ctx.observe_conn(session, None);
    for op in conn.map(|c| c.pending).unwrap_or_default() {
        let result = Err(ssh_error(SshErrorKind::Reset, "connection reset by peer"));
        let _ = ctx.tx.send(Input::SshExited { op, result });
    }
}
