//! One rented machine as a madsim node: an SSH server that answers the
//! orchestrator's commands as the lease's state and the kit's SSH faults
//! say, and the agent a successful start command launches, which dials the
//! orchestrator's control plane with its join token.
//!
//! Killing the node (destroy, exit, reboot) drops the SSH connections and
//! the agent; a reboot brings the SSH server and the agent service back.

use crate::orch::SimClock;
use crate::state::{ORCHESTRATOR_IP, World, WorldState};
use crate::wire::{
    CONTROL_PORT, JoinAnswer, JoinRequest, JoinToken, SSH_PORT, SshReply, SshRequest,
};
use conformance::case::{HostFault, LeaseFault, NetFault, OpFault, OpKind};
use core_fsm::ids::{AgentId, LeaseId, OpId};
use core_fsm::port::{CommandPurpose, LogStream, SshError, SshErrorKind};
use driver::Clock as _;
use madsim::net::{Endpoint, Receiver, Sender};
use madsim::task::JoinHandle;
use sim::world::provider::Status;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// How long a command takes on a healthy machine.
const COMMAND_MS: u64 = 200;
/// Join attempts of one agent, and the pause between two.
const JOIN_TRIES_MAX: u32 = 30;
const JOIN_RETRY: Duration = Duration::from_secs(2);
/// How long an agent waits for the transport's answer.
const JOIN_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The machine of lease `ordinal`: serves SSH until the node dies.
pub(crate) async fn serve(world: Arc<World>, clock: SimClock, ordinal: u32) {
    // A machine that boots again starts its agent service again (the
    // service manager does; the process itself died with the machine).
    let service = world.lock().agents.get(&ordinal).cloned();
    if let Some((token, agent)) = service {
        let lease_id = Machine::lease_id(&world.lock(), ordinal);
        if let Some(lease_id) = lease_id {
            let me = Agent {
                world: Arc::clone(&world),
                clock,
                lease_id,
            };
            madsim::task::spawn_local(me.run(token, agent, 1, false));
        }
    }
    let ep = Endpoint::bind((std::net::Ipv4Addr::UNSPECIFIED, SSH_PORT))
        .await
        .expect("the SSH port is free on a fresh machine");
    while let Ok((sender, receiver, _from)) = ep.accept1().await {
        let machine = Machine {
            world: Arc::clone(&world),
            clock,
            ordinal,
        };
        madsim::task::spawn_local(machine.connection(sender, receiver));
    }
}

#[derive(Clone)]
struct Machine {
    world: Arc<World>,
    clock: SimClock,
    ordinal: u32,
}

/// What the server does with a connection's first message.
enum Hello {
    /// Answer it (and keep the connection only if it is `Ok`).
    Answer(Result<(), SshError>),
    /// Never answer (the port's timeout reports it).
    Silent,
}

fn ssh_error(kind: SshErrorKind, message: &str) -> SshError {
    SshError {
        kind,
        message: message.to_owned(),
    }
}

/// Replies of one connection, and the switch that resets it.
#[derive(Clone)]
struct Conn {
    out: UnboundedSender<SshReply>,
    writer: Rc<JoinHandle<()>>,
}

impl Conn {
    fn send(&self, reply: SshReply) {
        let _ = self.out.send(reply);
    }

    /// Drops the stream: the client sees the connection reset.
    fn reset(&self) {
        self.writer.abort();
    }
}

impl Machine {
    fn lease_id(w: &WorldState, ordinal: u32) -> Option<LeaseId> {
        let lease = w.provider.leases.values().find(|l| l.ordinal == ordinal)?;
        Some(lease.facts.lease_id.clone())
    }

    async fn connection(self, sender: Sender, mut receiver: Receiver) {
        let (out, mut replies) = unbounded_channel::<SshReply>();
        let writer = madsim::task::spawn_local(async move {
            while let Some(reply) = replies.recv().await {
                if sender.send(Box::new(reply)).await.is_err() {
                    return;
                }
            }
        });
        let conn = Conn {
            out,
            writer: Rc::new(writer),
        };
        let Ok(first) = receiver.recv().await else {
            return;
        };
        let Ok(hello) = first.downcast::<SshRequest>() else {
            return;
        };
        let SshRequest::Hello { lease_id, .. } = *hello else {
            return;
        };
        let (hello, net) = self.hello(&lease_id);
        let accepted = match (hello, net) {
            (Hello::Silent, _) | (_, Some(NetFault::Drop)) => false,
            (Hello::Answer(result), net) => {
                if let Some(NetFault::Delay { ms }) = net {
                    madsim::time::sleep(Duration::from_millis(ms)).await;
                }
                let ok = result.is_ok();
                conn.send(SshReply::Hello(result));
                ok
            }
        };
        if !accepted {
            // Hold the connection until the client gives up on it.
            while receiver.recv().await.is_ok() {}
            return;
        }
        let commands: Rc<RefCell<Vec<JoinHandle<()>>>> = Rc::default();
        while let Ok(payload) = receiver.recv().await {
            match payload.downcast::<SshRequest>().map(|r| *r) {
                Ok(SshRequest::Exec {
                    op, purpose, token, ..
                }) => {
                    let task = self.clone().exec(conn.clone(), op, purpose, token);
                    commands.borrow_mut().push(madsim::task::spawn_local(task));
                }
                Ok(SshRequest::Close) => break,
                _ => {}
            }
        }
        // The session ends: its commands (tails above all) end with it.
        for command in commands.borrow().iter() {
            command.abort();
        }
        conn.reset();
    }

    /// Decides the handshake like tier 1's SSH host does.
    fn hello(&self, lease_id: &LeaseId) -> (Hello, Option<NetFault>) {
        let now = self.clock.now();
        let mut w = self.world.lock();
        let nth = w.ordinal(OpKind::Connect);
        let fault = w.op_fault(now, OpKind::Connect, nth);
        let net = w.net_fault(OpKind::Connect, nth);
        let own = Machine::lease_id(&w, self.ordinal);
        let status = w.provider.status(lease_id, now);
        let host = w.provider.get(lease_id).map(|l| l.host);
        let host_fault = host.and_then(|h| w.faults.host.get(&h).copied());
        let refused = Hello::Answer(Err(ssh_error(SshErrorKind::Refused, "connection refused")));
        let hello = match (fault, status) {
            (Some(OpFault::Timeout), _) | (_, Status::Down(_)) => Hello::Silent,
            (Some(OpFault::AuthDenied), _) => {
                Hello::Answer(Err(ssh_error(SshErrorKind::AuthDenied, "publickey denied")))
            }
            (Some(OpFault::Refused), _) | (_, Status::Loading | Status::Running | Status::Gone) => {
                refused
            }
            _ if host_fault == Some(HostFault::Refuses) => refused,
            _ if own.as_ref() != Some(lease_id) => Hello::Answer(Err(ssh_error(
                SshErrorKind::HostKeyMismatch,
                "another machine answers at this endpoint",
            ))),
            _ => Hello::Answer(Ok(())),
        };
        (hello, net)
    }

    async fn exec(self, conn: Conn, op: OpId, purpose: CommandPurpose, token: Option<JoinToken>) {
        let kind = match purpose {
            CommandPurpose::Probe => OpKind::Probe,
            CommandPurpose::Verify(_) => OpKind::Verify,
            CommandPurpose::Start => OpKind::Start,
            CommandPurpose::Tail => return self.tail(conn, op).await,
        };
        let now = self.clock.now();
        let (fault, net, host_fault, alive) = {
            let mut w = self.world.lock();
            let nth = w.ordinal(kind);
            let fault = w.op_fault(now, kind, nth);
            let net = w.net_fault(kind, nth);
            let lease = Machine::lease_id(&w, self.ordinal);
            let lease = lease.and_then(|id| w.provider.get(&id).map(|l| (id, l.host)));
            let host_fault = lease
                .as_ref()
                .and_then(|(_, host)| w.faults.host.get(host).copied());
            let alive =
                lease.is_some_and(|(id, _)| w.provider.status(&id, now) == Status::Reachable);
            (fault, net, host_fault, alive)
        };
        let outputs = output_of(purpose);
        let result = match fault {
            _ if !alive => return conn.reset(),
            Some(OpFault::Reset) => {
                if let Some((stream, line)) = outputs.into_iter().next() {
                    conn.send(SshReply::Output { op, stream, line });
                }
                madsim::time::sleep(Duration::from_millis(COMMAND_MS / 2)).await;
                return conn.reset();
            }
            // The command hangs; the machine's own command timeout ends it.
            Some(OpFault::Timeout) => return std::future::pending().await,
            Some(OpFault::Exit { code }) => Ok(code),
            _ if kind == OpKind::Verify && host_fault == Some(HostFault::VerifyFails) => Ok(1),
            _ => Ok(0),
        };
        if let (Ok(0), Some(token)) = (&result, token) {
            self.launch_agent(token);
        }
        let extra = match net {
            Some(NetFault::Drop) => return std::future::pending().await,
            Some(NetFault::Delay { ms }) => ms,
            _ => 0,
        };
        madsim::time::sleep(Duration::from_millis(COMMAND_MS + extra)).await;
        for (stream, line) in outputs {
            conn.send(SshReply::Output { op, stream, line });
        }
        let copies = if net == Some(NetFault::Duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            conn.send(SshReply::Exited {
                op,
                result: result.clone(),
            });
        }
    }

    /// Follows the boot log: a few lines, then nothing until the session
    /// ends (the connection's end aborts this task).
    async fn tail(self, conn: Conn, op: OpId) {
        for line in ["[boot] image pulled", "[boot] drover-agent installed"] {
            madsim::time::sleep(Duration::from_millis(COMMAND_MS)).await;
            conn.send(SshReply::Output {
                op,
                stream: LogStream::Stdout,
                line: line.to_owned(),
            });
        }
        std::future::pending().await
    }

    /// The start command ran: its agent starts (as the lease's agent
    /// faults say) and dials the orchestrator.
    fn launch_agent(&self, token: JoinToken) {
        let mut w = self.world.lock();
        let Some(lease_id) = Machine::lease_id(&w, self.ordinal) else {
            return;
        };
        let Some(lease) = w.provider.get(&lease_id) else {
            return;
        };
        let agent = AgentId::new(format!("agent-{}", lease.facts.contract_id));
        let faulty = w.faulty();
        let has = |f: fn(&LeaseFault) -> bool| faulty && w.faults.lease_has(self.ordinal, f);
        let never = has(|f| matches!(f, LeaseFault::AgentNeverJoins));
        let wrong = has(|f| matches!(f, LeaseFault::AgentWrongToken));
        let twice = has(|f| matches!(f, LeaseFault::AgentJoinsTwice));
        let stale = has(|f| matches!(f, LeaseFault::StaleJoin));
        let crashes = has(|f| matches!(f, LeaseFault::AgentCrashesAfterHandoff));
        if crashes {
            w.injected("agent-crashes");
        }
        if never {
            w.injected("agent-never-joins");
            return;
        }
        let binding = w
            .tokens
            .iter()
            .find(|(_, t)| t.value == token)
            .map(|(b, _)| b.clone());
        let stale = stale
            .then(|| binding.and_then(|b| w.stale_binding(&b)))
            .flatten();
        if stale.is_some() {
            w.injected("agent-stale-join");
        }
        let presented = if wrong {
            JoinToken(token.0 ^ 0x5a5a_5a5a)
        } else {
            token
        };
        w.agents.insert(self.ordinal, (presented, agent.clone()));
        drop(w);
        let joins = if twice { 2 } else { 1 };
        let me = Agent {
            world: Arc::clone(&self.world),
            clock: self.clock,
            lease_id: lease_id.clone(),
        };
        madsim::task::spawn_local(me.clone().run(presented, agent, joins, wrong));
        if let Some((old, old_token)) = stale {
            let agent = AgentId::new(format!("agent-stale-{}", old.lease_id));
            madsim::task::spawn_local(me.run(old_token, agent, 1, false));
        }
    }
}

/// What a healthy machine prints for a command.
fn output_of(purpose: CommandPurpose) -> Vec<(LogStream, String)> {
    match purpose {
        CommandPurpose::Probe => vec![(LogStream::Stdout, "drover probe: ok".to_owned())],
        CommandPurpose::Verify(i) => vec![(LogStream::Stdout, format!("check {i}: ok"))],
        CommandPurpose::Start => vec![
            (LogStream::Stdout, "drover-agent: starting".to_owned()),
            (
                LogStream::Stderr,
                "drover-agent: dialing orchestrator".to_owned(),
            ),
        ],
        CommandPurpose::Tail => Vec::new(),
    }
}

/// An agent process on a machine.
#[derive(Clone)]
struct Agent {
    world: Arc<World>,
    clock: SimClock,
    lease_id: LeaseId,
}

impl Agent {
    /// Dials the control plane until `joins` joins were accepted, the token
    /// was rejected, or the tries ran out.
    async fn run(self, token: JoinToken, agent: AgentId, mut joins: u32, wrong: bool) {
        let join_ms = self.world.lock().case.profile.join_ms;
        madsim::time::sleep(Duration::from_millis(join_ms)).await;
        for _ in 0..JOIN_TRIES_MAX {
            if !self.alive() {
                return;
            }
            match join_once(token, agent.clone()).await {
                Some(JoinAnswer::Accepted) => {
                    joins -= 1;
                    if joins == 0 {
                        return;
                    }
                    self.world.lock().injected("agent-joins-twice");
                    madsim::time::sleep(Duration::from_secs(1)).await;
                }
                Some(JoinAnswer::Rejected) => {
                    if wrong {
                        self.world.lock().injected("agent-wrong-token");
                    }
                    return;
                }
                None => madsim::time::sleep(JOIN_RETRY).await,
            }
        }
    }

    fn alive(&self) -> bool {
        let now = self.clock.now();
        let w = self.world.lock();
        matches!(
            w.provider.status(&self.lease_id, now),
            Status::Reachable | Status::Running
        )
    }
}

/// One dial of the control plane; `None` when no answer came.
async fn join_once(token: JoinToken, agent: AgentId) -> Option<JoinAnswer> {
    let ep = Endpoint::bind("0.0.0.0:0").await.ok()?;
    let addr = SocketAddr::new(ORCHESTRATOR_IP, CONTROL_PORT);
    let (sender, mut receiver) = ep.connect1(addr).await.ok()?;
    sender
        .send(Box::new(JoinRequest { token, agent }))
        .await
        .ok()?;
    let answer = madsim::time::timeout(JOIN_ANSWER_TIMEOUT, receiver.recv()).await;
    let payload = answer.ok()?.ok()?;
    payload.downcast::<JoinAnswer>().ok().map(|a| *a)
}
