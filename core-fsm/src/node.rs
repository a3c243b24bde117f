//! The NodeManager: one per logical node, owner of that node's ledger
//! (SPEC.md "Node manager").
//!
//! A child machine of the orchestrator composite. It asks the provider for a
//! lease (journaling the intent first), polls for the SSH endpoint, asks the
//! composite to spawn a bootstrap session, records the agent's join and the
//! handoff, and destroys its own known lease on request. Its [`Record`] is the
//! per-node ledger, derived from the phase; readiness is a flag of that
//! record, true only in [`Lifecycle::Dormant`]. Invariants N1.. are listed
//! in `spec/provisioning.md`.

mod destroy;
mod dispatch;
mod handoff;
mod invariants;
mod journaled;
mod machine;
mod phase;
mod resolve;
mod restore;
mod strays;
mod transitions;

pub use journaled::{JournalFold, Journaled};
pub use machine::Machine;

use crate::bootstrap;
use crate::ids::{AgentId, GroupId, LeaseId, LogicalNodeId, Nonce, OpId, RoleId, RunId, SessionId};
use crate::plan::{LogicalNodeSpec, ProviderKind};
use crate::port::{
    CreateLeaseRequest, EndpointStatus, JournalRecord, LeaseFacts, LeaseGranted, LogSeqs,
    ProviderError, SshEndpoint,
};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A node's stage (SPEC.md "Node manager", plus `Destroying`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Lifecycle {
    /// Known, nothing asked yet.
    New,
    /// A create was asked of the provider (or its outcome is being resolved
    /// by listing leases).
    LeaseRequested,
    /// The lease exists; its endpoint is not known yet.
    LeaseCreated,
    /// The SSH endpoint is known.
    EndpointKnown,
    /// A bootstrap session is running.
    BootstrapRunning,
    /// The agent joined; waiting for the session to close SSH.
    AgentJoined,
    /// SSH closed after the join.
    HandedOff,
    /// Ready; no polling, no repair; kept for query and teardown.
    Dormant,
    /// Failed before handoff (terminal; the lease may still need a destroy).
    Failed,
    /// A destroy of the known lease is in flight, or failed and awaits a
    /// retry (drover's addition: the seed has no name for this interval).
    Destroying,
    /// Its lease was destroyed (terminal).
    Destroyed,
}

/// The node manager's policy. Timeouts come from the node's boot spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Create attempts of one intent while the provider answers `Transient`
    /// (the request provably did not take effect, so the same intent, with
    /// the same nonce, may be sent again), the first included.
    pub create_attempts_max: u32,
    /// Destroy attempts made automatically per `Destroy` (the first included).
    pub destroy_attempts_max: u32,
    /// Lease-list attempts to resolve an ambiguous intent (the first included).
    pub list_attempts_max: u32,
    /// Successful lists without the intent's nonce, spaced by the create
    /// timeout, before the intent is abandoned: a provider may list a new
    /// lease only some time after creating it (Vast.ai F4), so one empty
    /// list proves nothing.
    pub list_misses_max: u32,
    /// Intents tried within one attempt when lists prove creates did not
    /// happen (the first included).
    pub intents_max: u32,
    /// Backoff before the second create, destroy or list attempt; doubles
    /// per attempt (a create's is jittered by the node's seeded generator).
    pub retry_backoff_base: Duration,
    /// Backoff ceiling.
    pub retry_backoff_max: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            create_attempts_max: 4,
            destroy_attempts_max: 5,
            list_attempts_max: 5,
            list_misses_max: 3,
            intents_max: 3,
            retry_backoff_base: Duration::from_secs(2),
            retry_backoff_max: Duration::from_secs(60),
        }
    }
}

/// Compact facts of the node's current bootstrap session (SPEC.md "Node manager").
/// Full log lines live in the datastream only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapFacts {
    /// The session.
    pub session: SessionId,
    /// The session's last reported stage.
    pub last_stage: bootstrap::Step,
    /// Sequence number of the last stdout line, if any.
    pub last_stdout_seq: Option<u64>,
    /// Sequence number of the last stderr line, if any.
    pub last_stderr_seq: Option<u64>,
    /// When the session last reported.
    pub last_observed_at: Instant,
}

/// The node's agent (SPEC.md "Node manager" `SwactorFacts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentFacts {
    /// The agent's control-plane identity.
    pub agent: AgentId,
    /// When it joined (`t=0` when restored from the journal).
    pub joined_at: Instant,
    /// When SSH closed after the join.
    pub handed_off_at: Option<Instant>,
}

/// The per-node ledger (SPEC.md "Node manager"), derived from the node's
/// phase by [`Machine::record`]: a view for status, tests and people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The desired node.
    pub desired: LogicalNodeSpec,
    /// Lease attempts so far, the current one included (0 before the first).
    pub attempt: u32,
    /// The nonce of the current (or last) lease intent.
    pub nonce: Option<Nonce>,
    /// The known lease. Kept after its destroy, for the record.
    pub lease: Option<Arc<LeaseFacts>>,
    /// The SSH endpoint.
    pub endpoint: Option<SshEndpoint>,
    /// The current or last bootstrap session.
    pub bootstrap: Option<BootstrapFacts>,
    /// The last log sequence numbers of the run: a node's next session
    /// continues from them, so they never restart (`port::LogRecord`).
    pub log_seqs: LogSeqs,
    /// The agent.
    pub agent: Option<AgentFacts>,
    /// Why the node failed.
    pub failed_reason: Option<String>,
    /// When it failed.
    pub failed_at: Option<Instant>,
    /// Why the last destroy attempt failed; cleared when a destroy succeeds.
    pub destroy_error: Option<String>,
    /// When the lease was destroyed.
    pub destroyed_at: Option<Instant>,
}

impl Record {
    /// The logical node.
    pub fn node(&self) -> &LogicalNodeId {
        &self.desired.node_id
    }

    /// The run.
    pub fn run_id(&self) -> RunId {
        self.desired.run_id
    }

    /// The node's group.
    pub fn group(&self) -> &GroupId {
        &self.desired.group_id
    }

    /// The node's role.
    pub fn role(&self) -> &RoleId {
        &self.desired.role
    }

    /// The provider.
    pub fn provider(&self) -> ProviderKind {
        self.desired.provider
    }

    /// The id of the known lease, if any.
    pub fn lease_id(&self) -> Option<&LeaseId> {
        self.lease.as_ref().map(|lease| &lease.lease_id)
    }
}

/// What a node manager is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer may have expired.
    Tick,
    /// Begin: request a lease (fresh), or resume what a restore left pending.
    Start {
        /// Hosts not to lease on.
        excluded_hosts: Vec<String>,
    },
    /// Try again with a fresh lease (bounded replacement; not the MVP rule).
    /// A lease the failed node still holds is destroyed first.
    Replace {
        /// The attempt number of the new lease.
        attempt: u32,
        /// Hosts not to lease on.
        excluded_hosts: Vec<String>,
    },
    /// Destroy the known lease (cancelling an active bootstrap first).
    Destroy,
    /// Answer to [`Effect::CreateLease`].
    LeaseCreated {
        /// The operation.
        op: OpId,
        /// The lease, or why not.
        result: Result<LeaseGranted, ProviderError>,
    },
    /// Answer to [`Effect::LookupEndpoint`].
    EndpointLooked {
        /// The operation.
        op: OpId,
        /// What the provider said.
        result: Result<EndpointStatus, ProviderError>,
    },
    /// Answer to [`Effect::ListLeases`].
    LeasesListed {
        /// The operation.
        op: OpId,
        /// The run's leases, or why the list failed.
        result: Result<Vec<Arc<LeaseFacts>>, ProviderError>,
    },
    /// Answer to [`Effect::DestroyLease`].
    LeaseDestroyed {
        /// The operation.
        op: OpId,
        /// Done, or why not.
        result: Result<(), ProviderError>,
    },
    /// A compact observation from the bootstrap session (also taken from a
    /// session being cancelled, for its log sequence numbers).
    BootstrapObserved(bootstrap::Observation),
    /// The session closed SSH after convergence.
    BootstrapClosed,
    /// The session ended without convergence (SSH already closed).
    BootstrapFailed {
        /// Why.
        reason: String,
    },
    /// The node's agent joined with a token minted for `lease_id`.
    AgentJoined {
        /// The lease the token was minted for.
        lease_id: LeaseId,
        /// The agent's identity.
        agent: AgentId,
    },
    /// Membership holds the handed-off node's agent Dead: the node fails,
    /// keeping its lease (the reconciler replaces it when the policy says).
    AgentLost {
        /// The agent that died.
        agent: AgentId,
        /// Why, for people.
        reason: String,
    },
}

/// What a node manager asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Make this record durable before anything after it.
    Persist(JournalRecord),
    /// Ask the provider for a lease.
    CreateLease {
        /// The operation.
        op: OpId,
        /// What to create.
        request: CreateLeaseRequest,
    },
    /// Ask the provider for the lease's SSH endpoint.
    LookupEndpoint {
        /// The operation.
        op: OpId,
        /// The lease.
        lease: Arc<LeaseFacts>,
    },
    /// List the run's leases (to resolve an ambiguous intent).
    ListLeases {
        /// The operation.
        op: OpId,
        /// The run.
        run_id: RunId,
        /// The provider.
        provider: ProviderKind,
    },
    /// Destroy a known lease.
    DestroyLease {
        /// The operation.
        op: OpId,
        /// The lease.
        lease: Arc<LeaseFacts>,
    },
    /// Spawn a bootstrap session.
    StartBootstrap {
        /// Its id.
        session: SessionId,
        /// Where to connect.
        endpoint: SshEndpoint,
        /// The lease it runs on.
        lease_id: LeaseId,
        /// The node's last log sequence numbers; the session continues them.
        log_seqs: LogSeqs,
    },
    /// Tell the session the agent joined.
    ConvergenceObserved {
        /// The session.
        session: SessionId,
        /// The agent.
        agent: AgentId,
    },
    /// Cancel the session.
    CancelBootstrap {
        /// The session.
        session: SessionId,
    },
    /// The node's stage changed.
    Changed {
        /// The stage now.
        stage: Lifecycle,
        /// Whether it is ready.
        ready: bool,
        /// Why it failed, if it did.
        failed_reason: Option<String>,
    },
}

/// The node manager's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TimerKind {
    /// The provider's create answer is overdue.
    LeaseCreate,
    /// Time to send the create of the same intent again (after `Transient`).
    CreateRetry,
    /// Time for the next endpoint lookup.
    EndpointPoll,
    /// The endpoint did not appear in time.
    EndpointDeadline,
    /// The lease list answer is overdue.
    ListDeadline,
    /// Time to list leases again.
    ListRetry,
    /// The destroy answer is overdue.
    DestroyDeadline,
    /// Time to try the destroy again.
    DestroyRetry,
}

crate::timer::timer_kinds!(TimerKind: LeaseCreate, CreateRetry, EndpointPoll, EndpointDeadline, ListDeadline, ListRetry, DestroyDeadline, DestroyRetry);

/// `backoff` jittered into its upper half: `[b/2, b]`, drawn from `rng`, so
/// nodes that failed together do not retry together.
pub(crate) fn jittered(rng: &mut crate::rng::DetRng, b: Duration) -> Duration {
    let half = b.as_millis() / 2;
    Duration::from_millis(half + rng.below(b.as_millis() - half + 1))
}
