//! One-line renderings of the orchestrator's alphabet for transcripts and
//! traces (one line per step), and the kind names coverage counts.

use super::{Effect, EndpointStatus, Input, JournalRecord};
use std::fmt;

/// `Kind(message)`: how a provider or SSH failure reads.
fn failure(kind: impl fmt::Debug, message: &str) -> String {
    format!("{kind:?}({message})")
}

impl Input {
    /// The input's kind name, with the outcome of an answer
    /// (`LeaseCreated.ok`, `EndpointLooked.pending`, `SshExited.zero`).
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Tick => "Tick",
            Input::Start => "Start",
            Input::Teardown => "Teardown",
            Input::Destroy { .. } => "Destroy",
            Input::SetDesired { .. } => "SetDesired",
            Input::LeaseCreated { result: Ok(_), .. } => "LeaseCreated.ok",
            Input::LeaseCreated { result: Err(_), .. } => "LeaseCreated.err",
            Input::EndpointLooked { result, .. } => match result {
                Ok(EndpointStatus::Ready(_)) => "EndpointLooked.ready",
                Ok(EndpointStatus::Pending { .. }) => "EndpointLooked.pending",
                Ok(EndpointStatus::Failed { .. }) => "EndpointLooked.failed",
                Ok(EndpointStatus::Gone) => "EndpointLooked.gone",
                Err(_) => "EndpointLooked.err",
            },
            Input::LeaseDestroyed { result: Ok(()), .. } => "LeaseDestroyed.ok",
            Input::LeaseDestroyed { result: Err(_), .. } => "LeaseDestroyed.err",
            Input::LeasesListed { result: Ok(_), .. } => "LeasesListed.ok",
            Input::LeasesListed { result: Err(_), .. } => "LeasesListed.err",
            Input::SshConnected { result: Ok(()), .. } => "SshConnected.ok",
            Input::SshConnected { result: Err(_), .. } => "SshConnected.err",
            Input::SshOutput { .. } => "SshOutput",
            Input::SshExited { result: Ok(0), .. } => "SshExited.zero",
            Input::SshExited { result: Ok(_), .. } => "SshExited.nonzero",
            Input::SshExited { result: Err(_), .. } => "SshExited.err",
            Input::SshClosed { .. } => "SshClosed",
            Input::AgentJoined { .. } => "AgentJoined",
            Input::AgentLost { .. } => "AgentLost",
            Input::Pipeline(_) => "Pipeline",
        }
    }
}

impl Effect {
    /// The effect's kind name; a persist names its record
    /// (`Persist.LeaseIntent`).
    pub fn kind(&self) -> &'static str {
        match self {
            Effect::Persist(r) => match r {
                JournalRecord::RunStarted { .. } => "Persist.RunStarted",
                JournalRecord::LeaseIntent { .. } => "Persist.LeaseIntent",
                JournalRecord::LeaseKnown { .. } => "Persist.LeaseKnown",
                JournalRecord::IntentAbandoned { .. } => "Persist.IntentAbandoned",
                JournalRecord::NodeFailed { .. } => "Persist.NodeFailed",
                JournalRecord::NodeReady { .. } => "Persist.NodeReady",
                JournalRecord::DestroyRequested { .. } => "Persist.DestroyRequested",
                JournalRecord::ReplaceRequested { .. } => "Persist.ReplaceRequested",
                JournalRecord::StrayLease { .. } => "Persist.StrayLease",
                JournalRecord::LeaseReleased { .. } => "Persist.LeaseReleased",
                JournalRecord::DesiredSet { .. } => "Persist.DesiredSet",
            },
            Effect::CreateLease { .. } => "CreateLease",
            Effect::LookupEndpoint { .. } => "LookupEndpoint",
            Effect::DestroyLease { .. } => "DestroyLease",
            Effect::ListLeases { .. } => "ListLeases",
            Effect::SshConnect { .. } => "SshConnect",
            Effect::SshExec { .. } => "SshExec",
            Effect::SshClose { .. } => "SshClose",
            Effect::RevokeJoin(_) => "RevokeJoin",
            Effect::Log(_) => "Log",
            Effect::NodeChanged { .. } => "NodeChanged",
            Effect::Pipeline(_) => "Pipeline",
        }
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Tick | Input::Start | Input::Teardown => f.write_str(self.kind()),
            Input::Destroy { node } => write!(f, "Destroy {node}"),
            Input::SetDesired { group, count } => write!(f, "SetDesired {group} {count}"),
            Input::LeaseCreated { op, result } => match result {
                Ok(g) => write!(
                    f,
                    "LeaseCreated {op} ok {} {} endpoint={}",
                    g.lease.lease_id,
                    g.lease.nonce,
                    g.endpoint.is_some()
                ),
                Err(e) => write!(f, "LeaseCreated {op} err {}", failure(e.kind, &e.message)),
            },
            Input::EndpointLooked { op, result } => match result {
                Ok(EndpointStatus::Ready(ep)) => {
                    write!(f, "EndpointLooked {op} ready {}:{}", ep.host, ep.port)
                }
                Ok(EndpointStatus::Pending { detail }) => {
                    write!(f, "EndpointLooked {op} pending {detail}")
                }
                Ok(EndpointStatus::Failed { reason }) => {
                    write!(f, "EndpointLooked {op} failed {reason}")
                }
                Ok(EndpointStatus::Gone) => write!(f, "EndpointLooked {op} gone"),
                Err(e) => write!(f, "EndpointLooked {op} err {}", failure(e.kind, &e.message)),
            },
            Input::LeaseDestroyed { op, result } => match result {
                Ok(()) => write!(f, "LeaseDestroyed {op} ok"),
                Err(e) => write!(f, "LeaseDestroyed {op} err {}", failure(e.kind, &e.message)),
            },
            Input::LeasesListed { op, result } => match result {
                Ok(leases) => {
                    write!(f, "LeasesListed {op} ok [")?;
                    for (i, l) in leases.iter().enumerate() {
                        let sep = if i == 0 { "" } else { " " };
                        write!(f, "{sep}{}/{}", l.lease_id, l.nonce)?;
                    }
                    f.write_str("]")
                }
                Err(e) => write!(f, "LeasesListed {op} err {}", failure(e.kind, &e.message)),
            },
            Input::SshConnected { op, result } => match result {
                Ok(()) => write!(f, "SshConnected {op} ok"),
                Err(e) => write!(f, "SshConnected {op} err {}", failure(e.kind, &e.message)),
            },
            Input::SshOutput { op, stream, line } => {
                write!(f, "SshOutput {op} {stream:?} {line:?}")
            }
            Input::SshExited { op, result } => match result {
                Ok(code) => write!(f, "SshExited {op} code={code}"),
                Err(e) => write!(f, "SshExited {op} err {}", failure(e.kind, &e.message)),
            },
            Input::SshClosed { op } => write!(f, "SshClosed {op}"),
            Input::AgentJoined {
                node,
                lease_id,
                agent,
            } => write!(f, "AgentJoined {node} {lease_id} {agent}"),
            Input::AgentLost {
                node,
                agent,
                reason,
            } => write!(f, "AgentLost {node} {agent} {reason:?}"),
            Input::Pipeline(input) => write!(f, "Pipeline {input:?}"),
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Effect::Persist(r) => write!(f, "Persist({r})"),
            Effect::CreateLease { op, request } => write!(
                f,
                "CreateLease {op} {} {} excluded={:?}",
                request.node, request.nonce, request.excluded_hosts
            ),
            Effect::LookupEndpoint { op, lease } => {
                write!(f, "LookupEndpoint {op} {}", lease.lease_id)
            }
            Effect::DestroyLease { op, lease } => write!(f, "DestroyLease {op} {}", lease.lease_id),
            Effect::ListLeases { op, run_id, .. } => write!(f, "ListLeases {op} {run_id}"),
            Effect::SshConnect {
                op,
                session,
                lease_id,
                ..
            } => write!(f, "SshConnect {op} {session} {lease_id}"),
            Effect::SshExec {
                op,
                session,
                purpose,
                join,
                ..
            } => {
                let join = if join.is_some() { " +join" } else { "" };
                write!(f, "SshExec {op} {session} {purpose:?}{join}")
            }
            Effect::SshClose { op, session } => write!(f, "SshClose {op} {session}"),
            Effect::RevokeJoin(b) => write!(f, "RevokeJoin {} {}", b.node, b.lease_id),
            Effect::Log(l) => write!(f, "Log {} {:?}#{} {:?}", l.node, l.stream, l.seq, l.line),
            Effect::NodeChanged {
                node,
                stage,
                ready,
                failed_reason,
            } => match failed_reason {
                Some(reason) => write!(f, "NodeChanged {node} {stage:?} ready={ready} ({reason})"),
                None => write!(f, "NodeChanged {node} {stage:?} ready={ready}"),
            },
            Effect::Pipeline(effect) => write!(f, "Pipeline {effect:?}"),
        }
    }
}

impl fmt::Display for JournalRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalRecord::RunStarted { run_id } => write!(f, "RunStarted {run_id}"),
            JournalRecord::LeaseIntent {
                node,
                nonce,
                attempt,
            } => write!(f, "LeaseIntent {node} {nonce} attempt={attempt}"),
            JournalRecord::LeaseKnown { node, lease } => {
                write!(f, "LeaseKnown {node} {}", lease.lease_id)
            }
            JournalRecord::IntentAbandoned { node, nonce } => {
                write!(f, "IntentAbandoned {node} {nonce}")
            }
            JournalRecord::NodeFailed { node, reason, .. } => {
                write!(f, "NodeFailed {node} ({reason})")
            }
            JournalRecord::NodeReady { node, agent, .. } => write!(f, "NodeReady {node} {agent}"),
            JournalRecord::DestroyRequested { node } => write!(f, "DestroyRequested {node}"),
            JournalRecord::ReplaceRequested { node, attempt } => {
                write!(f, "ReplaceRequested {node} attempt={attempt}")
            }
            JournalRecord::StrayLease { node, lease } => {
                write!(f, "StrayLease {node} {}", lease.lease_id)
            }
            JournalRecord::LeaseReleased { node, lease_id } => {
                write!(f, "LeaseReleased {node} {lease_id}")
            }
            JournalRecord::DesiredSet { group, count } => write!(f, "DesiredSet {group} {count}"),
        }
    }
}
