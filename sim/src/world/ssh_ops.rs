//! The SSH side of dispatch: connections, commands, log tails, the join
//! tokens the start command mints, and the agents that join with them.

use super::provider::Status;
use super::ssh::output_of;
use super::{Event, World};
use conformance::System;
use conformance::case::{HostFault, LeaseFault, OpFault, OpKind};
use conformance::oracle::Observation;
use core_fsm::ids::{AgentId, LeaseId, OpId, SessionId};
use core_fsm::port::{CommandPurpose, Input, JoinBinding, SshError, SshErrorKind};
use core_fsm::time::Duration;

/// How long the SSH port waits before it reports a timeout itself.
const SSH_PORT_TIMEOUT: Duration = Duration::from_secs(30);

fn ssh_error(kind: SshErrorKind, message: &str) -> SshError {
    SshError {
        kind,
        message: message.to_owned(),
    }
}

impl<S: System> World<'_, S> {
    /// Closes a session's connection; returns the exits of its tails.
    pub(super) fn close_connection(&mut self, session: SessionId) -> Vec<Input> {
        if self.ssh.close(session) {
            self.observe(Observation::ConnectionClosed(session));
        }
        self.ssh
            .ended_tails(session)
            .into_iter()
            .map(|op| Input::SshExited {
                op,
                result: Err(ssh_error(SshErrorKind::Reset, "connection closed")),
            })
            .collect()
    }

    pub(super) fn connect(
        &mut self,
        op: OpId,
        session: SessionId,
        endpoint: &core_fsm::port::SshEndpoint,
        lease_id: LeaseId,
    ) {
        let nth = self.ordinal(OpKind::Connect);
        let fault = self.op_fault(OpKind::Connect, nth);
        if let Some(f) = fault {
            let item = conformance::case::Item::Op {
                op: OpKind::Connect,
                nth,
                fault: f,
            };
            self.injected(conformance::fault::name_of(&item));
        }
        let status = self.provider.status(&lease_id, self.now);
        let lease = self.provider.get(&lease_id);
        let host_fault = lease.and_then(|l| self.faults.host.get(&l.host).copied());
        let right_endpoint =
            lease.is_some_and(|l| super::provider::Provider::endpoint(l) == *endpoint);
        let (result, extra) = match (fault, status) {
            (Some(OpFault::Timeout), _) | (_, Status::Down(_)) => (
                Err(ssh_error(SshErrorKind::Timeout, "connect timed out")),
                SSH_PORT_TIMEOUT,
            ),
            (Some(OpFault::AuthDenied), _) => (
                Err(ssh_error(SshErrorKind::AuthDenied, "publickey denied")),
                Duration::ZERO,
            ),
            (Some(OpFault::Refused), _) | (_, Status::Loading | Status::Running | Status::Gone) => {
                (
                    Err(ssh_error(SshErrorKind::Refused, "connection refused")),
                    Duration::ZERO,
                )
            }
            _ if host_fault == Some(HostFault::Refuses) => (
                Err(ssh_error(SshErrorKind::Refused, "connection refused")),
                Duration::ZERO,
            ),
            _ if !right_endpoint => (
                Err(ssh_error(SshErrorKind::Other, "no route to that endpoint")),
                Duration::ZERO,
            ),
            _ => {
                self.connecting.insert(op, (session, lease_id));
                (Ok(()), Duration::from_millis(300))
            }
        };
        self.answer_on(
            Some(session),
            OpKind::Connect,
            nth,
            vec![Input::SshConnected { op, result }],
            extra,
        );
    }

    pub(super) fn exec(
        &mut self,
        op: OpId,
        session: SessionId,
        purpose: CommandPurpose,
        join: Option<JoinBinding>,
    ) {
        let kind = match purpose {
            CommandPurpose::Probe => OpKind::Probe,
            CommandPurpose::Verify(_) => OpKind::Verify,
            CommandPurpose::Start => OpKind::Start,
            CommandPurpose::Tail => OpKind::Tail,
        };
        let nth = self.ordinal(kind);
        let fault = self.op_fault(kind, nth);
        if let Some(f) = fault {
            let item = conformance::case::Item::Op {
                op: kind,
                nth,
                fault: f,
            };
            self.injected(conformance::fault::name_of(&item));
        }
        let Some(lease_id) = self.ssh.open_lease(session).cloned() else {
            let result = Err(ssh_error(SshErrorKind::Reset, "not connected"));
            return self.answer_on(
                Some(session),
                kind,
                nth,
                vec![Input::SshExited { op, result }],
                Duration::ZERO,
            );
        };
        let host_fault = self
            .provider
            .get(&lease_id)
            .and_then(|l| self.faults.host.get(&l.host).copied());
        let alive = matches!(self.provider.status(&lease_id, self.now), Status::Reachable);
        let mut inputs: Vec<Input> = output_of(purpose)
            .into_iter()
            .map(|(stream, line)| Input::SshOutput { op, stream, line })
            .collect();
        let result = match fault {
            _ if !alive => Err(ssh_error(SshErrorKind::Reset, "connection reset by peer")),
            Some(OpFault::Reset) => {
                inputs.truncate(1);
                Err(ssh_error(
                    SshErrorKind::Reset,
                    "connection reset mid-command",
                ))
            }
            Some(OpFault::Timeout) => {
                inputs.clear();
                Err(ssh_error(SshErrorKind::Timeout, "command timed out"))
            }
            Some(OpFault::Exit { code }) => Ok(code),
            _ if kind == OpKind::Verify && host_fault == Some(HostFault::VerifyFails) => Ok(1),
            _ => Ok(0),
        };
        if kind == OpKind::Tail && alive {
            return self.tail(op, session, fault, inputs, nth);
        }
        let mut ended = Vec::new();
        if matches!(
            result,
            Err(SshError {
                kind: SshErrorKind::Reset,
                ..
            })
        ) {
            ended = self.close_connection(session);
        }
        if let (Ok(0), CommandPurpose::Start, Some(binding)) = (&result, purpose, join) {
            self.launch_agent(binding);
            if let Some(tail) = self.ssh.tails.get(&session).and_then(|t| t.first()) {
                let line = "boot: agent launched".to_owned();
                inputs.push(Input::SshOutput {
                    op: *tail,
                    stream: core_fsm::port::LogStream::Stdout,
                    line,
                });
            }
        }
        let extra = match result {
            Err(SshError {
                kind: SshErrorKind::Timeout,
                ..
            }) => SSH_PORT_TIMEOUT,
            _ => Duration::from_millis(200),
        };
        inputs.push(Input::SshExited { op, result });
        inputs.extend(ended);
        self.answer_on(Some(session), kind, nth, inputs, extra);
    }

    /// A log tail: its lines now, its end when the connection closes (or at
    /// once, when the plan breaks the stream).
    pub(super) fn tail(
        &mut self,
        op: OpId,
        session: SessionId,
        fault: Option<OpFault>,
        mut inputs: Vec<Input>,
        nth: u32,
    ) {
        if fault == Some(OpFault::Reset) {
            inputs.truncate(1);
            let result = Err(ssh_error(SshErrorKind::Reset, "log stream reset"));
            inputs.push(Input::SshExited { op, result });
        } else {
            self.ssh.tails.entry(session).or_default().push(op);
        }
        self.answer_on(
            Some(session),
            OpKind::Tail,
            nth,
            inputs,
            Duration::from_millis(100),
        );
    }

    /// The start command ran: the port minted a token and the agent starts.
    pub(super) fn launch_agent(&mut self, binding: JoinBinding) {
        self.ssh.mint(binding.clone());
        let Some(lease) = self.provider.get(&binding.lease_id) else {
            return;
        };
        let ordinal = lease.ordinal;
        let faulty = self.faulty();
        let has = |f: fn(&LeaseFault) -> bool| faulty && self.faults.lease_has(ordinal, f);
        let never = has(|f| matches!(f, LeaseFault::AgentNeverJoins));
        let wrong = has(|f| matches!(f, LeaseFault::AgentWrongToken));
        let twice = has(|f| matches!(f, LeaseFault::AgentJoinsTwice));
        let stale = has(|f| matches!(f, LeaseFault::StaleJoin));
        let crashes = has(|f| matches!(f, LeaseFault::AgentCrashesAfterHandoff));
        let agent = AgentId::new(format!("agent-{}", lease.facts.contract_id));
        let at = self.now
            + Duration::from_millis(self.case.profile.latency_ms + self.case.profile.join_ms);
        if crashes {
            self.injected("agent-crashes");
        }
        if crashes && !never && !wrong {
            // Membership holds it Dead some seconds after its handoff.
            let dead = at + Duration::from_millis(6_000);
            let lost = Event::AgentLost {
                node: binding.node.clone(),
                agent: agent.clone(),
            };
            self.schedule(dead, lost);
        }
        if never {
            self.injected("agent-never-joins");
            return;
        }
        let valid = !wrong;
        self.schedule(
            at,
            Event::Join {
                binding: binding.clone(),
                agent: agent.clone(),
                valid,
                tries: 0,
            },
        );
        if twice {
            self.injected("agent-joins-twice");
            let again = at + Duration::from_millis(1_000);
            self.schedule(
                again,
                Event::Join {
                    binding: binding.clone(),
                    agent,
                    valid,
                    tries: 0,
                },
            );
        }
        if stale && let Some(old) = self.ssh.stale_binding(&binding) {
            let agent = AgentId::new(format!("agent-stale-{}", old.lease_id));
            self.injected("agent-stale-join");
            self.schedule(
                at,
                Event::Join {
                    binding: old,
                    agent,
                    valid: true,
                    tries: 0,
                },
            );
        }
    }

    /// An agent dials the transport.
    pub(super) fn join(&mut self, binding: JoinBinding, agent: AgentId, valid: bool, tries: u32) {
        if !valid {
            self.injected("agent-wrong-token");
            self.note(|| format!("transport: rejected a wrong token for {}", binding.node));
            return;
        }
        if !matches!(
            self.provider.status(&binding.lease_id, self.now),
            Status::Reachable | Status::Running
        ) {
            return;
        }
        if self.orch.is_none() {
            if tries < 30 {
                let at = self.now + Duration::from_secs(2);
                self.schedule(
                    at,
                    Event::Join {
                        binding,
                        agent,
                        valid,
                        tries: tries + 1,
                    },
                );
            }
            return;
        }
        if !self.ssh.accepts(&binding) {
            self.note(|| format!("transport: rejected a revoked token for {}", binding.node));
            return;
        }
        let inc = self.inc;
        let input = Input::AgentJoined {
            node: binding.node,
            lease_id: binding.lease_id,
            agent,
        };
        self.deliver(inc, input);
    }
}
