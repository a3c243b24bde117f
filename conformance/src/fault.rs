//! The fault alphabet by name: every fault of DESIGN.md "Faults the design
//! must survive", the plan item that injects it, and the name coverage and
//! profiles use for it.

use crate::case::{Action, HostFault, Item, LeaseFault, NetFault, OpFault, OpKind};

/// Every named fault, with what it models. Coverage reports each one that a
/// battery never injected.
pub const ALL: &[(&str, &str)] = &[
    (
        "create-fails",
        "provider: create answered 5xx or 429, nothing created",
    ),
    (
        "offer-gone",
        "provider: create rejected, the offer is gone (F2)",
    ),
    (
        "create-ambiguous",
        "provider: create took effect, answer lost (F5)",
    ),
    (
        "create-lost",
        "provider: create answer lost, nothing created",
    ),
    (
        "create-invisible",
        "provider: new lease absent from lists for a while (F4)",
    ),
    (
        "double-rent",
        "provider: the lease lost a double rent, exits (F3)",
    ),
    (
        "stuck-loading",
        "provider: lease stays loading forever (F6, F9)",
    ),
    ("slow-boot", "provider: lease boots slowly"),
    (
        "ssh-late",
        "provider: running, SSH endpoint appears late (F7)",
    ),
    ("exited", "provider: lease exits (F11)"),
    ("offline", "provider: host goes offline (F12)"),
    ("outbid", "provider: lease outbid and stopped (F13)"),
    ("rate-limited", "provider: one call answered 429 (F15)"),
    (
        "storm-429",
        "provider: every call answered 429 for a while (F15)",
    ),
    ("server-error", "provider: one call answered 5xx (F21)"),
    (
        "destroy-fails",
        "provider: destroy fails, a later one succeeds",
    ),
    ("list-fails", "provider: listing leases fails"),
    ("ssh-refused", "ssh: connect refused"),
    ("ssh-timeout", "ssh: connect or command times out"),
    ("ssh-auth-denied", "ssh: authentication denied (F20)"),
    ("ssh-reset", "ssh: connection reset mid-command"),
    ("probe-fails", "ssh: the probe command fails"),
    ("verify-fails", "ssh: a verify command fails"),
    ("start-fails", "ssh: the agent start command fails"),
    (
        "agent-never-joins",
        "agent: never joins (crashes before joining)",
    ),
    (
        "agent-wrong-token",
        "agent: wrong token, the transport rejects it",
    ),
    (
        "agent-stale-join",
        "agent: a join for the node's previous lease",
    ),
    ("agent-joins-twice", "agent: joins twice"),
    ("agent-crashes", "agent: crashes after handoff"),
    ("latency", "network: an answer is delayed"),
    ("answer-dropped", "network: an answer never arrives"),
    ("answer-duplicated", "network: an answer arrives twice"),
    (
        "unknown-answer",
        "network: an answer nobody asked for arrives",
    ),
    (
        "crash",
        "orchestrator: killed at a time, restarted from its journal",
    ),
    (
        "crash-after-effect",
        "orchestrator: killed right after dispatching an effect",
    ),
    (
        "crash-before-sync",
        "orchestrator: killed with a journal write not yet synced",
    ),
    (
        "bad-host",
        "provider: a host fails every lease placed on it",
    ),
    (
        "early-teardown",
        "operator: tears the run down during faults",
    ),
    (
        "operator-destroy",
        "operator: destroys one node during faults",
    ),
    (
        "operator-scale",
        "operator: sets a group's desired count up or down during faults",
    ),
];

/// The fault name an item injects.
pub fn name_of(item: &Item) -> &'static str {
    match item {
        Item::At { action, .. } => match action {
            Action::Crash { .. } => "crash",
            Action::Storm { .. } => "storm-429",
            Action::Teardown => "early-teardown",
            Action::Destroy { .. } => "operator-destroy",
            Action::Scale { .. } => "operator-scale",
            Action::UnknownAnswer => "unknown-answer",
        },
        Item::Op { op, fault, .. } => op_fault_name(*op, *fault),
        Item::Net { fault, .. } => match fault {
            NetFault::Delay { .. } => "latency",
            NetFault::Drop => "answer-dropped",
            NetFault::Duplicate => "answer-duplicated",
        },
        Item::CrashAfterEffect { .. } => "crash-after-effect",
        Item::CrashBeforeSync { .. } => "crash-before-sync",
        Item::Lease { fault, .. } => lease_fault_name(*fault),
        Item::Host { .. } => "bad-host",
    }
}

fn op_fault_name(op: OpKind, fault: OpFault) -> &'static str {
    match fault {
        OpFault::RateLimited if op == OpKind::Create => "create-fails",
        OpFault::ServerError if op == OpKind::Create => "create-fails",
        OpFault::RateLimited | OpFault::ServerError if op == OpKind::Destroy => "destroy-fails",
        OpFault::RateLimited | OpFault::ServerError if op == OpKind::List => "list-fails",
        OpFault::RateLimited => "rate-limited",
        OpFault::ServerError => "server-error",
        OpFault::OfferGone => "offer-gone",
        OpFault::AmbiguousCreated => "create-ambiguous",
        OpFault::AmbiguousNotCreated => "create-lost",
        OpFault::DoubleRent => "double-rent",
        OpFault::Invisible { .. } => "create-invisible",
        OpFault::Refused => "ssh-refused",
        OpFault::Timeout => "ssh-timeout",
        OpFault::AuthDenied => "ssh-auth-denied",
        OpFault::Reset => "ssh-reset",
        OpFault::Exit { .. } => match op {
            OpKind::Probe => "probe-fails",
            OpKind::Start => "start-fails",
            _ => "verify-fails",
        },
    }
}

fn lease_fault_name(fault: LeaseFault) -> &'static str {
    match fault {
        LeaseFault::StuckLoading => "stuck-loading",
        LeaseFault::SlowBoot { .. } => "slow-boot",
        LeaseFault::SshLate { .. } => "ssh-late",
        LeaseFault::Exits { .. } => "exited",
        LeaseFault::Offline { .. } => "offline",
        LeaseFault::Outbid { .. } => "outbid",
        LeaseFault::AgentNeverJoins => "agent-never-joins",
        LeaseFault::AgentWrongToken => "agent-wrong-token",
        LeaseFault::AgentJoinsTwice => "agent-joins-twice",
        LeaseFault::AgentCrashesAfterHandoff => "agent-crashes",
        LeaseFault::StaleJoin => "agent-stale-join",
    }
}

/// Whether a host fault is named in [`ALL`] (all are, as `bad-host`).
pub fn host_fault_name(_fault: HostFault) -> &'static str {
    "bad-host"
}

/// Whether a lease fault is the agent's (it acts at join time, so the
/// worlds do not count it as injected when the lease is created).
pub fn is_agent_fault(fault: &LeaseFault) -> bool {
    matches!(
        fault,
        LeaseFault::AgentNeverJoins
            | LeaseFault::AgentWrongToken
            | LeaseFault::AgentJoinsTwice
            | LeaseFault::AgentCrashesAfterHandoff
            | LeaseFault::StaleJoin
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_maps_to_a_listed_name() {
        let names: Vec<&str> = ALL.iter().map(|(n, _)| *n).collect();
        let items = [
            Item::At {
                at: 1,
                action: Action::Crash {
                    restart_after_ms: 1,
                },
            },
            Item::Op {
                op: OpKind::Verify,
                nth: 0,
                fault: OpFault::Exit { code: 1 },
            },
            Item::Lease {
                nth: 0,
                fault: LeaseFault::StaleJoin,
            },
            Item::Host {
                host: 0,
                fault: HostFault::Refuses,
            },
        ];
        for item in &items {
            assert!(names.contains(&name_of(item)), "{item:?}");
        }
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "fault names are unique");
    }
}
