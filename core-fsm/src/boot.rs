//! Node-side boot readiness (SPEC.md "Node boot readiness"): a node declares itself available
//! only after every readiness fact holds, or reports exactly one typed boot
//! fault and never becomes available.
//!
//! The agent composite feeds this machine the outcomes of its own local
//! resources (process, control-plane transport, node identity, arena,
//! worker, membership, provisioning handler). The machine decides nothing
//! else: weights, roles, stages and edges are the run's business (SPEC.md "Node boot readiness"
//! "Non-Readiness Facts"), so no input here can carry them. Invariants
//! BT1..BT9 are in `spec/plan-boot-reconcile.md`.

mod machine;
mod text;

pub use machine::Machine;

use crate::ids::LogicalNodeId;
use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// Whether availability waits for the worker process (SPEC.md "Node boot readiness": "the GPU
/// worker is ready, or ... an explicit deferred worker-start policy").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerStartPolicy {
    /// The worker must be ready before the node is available; a worker
    /// failure is a boot fault.
    Required,
    /// The node may become available without its worker; the worker must be
    /// ready before the node accepts stage provisioning, and a worker failure
    /// only withholds provisioning (the run sees it, not the boot).
    Deferred,
}

/// The boot machine's policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The logical node this process was started as (`--node`); an identity
    /// assigned by the control plane must match it.
    pub node: LogicalNodeId,
    /// Whether availability waits for the worker.
    pub worker_start: WorkerStartPolicy,
    /// How long, from the start of the boot attempt, every required fact may
    /// take in all; then the boot faults with the facts still missing.
    pub boot_timeout: Duration,
}

/// A local resource whose readiness is a fact of the boot (SPEC.md "Node boot readiness"
/// "Required Readiness Facts"), in the order the spec lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Resource {
    /// The node process is alive.
    Process,
    /// The control-plane endpoint is bound and can receive control messages.
    Transport,
    /// The node has a stable id the orchestrator knows.
    Identity,
    /// The arena is created and mapped.
    Arena,
    /// The worker process is ready.
    Worker,
    /// The node has joined, or is joining, the membership of its pool.
    Membership,
    /// The node's stage-provisioning handler is installed.
    Provisioning,
}

impl Resource {
    /// Every resource, in spec order.
    pub const ALL: [Resource; 7] = [
        Resource::Process,
        Resource::Transport,
        Resource::Identity,
        Resource::Arena,
        Resource::Worker,
        Resource::Membership,
        Resource::Provisioning,
    ];
}

/// How far membership has got; either counts as the readiness fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Membership {
    /// The join is under way.
    Joining,
    /// The node is a member.
    Joined,
}

/// A public outcome of one local resource, or a tick.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// The node process runs (the first thing it says).
    ProcessAlive,
    /// The control-plane endpoint is bound and accepts control messages.
    TransportReady,
    /// The control-plane endpoint could not be brought up.
    TransportFailed {
        /// Why.
        reason: String,
    },
    /// The control plane confirmed the node's identity.
    IdentityAssigned {
        /// The id it was confirmed as.
        node: LogicalNodeId,
    },
    /// The node's identity is missing or was rejected.
    IdentityInvalid {
        /// Why.
        reason: String,
    },
    /// The arena is created and mapped.
    ArenaCreated,
    /// The arena could not be created.
    ArenaFailed {
        /// Why.
        reason: String,
    },
    /// The worker process reported ready.
    WorkerReady,
    /// The worker process did not start.
    WorkerFailed {
        /// Why.
        reason: String,
    },
    /// Membership progressed.
    Membership(Membership),
    /// The stage-provisioning handler is installed.
    CanAcceptProvisioning,
    /// A timer may have expired (spurious ticks are no-ops).
    Tick,
}

/// Why a boot attempt failed: one variant per failed resource, plus the
/// timeout. The one terminal fault of a failed boot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BootFault {
    /// The control-plane endpoint failed.
    TransportFailed {
        /// Why.
        reason: String,
    },
    /// The identity is missing, invalid, or not the one the node was started as.
    IdentityInvalid {
        /// Why.
        reason: String,
    },
    /// The arena could not be created.
    ArenaFailed {
        /// Why.
        reason: String,
    },
    /// The worker did not start (only with [`WorkerStartPolicy::Required`]).
    WorkerStartFailed {
        /// Why.
        reason: String,
    },
    /// The boot deadline passed with these required facts still missing.
    Timeout {
        /// The missing facts, in spec order; never empty.
        missing: Vec<Resource>,
        /// The configured boot timeout.
        after: Duration,
    },
}

impl BootFault {
    /// The resources the fault is about.
    pub fn resources(&self) -> Vec<Resource> {
        match self {
            BootFault::TransportFailed { .. } => vec![Resource::Transport],
            BootFault::IdentityInvalid { .. } => vec![Resource::Identity],
            BootFault::ArenaFailed { .. } => vec![Resource::Arena],
            BootFault::WorkerStartFailed { .. } => vec![Resource::Worker],
            BootFault::Timeout { missing, .. } => missing.clone(),
        }
    }
}

/// What the boot machine announces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Every required readiness fact holds: the node may be offered to the
    /// orchestrator's candidate pool. Emitted at most once.
    NodeAvailable {
        /// The node.
        node: LogicalNodeId,
    },
    /// The boot failed; the node never becomes available. Emitted at most
    /// once, and never together with `NodeAvailable`.
    Faulted {
        /// The node.
        node: LogicalNodeId,
        /// Why.
        fault: BootFault,
    },
    /// The node may now accept stage provisioning (available and worker
    /// ready). Emitted at most once, never before `NodeAvailable`.
    ProvisioningReady {
        /// The node.
        node: LogicalNodeId,
    },
    /// The worker failed (with a deferred start, before or after
    /// availability; with a required start, after it): the node stays
    /// available but accepts no provisioning from now on. Emitted at most
    /// once, never before `NodeAvailable`.
    WorkerUnavailable {
        /// The node.
        node: LogicalNodeId,
        /// Why.
        reason: String,
    },
}

/// The machine's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TimerKind {
    /// The end of the boot attempt's time budget.
    BootDeadline,
}

crate::timer::timer_kinds!(TimerKind: BootDeadline);

/// The worker, once the node is available.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerStatus {
    /// Not reported yet (deferred start only).
    Pending,
    /// Ready: the node may accept provisioning.
    Ready,
    /// Failed (a deferred start that failed, or a crash after availability):
    /// the node accepts no provisioning. Boot does not restart workers.
    Failed {
        /// Why.
        reason: String,
    },
}

/// The facts gathered while booting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// Resources whose readiness fact holds.
    pub held: std::collections::BTreeSet<Resource>,
    /// The confirmed identity, once assigned (then `held` has `Identity`).
    pub identity: Option<LogicalNodeId>,
    /// How far membership has got (then `held` has `Membership`).
    pub membership: Option<Membership>,
    /// A deferred worker's failure, reported once the node is available.
    pub deferred_worker_failure: Option<String>,
}

/// Where a boot attempt stands; each variant holds only what is valid in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Gathering readiness facts, the boot deadline armed.
    Booting(Facts),
    /// Announced available (terminal for the boot outcome).
    Available {
        /// The worker's state, which gates provisioning.
        worker: WorkerStatus,
    },
    /// Faulted (terminal).
    Faulted {
        /// The fault.
        fault: BootFault,
    },
}

/// Inputs the machine ignored, by why (never a panic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// A fact that was already held (or a membership step backwards).
    pub duplicate_facts: u64,
    /// Any input after the boot faulted.
    pub after_fault: u64,
    /// A resource outcome after availability that boot no longer owns (a
    /// transport or arena failure then is the run's business), or a worker
    /// outcome after the worker's own outcome was settled (ready after failed).
    pub after_outcome: u64,
    /// A tick with no timer due.
    pub spurious_ticks: u64,
}
