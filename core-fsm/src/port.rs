//! What crosses the boundary between the orchestrator composite and the world:
//! the facts providers, SSH and the control plane report, the requests the
//! machines make of them, and the journal records a crash must not lose.
//!
//! This alphabet is shared by the simulator, the madsim world and the real
//! runtime. Secrets never appear here: the join token is minted and
//! substituted by the SSH/transport ports, and the core only sees the
//! binding `(run, node, lease)` it was minted for.

use crate::ids::{AgentId, GroupId, LeaseId, LogicalNodeId, Nonce, OpId, RunId, SessionId};
use crate::plan::{DesiredShape, ProviderKind};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use smol_str::SmolStr;
use std::collections::BTreeMap;
use std::sync::Arc;

mod journal;
mod text;

pub use journal::JournalRecord;

/// Facts about a created lease: enough to find, reach and destroy it
/// (SPEC.md "The port alphabet" `LeaseFacts`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseFacts {
    /// Which provider holds it.
    pub provider: ProviderKind,
    /// The lease id, `vastai:123`.
    pub lease_id: LeaseId,
    /// The provider's own contract/instance id, used to destroy it.
    pub contract_id: String,
    /// The offer it was created from, if the provider has offers.
    pub offer_id: Option<String>,
    /// The physical host, if known (used for quarantine).
    pub host_id: Option<String>,
    /// The intent nonce written into the provider label.
    pub nonce: Nonce,
    /// Anything else worth keeping (price, GPU).
    pub metadata: BTreeMap<String, String>,
}

/// Where to reach a node over SSH (SPEC.md "The port alphabet" `SshEndpoint`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SshEndpoint {
    /// Host name or address.
    pub host: SmolStr,
    /// TCP port.
    pub port: u16,
    /// User to log in as.
    pub user: SmolStr,
}

/// What the node manager asks a provider for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateLeaseRequest {
    /// The run.
    pub run_id: RunId,
    /// The logical node the lease is for.
    pub node: LogicalNodeId,
    /// The intent nonce; the provider puts it in the lease's label.
    pub nonce: Nonce,
    /// The provider.
    pub provider: ProviderKind,
    /// The desired shape (shared with the plan).
    pub shape: Arc<DesiredShape>,
    /// Hosts not to lease on (quarantined by the reconciler).
    pub excluded_hosts: Vec<String>,
}

/// A successful create: the lease and, if the provider already knows it, the
/// SSH endpoint (SPEC.md "The port alphabet" `CreateLeaseResult`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGranted {
    /// The lease (shared: the ledger, the journal and the effects that
    /// name it hold one copy).
    pub lease: Arc<LeaseFacts>,
    /// The endpoint, when already known.
    pub endpoint: Option<SshEndpoint>,
}

/// How a provider call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProviderErrorKind {
    /// Nothing happened; trying again is safe (429, 5xx before the request
    /// could have taken effect, connection refused).
    Transient,
    /// The request may have taken effect but the answer was lost; a create
    /// must be resolved by listing leases by label, never retried blindly.
    Ambiguous,
    /// The provider refused for good (no offer fits, offer gone, bad request).
    Rejected,
    /// The lease does not exist (destroying it is then already done).
    NotFound,
}

/// A provider failure: a kind the machines branch on, a message for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderError {
    /// What the machines act on.
    pub kind: ProviderErrorKind,
    /// What a person reads; never holds a secret.
    pub message: String,
}

/// What an endpoint lookup saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndpointStatus {
    /// Not reachable yet (loading, image pulling); poll again.
    Pending {
        /// The provider's status words, for people.
        detail: String,
    },
    /// Reachable over SSH.
    Ready(SshEndpoint),
    /// It will never be reachable (exited, offline, outbid, pull failed).
    Failed {
        /// Why, for people and the node record.
        reason: String,
    },
    /// The provider no longer knows the lease.
    Gone,
}

/// How an SSH operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SshErrorKind {
    /// The TCP connection was refused.
    Refused,
    /// The port's own timeout expired.
    Timeout,
    /// Public-key authentication was denied.
    AuthDenied,
    /// The connection was reset or closed mid-operation.
    Reset,
    /// The host key differs from the one pinned for this lease.
    HostKeyMismatch,
    /// Anything else.
    Other,
}

/// An SSH failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshError {
    /// What the machines act on.
    pub kind: SshErrorKind,
    /// What a person reads.
    pub message: String,
}

/// Which output stream a log line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Why a command is run during bootstrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CommandPurpose {
    /// The small command that proves the machine is touchable.
    Probe,
    /// The n-th verify command of the boot spec.
    Verify(u32),
    /// The agent start command (carries the join binding).
    Start,
    /// Follows the boot spec's stdout/stderr sources; runs until the
    /// connection closes, so it has no command timeout.
    Tail,
}

/// The identity a join token is minted for; the token itself stays in the port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JoinBinding {
    /// The run.
    pub run_id: RunId,
    /// The logical node.
    pub node: LogicalNodeId,
    /// The lease the node runs on.
    pub lease_id: LeaseId,
}

/// One bootstrap log line for the datastream (SPEC.md "The port alphabet").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    /// The run.
    pub run_id: RunId,
    /// The logical node.
    pub node: LogicalNodeId,
    /// The lease.
    pub lease_id: LeaseId,
    /// Always `ssh-bootstrap` for bootstrap records.
    pub source: String,
    /// stdout or stderr.
    pub stream: LogStream,
    /// Per (node, stream) sequence number for the whole run, from 1,
    /// without gaps: a node's later sessions (a re-bootstrap, a replacement
    /// lease) continue from its last line. After a restart numbering
    /// continues from the last seqs the journal names (see [`LogSeqs`]).
    pub seq: u64,
    /// When the line was seen.
    pub at: Instant,
    /// The line, without its newline.
    pub line: String,
}

/// The last log sequence number of each stream of a node (0: no line yet).
/// Journaled with the records that end a bootstrap (`NodeReady`,
/// `NodeFailed`), so that a restarted orchestrator continues the numbering;
/// lines of a session a crash interrupted are above it and may be numbered
/// again (`spec/provisioning.md`, "Log sequence numbers").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSeqs {
    /// The last stdout line's number.
    pub stdout: u64,
    /// The last stderr line's number.
    pub stderr: u64,
}

impl LogSeqs {
    /// The larger number of each stream.
    pub fn max_each(self, other: LogSeqs) -> LogSeqs {
        LogSeqs {
            stdout: self.stdout.max(other.stdout),
            stderr: self.stderr.max(other.stderr),
        }
    }

    /// The last number of `stream`.
    pub fn get(self, stream: LogStream) -> u64 {
        match stream {
            LogStream::Stdout => self.stdout,
            LogStream::Stderr => self.stderr,
        }
    }
}

/// What the orchestrator composite is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer may have expired; expired timers fire, others are untouched.
    Tick,
    /// Bring the plan up (also after a restore).
    Start,
    /// Destroy every known lease and stop.
    Teardown,
    /// Destroy one node's lease.
    Destroy {
        /// The logical node.
        node: LogicalNodeId,
    },
    /// The operator sets a group's desired count (the dashboard's +1 / -1):
    /// the reconciler then creates `{group}-{index}` for each new index, or
    /// destroys the group's nodes from its tail. Journaled.
    SetDesired {
        /// The group.
        group: GroupId,
        /// Its wanted count from now on, `0..=GROUP_COUNT_MAX`.
        count: u32,
    },
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
    /// Answer to [`Effect::DestroyLease`].
    LeaseDestroyed {
        /// The operation.
        op: OpId,
        /// Done, or why not.
        result: Result<(), ProviderError>,
    },
    /// Answer to [`Effect::ListLeases`]: every lease of the run found by label.
    LeasesListed {
        /// The operation.
        op: OpId,
        /// The leases, or why the list failed (never an empty list instead).
        result: Result<Vec<Arc<LeaseFacts>>, ProviderError>,
    },
    /// Answer to [`Effect::SshConnect`].
    SshConnected {
        /// The operation.
        op: OpId,
        /// Connected and authenticated, or why not.
        result: Result<(), SshError>,
    },
    /// One output line of a running command; observational only.
    SshOutput {
        /// The command's operation.
        op: OpId,
        /// Which stream.
        stream: LogStream,
        /// The line.
        line: String,
    },
    /// Answer to [`Effect::SshExec`]: the command ended.
    SshExited {
        /// The operation.
        op: OpId,
        /// Exit code, or why the command could not finish.
        result: Result<i32, SshError>,
    },
    /// Answer to [`Effect::SshClose`]: the connection is closed.
    SshClosed {
        /// The operation.
        op: OpId,
    },
    /// An agent presented a valid join token for `(node, lease)` and its
    /// endpoint id is `agent` (the transport checked the token).
    AgentJoined {
        /// The logical node the token was minted for.
        node: LogicalNodeId,
        /// The lease the token was minted for.
        lease_id: LeaseId,
        /// The agent's authenticated identity.
        agent: AgentId,
    },
    /// `node`'s agent is lost after the handoff (a world without a
    /// pipeline host, whose membership would find it Dead, says so with
    /// this; the composite's own host feeds its nodes the same).
    AgentLost {
        /// The logical node.
        node: LogicalNodeId,
        /// The agent that died.
        agent: AgentId,
        /// Why, for people.
        reason: String,
    },
    /// For the pipeline host (membership and the run), when the composite
    /// has one (`Config::membership`); ignored and counted otherwise.
    Pipeline(Box<crate::pipeline::Input>),
}

/// What the orchestrator composite asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Make this record durable before dispatching anything after it.
    Persist(JournalRecord),
    /// Ask the provider for a lease.
    CreateLease {
        /// The operation.
        op: OpId,
        /// What to create.
        request: CreateLeaseRequest,
    },
    /// Ask the provider whether the lease has an SSH endpoint yet.
    LookupEndpoint {
        /// The operation.
        op: OpId,
        /// The lease.
        lease: Arc<LeaseFacts>,
    },
    /// Destroy a known lease.
    DestroyLease {
        /// The operation.
        op: OpId,
        /// The lease.
        lease: Arc<LeaseFacts>,
    },
    /// List the run's leases by label (adoption after a restart).
    ListLeases {
        /// The operation.
        op: OpId,
        /// The run.
        run_id: RunId,
        /// The provider to ask.
        provider: ProviderKind,
    },
    /// Open the session's SSH connection.
    SshConnect {
        /// The operation.
        op: OpId,
        /// The session that owns the connection.
        session: SessionId,
        /// Where to connect.
        endpoint: SshEndpoint,
        /// The lease (the host key is pinned per lease).
        lease_id: LeaseId,
    },
    /// Run a command on the session's connection.
    SshExec {
        /// The operation.
        op: OpId,
        /// The session.
        session: SessionId,
        /// The command line (placeholders are substituted by the port).
        command: Arc<str>,
        /// Why it runs.
        purpose: CommandPurpose,
        /// For the start command: mint a join token for this binding and
        /// substitute it.
        join: Option<JoinBinding>,
    },
    /// Close the session's connection.
    SshClose {
        /// The operation.
        op: OpId,
        /// The session.
        session: SessionId,
    },
    /// Revoke any unused join token for this binding.
    RevokeJoin(JoinBinding),
    /// A log line for the datastream.
    Log(LogRecord),
    /// A node's stage changed (observational, for people and dashboards).
    NodeChanged {
        /// The logical node.
        node: LogicalNodeId,
        /// Its stage now.
        stage: crate::node::Lifecycle,
        /// Whether it is ready.
        ready: bool,
        /// Why it failed, if it did.
        failed_reason: Option<String>,
    },
    /// The pipeline host's effect (liveness changes, the run's effects).
    Pipeline(Box<crate::pipeline::Effect>),
}
