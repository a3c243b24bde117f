//! Short, readable renderings of port inputs and effects for transcripts
//! (one line per step) and the names coverage uses for their kinds.

use core_fsm::port::{Effect, EndpointStatus, Input, JournalRecord, ProviderError, SshError};

/// The input's kind name.
pub fn input_kind(input: &Input) -> &'static str {
    match input {
        Input::Tick => "Tick",
        Input::Start => "Start",
        Input::Teardown => "Teardown",
        Input::Destroy { .. } => "Destroy",
        Input::SetDesired { .. } => "SetDesired",
        Input::LeaseCreated { result: Ok(_), .. } => "LeaseCreated.ok",
        Input::LeaseCreated { result: Err(_), .. } => "LeaseCreated.err",
        Input::EndpointLooked {
            result: Ok(EndpointStatus::Ready(_)),
            ..
        } => "EndpointLooked.ready",
        Input::EndpointLooked {
            result: Ok(EndpointStatus::Pending { .. }),
            ..
        } => "EndpointLooked.pending",
        Input::EndpointLooked {
            result: Ok(EndpointStatus::Failed { .. }),
            ..
        } => "EndpointLooked.failed",
        Input::EndpointLooked {
            result: Ok(EndpointStatus::Gone),
            ..
        } => "EndpointLooked.gone",
        Input::EndpointLooked { result: Err(_), .. } => "EndpointLooked.err",
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
    }
}

/// The effect's kind name.
pub fn effect_kind(effect: &Effect) -> &'static str {
    match effect {
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
    }
}

fn perr(e: &ProviderError) -> String {
    format!("{:?}({})", e.kind, e.message)
}

fn serr(e: &SshError) -> String {
    format!("{:?}({})", e.kind, e.message)
}

/// An input on one line.
pub fn input(input: &Input) -> String {
    match input {
        Input::Tick | Input::Start | Input::Teardown => input_kind(input).to_owned(),
        Input::Destroy { node } => format!("Destroy {node}"),
        Input::SetDesired { group, count } => format!("SetDesired {group} {count}"),
        Input::LeaseCreated { op, result } => match result {
            Ok(g) => format!(
                "LeaseCreated {op} ok {} {} endpoint={}",
                g.lease.lease_id,
                g.lease.nonce,
                g.endpoint.is_some()
            ),
            Err(e) => format!("LeaseCreated {op} err {}", perr(e)),
        },
        Input::EndpointLooked { op, result } => match result {
            Ok(EndpointStatus::Ready(ep)) => {
                format!("EndpointLooked {op} ready {}:{}", ep.host, ep.port)
            }
            Ok(EndpointStatus::Pending { detail }) => {
                format!("EndpointLooked {op} pending {detail}")
            }
            Ok(EndpointStatus::Failed { reason }) => format!("EndpointLooked {op} failed {reason}"),
            Ok(EndpointStatus::Gone) => format!("EndpointLooked {op} gone"),
            Err(e) => format!("EndpointLooked {op} err {}", perr(e)),
        },
        Input::LeaseDestroyed { op, result } => match result {
            Ok(()) => format!("LeaseDestroyed {op} ok"),
            Err(e) => format!("LeaseDestroyed {op} err {}", perr(e)),
        },
        Input::LeasesListed { op, result } => match result {
            Ok(leases) => {
                let ids: Vec<String> = leases
                    .iter()
                    .map(|l| format!("{}/{}", l.lease_id, l.nonce))
                    .collect();
                format!("LeasesListed {op} ok [{}]", ids.join(" "))
            }
            Err(e) => format!("LeasesListed {op} err {}", perr(e)),
        },
        Input::SshConnected { op, result } => match result {
            Ok(()) => format!("SshConnected {op} ok"),
            Err(e) => format!("SshConnected {op} err {}", serr(e)),
        },
        Input::SshOutput { op, stream, line } => format!("SshOutput {op} {stream:?} {line:?}"),
        Input::SshExited { op, result } => match result {
            Ok(code) => format!("SshExited {op} code={code}"),
            Err(e) => format!("SshExited {op} err {}", serr(e)),
        },
        Input::SshClosed { op } => format!("SshClosed {op}"),
        Input::AgentJoined {
            node,
            lease_id,
            agent,
        } => format!("AgentJoined {node} {lease_id} {agent}"),
        Input::AgentLost {
            node,
            agent,
            reason,
        } => format!("AgentLost {node} {agent} {reason:?}"),
    }
}

/// An effect on one line.
pub fn effect(effect: &Effect) -> String {
    match effect {
        Effect::Persist(r) => format!("Persist({})", record(r)),
        Effect::CreateLease { op, request } => format!(
            "CreateLease {op} {} {} excluded={:?}",
            request.node, request.nonce, request.excluded_hosts
        ),
        Effect::LookupEndpoint { op, lease } => format!("LookupEndpoint {op} {}", lease.lease_id),
        Effect::DestroyLease { op, lease } => format!("DestroyLease {op} {}", lease.lease_id),
        Effect::ListLeases { op, run_id, .. } => format!("ListLeases {op} {run_id}"),
        Effect::SshConnect {
            op,
            session,
            lease_id,
            ..
        } => format!("SshConnect {op} {session} {lease_id}"),
        Effect::SshExec {
            op,
            session,
            purpose,
            join,
            ..
        } => format!(
            "SshExec {op} {session} {purpose:?}{}",
            if join.is_some() { " +join" } else { "" }
        ),
        Effect::SshClose { op, session } => format!("SshClose {op} {session}"),
        Effect::RevokeJoin(b) => format!("RevokeJoin {} {}", b.node, b.lease_id),
        Effect::Log(l) => format!("Log {} {:?}#{} {:?}", l.node, l.stream, l.seq, l.line),
        Effect::NodeChanged {
            node,
            stage,
            ready,
            failed_reason,
        } => match failed_reason {
            Some(reason) => format!("NodeChanged {node} {stage:?} ready={ready} ({reason})"),
            None => format!("NodeChanged {node} {stage:?} ready={ready}"),
        },
    }
}

/// A journal record on one line.
pub fn record(r: &JournalRecord) -> String {
    match r {
        JournalRecord::RunStarted { run_id } => format!("RunStarted {run_id}"),
        JournalRecord::LeaseIntent {
            node,
            nonce,
            attempt,
        } => format!("LeaseIntent {node} {nonce} attempt={attempt}"),
        JournalRecord::LeaseKnown { node, lease } => {
            format!("LeaseKnown {node} {}", lease.lease_id)
        }
        JournalRecord::IntentAbandoned { node, nonce } => format!("IntentAbandoned {node} {nonce}"),
        JournalRecord::NodeFailed { node, reason, .. } => format!("NodeFailed {node} ({reason})"),
        JournalRecord::NodeReady { node, agent, .. } => format!("NodeReady {node} {agent}"),
        JournalRecord::DestroyRequested { node } => format!("DestroyRequested {node}"),
        JournalRecord::ReplaceRequested { node, attempt } => {
            format!("ReplaceRequested {node} attempt={attempt}")
        }
        JournalRecord::StrayLease { node, lease } => {
            format!("StrayLease {node} {}", lease.lease_id)
        }
        JournalRecord::LeaseReleased { node, lease_id } => {
            format!("LeaseReleased {node} {lease_id}")
        }
        JournalRecord::DesiredSet { group, count } => format!("DesiredSet {group} {count}"),
    }
}
