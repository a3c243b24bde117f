//! One-line renderings for transcripts, logs and the dashboard.

use super::{BootFault, Effect, Membership, Phase, Resource, WorkerStatus};
use std::fmt;

fn list(items: &[Resource]) -> String {
    let names: Vec<String> = items.iter().map(Resource::to_string).collect();
    names.join(", ")
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Process => "process",
            Resource::Transport => "transport",
            Resource::Identity => "identity",
            Resource::Arena => "arena",
            Resource::Worker => "worker",
            Resource::Membership => "membership",
            Resource::Provisioning => "provisioning",
        })
    }
}

impl fmt::Display for BootFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootFault::TransportFailed { reason } => write!(f, "TransportFailed: {reason}"),
            BootFault::IdentityInvalid { reason } => write!(f, "IdentityInvalid: {reason}"),
            BootFault::ArenaFailed { reason } => write!(f, "ArenaFailed: {reason}"),
            BootFault::WorkerStartFailed { reason } => write!(f, "WorkerStartFailed: {reason}"),
            BootFault::Timeout { missing, after } => {
                write!(f, "Timeout after {after}, missing {}", list(missing))
            }
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Effect::NodeAvailable { node } => write!(f, "NodeAvailable {node}"),
            Effect::Faulted { node, fault } => write!(f, "Faulted {node} ({fault})"),
            Effect::ProvisioningReady { node } => write!(f, "ProvisioningReady {node}"),
            Effect::WorkerUnavailable { node, reason } => {
                write!(f, "WorkerUnavailable {node} ({reason})")
            }
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Booting(facts) => {
                let held: Vec<Resource> = facts.held.iter().copied().collect();
                write!(f, "Booting[{}]", list(&held))?;
                if facts.membership == Some(Membership::Joining) {
                    f.write_str(" (joining)")?;
                }
                if let Some(reason) = &facts.deferred_worker_failure {
                    write!(f, " (worker failed: {reason})")?;
                }
                Ok(())
            }
            Phase::Available { worker } => match worker {
                WorkerStatus::Pending => f.write_str("Available(worker pending)"),
                WorkerStatus::Ready => f.write_str("Available(worker ready)"),
                WorkerStatus::Failed { .. } => f.write_str("Available(worker failed)"),
            },
            Phase::Faulted { fault } => write!(f, "Faulted({fault})"),
        }
    }
}
