//! A script driver for the orchestrator composite: timed inputs in, a
//! readable transcript out (one line per input, one per effect, the ledger
//! after each step), invariants checked after every step. Helpers find the
//! operation ids and nonces the composite chose, so scripts stay short.

#![allow(dead_code)]

use core_fsm::Machine;
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, Nonce, OpId, SessionId};
use core_fsm::node::Lifecycle;
use core_fsm::orchestrator::{Config, Orchestrator};
use core_fsm::plan::{ProviderKind, RunPlan};
use core_fsm::port::{
    Effect, EndpointStatus, Input, JournalRecord, LeaseFacts, LeaseGranted, LogSeqs, ProviderError,
    ProviderErrorKind, SshEndpoint, SshError, SshErrorKind,
};
use core_fsm::time::Instant;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

pub struct Harness {
    pub orchestrator: Orchestrator,
    pub now: Instant,
    pub transcript: String,
    pub effects: Vec<Effect>,
}

impl Harness {
    pub fn new(plan: RunPlan) -> Harness {
        Harness::wrap(Orchestrator::new(Config {
            plan,
            seed: 7,
            membership: None,
        }))
    }

    /// A composite with a pipeline host watching its nodes.
    #[allow(dead_code)]
    pub fn with_pipeline(plan: RunPlan, membership: core_fsm::membership::Config) -> Harness {
        Harness::wrap(Orchestrator::new(Config {
            plan,
            seed: 7,
            membership: Some(membership),
        }))
    }

    pub fn restore(plan: RunPlan, journal: &[JournalRecord]) -> Harness {
        let mut h = Harness::wrap(Orchestrator::restore(
            Config {
                plan,
                seed: 7,
                membership: None,
            },
            journal,
        ));
        writeln!(
            h.transcript,
            "restored from {} journal records",
            journal.len()
        )
        .unwrap();
        h.ledger();
        h
    }

    fn wrap(orchestrator: Orchestrator) -> Harness {
        orchestrator.check_invariants();
        Harness {
            orchestrator,
            now: Instant::ZERO,
            transcript: String::new(),
            effects: Vec::new(),
        }
    }

    /// Delivers `input` at `ms`, records the step, checks invariants.
    pub fn at(&mut self, ms: u64, input: Input) -> Vec<Effect> {
        assert!(Instant(ms) >= self.now, "scripts move forward in time");
        self.now = Instant(ms);
        writeln!(self.transcript, "t={ms} {}", input_line(&input)).unwrap();
        let before = self.orchestrator.counters().clone();
        let effects = self.orchestrator.handle(self.now, input);
        self.orchestrator.check_invariants();
        for effect in &effects {
            writeln!(self.transcript, "    {}", effect_line(effect)).unwrap();
        }
        let after = self.orchestrator.counters();
        if *after != before {
            writeln!(self.transcript, "    counters {after:?}").unwrap();
        }
        self.ledger();
        self.effects.extend(effects.iter().cloned());
        effects
    }

    /// Delivers a tick at the next deadline (asserting there is one).
    pub fn tick(&mut self) -> Vec<Effect> {
        let at = self.orchestrator.next_deadline().expect("a timer is armed");
        self.at(at.0.max(self.now.0), Input::Tick)
    }

    pub fn note(&mut self, text: &str) {
        writeln!(self.transcript, "# {text}").unwrap();
    }

    fn ledger(&mut self) {
        let mut line = String::from("    ledger:");
        for m in self.orchestrator.nodes() {
            write!(line, " {}={:?}", m.record().node(), m.stage()).unwrap();
            if let (Some(b), true) = (
                &m.record().bootstrap,
                matches!(
                    m.stage(),
                    Lifecycle::BootstrapRunning | Lifecycle::AgentJoined
                ),
            ) {
                write!(line, "/{:?}", b.last_stage).unwrap();
            }
            if m.is_ready() {
                line.push_str("(ready)");
            }
        }
        if let Some(at) = self.orchestrator.next_deadline() {
            write!(line, " | next {at}").unwrap();
        }
        writeln!(self.transcript, "{line}").unwrap();
    }

    pub fn journal(&self) -> Vec<JournalRecord> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Persist(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    /// The last create of `node`: its op and nonce.
    pub fn create(&self, node: &str) -> (OpId, Nonce) {
        self.effects
            .iter()
            .rev()
            .find_map(|e| match e {
                Effect::CreateLease { op, request } if request.node.as_str() == node => {
                    Some((*op, request.nonce))
                }
                _ => None,
            })
            .expect("a create for the node")
    }

    pub fn lookup(&self, lease: &str) -> OpId {
        self.find(|e| match e {
            Effect::LookupEndpoint { op, lease: l } if l.lease_id.as_str() == lease => Some(*op),
            _ => None,
        })
    }

    pub fn destroy(&self, lease: &str) -> OpId {
        self.find(|e| match e {
            Effect::DestroyLease { op, lease: l } if l.lease_id.as_str() == lease => Some(*op),
            _ => None,
        })
    }

    pub fn list(&self) -> OpId {
        self.find(|e| match e {
            Effect::ListLeases { op, .. } => Some(*op),
            _ => None,
        })
    }

    /// The last SSH operation of `session`.
    pub fn ssh(&self, session: SessionId) -> OpId {
        self.find(|e| match e {
            Effect::SshConnect { op, session: s, .. }
            | Effect::SshExec { op, session: s, .. }
            | Effect::SshClose { op, session: s }
                if *s == session =>
            {
                Some(*op)
            }
            _ => None,
        })
    }

    pub fn session(&self, node: &str) -> SessionId {
        let record = self
            .orchestrator
            .node(&LogicalNodeId::from(node))
            .expect("a ledger node")
            .record();
        record.bootstrap.as_ref().expect("bootstrap facts").session
    }

    fn find(&self, f: impl Fn(&Effect) -> Option<OpId>) -> OpId {
        self.effects
            .iter()
            .rev()
            .find_map(f)
            .expect("an effect of that kind")
    }

    /// Answers the node's create with a lease (and endpoint) at `ms`.
    pub fn grant(&mut self, ms: u64, node: &str, contract: u32, with_endpoint: bool) {
        let (op, nonce) = self.create(node);
        let endpoint = with_endpoint.then(|| endpoint(contract));
        let lease = lease(contract, nonce);
        self.at(
            ms,
            Input::LeaseCreated {
                op,
                result: Ok(LeaseGranted { lease, endpoint }),
            },
        );
    }

    /// Runs a node's session from connect to waiting for the join.
    pub fn bootstrap_to_join(&mut self, ms: u64, node: &str) {
        let session = self.session(node);
        self.at(
            ms,
            Input::SshConnected {
                op: self.ssh(session),
                result: Ok(()),
            },
        );
        self.at(
            ms + 10,
            Input::SshExited {
                op: self.ssh(session),
                result: Ok(0),
            },
        );
        let verifies = self
            .orchestrator
            .node(&LogicalNodeId::from(node))
            .unwrap()
            .record()
            .desired
            .boot
            .verify_commands
            .len();
        for i in 0..verifies as u64 {
            self.at(
                ms + 20 + i,
                Input::SshExited {
                    op: self.ssh(session),
                    result: Ok(0),
                },
            );
        }
        self.at(
            ms + 30,
            Input::SshExited {
                op: self.ssh(session),
                result: Ok(0),
            },
        );
    }

    /// The agent joins and the session closes: the node becomes Dormant.
    pub fn join_and_close(&mut self, ms: u64, node: &str, contract: u32, agent: &str) {
        let session = self.session(node);
        self.at(ms, joined(node, contract, agent));
        self.at(
            ms + 10,
            Input::SshClosed {
                op: self.ssh(session),
            },
        );
    }
}

/// One worker node, replaced once at most (`bounded`, 10 s backoff).
#[allow(dead_code)]
pub fn bounded_plan() -> RunPlan {
    let mut plan = RunPlan::example_two_workers();
    plan.groups[0].count = 1;
    plan.replacement = core_fsm::plan::ReplacementPolicy::Bounded {
        attempts_max: 2,
        backoff_base: core_fsm::time::Duration::from_secs(10),
        backoff_max: core_fsm::time::Duration::from_secs(60),
        quarantine_after_failures: 1,
    };
    plan
}

pub fn lease(contract: u32, nonce: Nonce) -> Arc<LeaseFacts> {
    Arc::new(LeaseFacts {
        provider: ProviderKind::Vastai,
        lease_id: LeaseId::new(format!("vastai:{contract}")),
        contract_id: contract.to_string(),
        offer_id: Some("9001".to_owned()),
        host_id: Some(format!("host-{contract}")),
        nonce,
        metadata: BTreeMap::new(),
    })
}

pub fn endpoint(contract: u32) -> SshEndpoint {
    SshEndpoint {
        host: "203.0.113.10".into(),
        port: 22000 + (contract % 1000) as u16,
        user: "root".into(),
    }
}

pub fn joined(node: &str, contract: u32, agent: &str) -> Input {
    Input::AgentJoined {
        node: LogicalNodeId::from(node),
        lease_id: LeaseId::new(format!("vastai:{contract}")),
        agent: AgentId::from(agent),
    }
}

pub fn provider_error(kind: ProviderErrorKind, message: &str) -> ProviderError {
    ProviderError {
        kind,
        message: message.to_owned(),
    }
}

pub fn ssh_error(kind: SshErrorKind, message: &str) -> SshError {
    SshError {
        kind,
        message: message.to_owned(),
    }
}

pub fn input_line(input: &Input) -> String {
    match input {
        Input::Tick => "tick".to_owned(),
        Input::Start => "start".to_owned(),
        Input::Teardown => "teardown".to_owned(),
        Input::Destroy { node } => format!("destroy {node}"),
        Input::SetDesired { group, count } => format!("set-desired {group} {count}"),
        Input::AgentLost { node, agent, .. } => format!("agent-lost {node} {agent}"),
        Input::LeaseCreated { op, result: Ok(g) } => {
            let ep = g
                .endpoint
                .as_ref()
                .map(|e| format!(" endpoint {}:{}", e.host, e.port))
                .unwrap_or_default();
            format!("lease-created {op} ok {}{ep}", g.lease.lease_id)
        }
        Input::LeaseCreated { op, result: Err(e) } => {
            format!("lease-created {op} err {:?} {:?}", e.kind, e.message)
        }
        Input::EndpointLooked {
            op,
            result: Ok(EndpointStatus::Ready(e)),
        } => {
            format!("endpoint-looked {op} ready {}:{}", e.host, e.port)
        }
        Input::EndpointLooked {
            op,
            result: Ok(status),
        } => format!("endpoint-looked {op} {status:?}"),
        Input::EndpointLooked { op, result: Err(e) } => {
            format!("endpoint-looked {op} err {:?}", e.kind)
        }
        Input::LeaseDestroyed { op, result: Ok(()) } => format!("lease-destroyed {op} ok"),
        Input::LeaseDestroyed { op, result: Err(e) } => {
            format!("lease-destroyed {op} err {:?} {:?}", e.kind, e.message)
        }
        Input::LeasesListed {
            op,
            result: Ok(leases),
        } => {
            let ids: Vec<String> = leases
                .iter()
                .map(|l| format!("{}({})", l.lease_id, l.nonce))
                .collect();
            format!("leases-listed {op} ok [{}]", ids.join(", "))
        }
        Input::LeasesListed { op, result: Err(e) } => {
            format!("leases-listed {op} err {:?}", e.kind)
        }
        Input::SshConnected { op, result: Ok(()) } => format!("ssh-connected {op} ok"),
        Input::SshConnected { op, result: Err(e) } => {
            format!("ssh-connected {op} err {:?}", e.kind)
        }
        Input::SshOutput { op, stream, line } => format!("ssh-output {op} {stream:?} {line:?}"),
        Input::SshExited {
            op,
            result: Ok(code),
        } => format!("ssh-exited {op} code {code}"),
        Input::SshExited { op, result: Err(e) } => format!("ssh-exited {op} err {:?}", e.kind),
        Input::SshClosed { op } => format!("ssh-closed {op}"),
        Input::AgentJoined {
            node,
            lease_id,
            agent,
        } => format!("agent-joined {node} {lease_id} {agent}"),
        Input::Pipeline(input) => format!("pipeline {input:?}"),
    }
}

pub fn effect_line(effect: &Effect) -> String {
    match effect {
        Effect::Persist(record) => format!("persist {}", journal_line(record)),
        Effect::CreateLease { op, request } => format!(
            "create-lease {op} {} {:?} {} excluded {:?}",
            request.node, request.provider, request.nonce, request.excluded_hosts
        ),
        Effect::LookupEndpoint { op, lease } => format!("lookup-endpoint {op} {}", lease.lease_id),
        Effect::DestroyLease { op, lease } => format!("destroy-lease {op} {}", lease.lease_id),
        Effect::ListLeases {
            op,
            run_id,
            provider,
        } => format!("list-leases {op} {run_id} {provider:?}"),
        Effect::SshConnect {
            op,
            session,
            endpoint,
            lease_id,
        } => {
            format!(
                "ssh-connect {op} {session} {}@{}:{} {lease_id}",
                endpoint.user, endpoint.host, endpoint.port
            )
        }
        Effect::SshExec {
            op,
            session,
            command,
            purpose,
            join,
        } => {
            let join = join
                .as_ref()
                .map(|j| format!(" join {}/{}/{}", j.run_id, j.node, j.lease_id))
                .unwrap_or_default();
            format!("ssh-exec {op} {session} {purpose:?} {command:?}{join}")
        }
        Effect::SshClose { op, session } => format!("ssh-close {op} {session}"),
        Effect::RevokeJoin(j) => format!("revoke-join {}/{}/{}", j.run_id, j.node, j.lease_id),
        Effect::Log(r) => format!(
            "log {} {} {:?} seq {} {:?}",
            r.node, r.lease_id, r.stream, r.seq, r.line
        ),
        Effect::NodeChanged {
            node,
            stage,
            ready,
            failed_reason,
        } => {
            let ready = if *ready { " ready" } else { "" };
            let reason = failed_reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            format!("node {node} -> {stage:?}{ready}{reason}")
        }
        Effect::Pipeline(effect) => format!("pipeline {effect:?}"),
    }
}

pub fn journal_line(record: &JournalRecord) -> String {
    match record {
        JournalRecord::RunStarted { run_id } => format!("RunStarted {run_id}"),
        JournalRecord::LeaseIntent {
            node,
            nonce,
            attempt,
        } => format!("LeaseIntent {node} {nonce} attempt {attempt}"),
        JournalRecord::LeaseKnown { node, lease } => {
            format!("LeaseKnown {node} {} {}", lease.lease_id, lease.nonce)
        }
        JournalRecord::IntentAbandoned { node, nonce } => format!("IntentAbandoned {node} {nonce}"),
        JournalRecord::NodeFailed {
            node,
            reason,
            log_seqs,
        } => format!("NodeFailed {node} {reason:?}{}", seqs_line(*log_seqs)),
        JournalRecord::NodeReady {
            node,
            agent,
            log_seqs,
        } => format!("NodeReady {node} {agent}{}", seqs_line(*log_seqs)),
        JournalRecord::DestroyRequested { node } => format!("DestroyRequested {node}"),
        JournalRecord::ReplaceRequested { node, attempt } => {
            format!("ReplaceRequested {node} attempt {attempt}")
        }
        JournalRecord::StrayLease { node, lease } => {
            format!("StrayLease {node} {} {}", lease.lease_id, lease.nonce)
        }
        JournalRecord::LeaseReleased { node, lease_id } => {
            format!("LeaseReleased {node} {lease_id}")
        }
        JournalRecord::DesiredSet { group, count } => format!("DesiredSet {group} {count}"),
    }
}

/// The journaled log sequence numbers, when a line was ever logged.
fn seqs_line(seqs: LogSeqs) -> String {
    if seqs == LogSeqs::default() {
        String::new()
    } else {
        format!(" log-seqs {}/{}", seqs.stdout, seqs.stderr)
    }
}
