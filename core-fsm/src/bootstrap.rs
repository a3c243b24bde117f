//! The BootstrapSession: SSH from a known endpoint to agent convergence
//! (SPEC.md "Bootstrap session").
//!
//! A transient child of a node manager, owned by the orchestrator composite.
//! It connects (retrying until `ssh_connect_timeout`), proves the machine is
//! touchable with a probe command, follows the boot spec's stdout/stderr
//! sources, runs each verify command under its own timeout, runs the start
//! command with a join binding (the token is minted by the SSH port, never
//! here), waits for the node manager to report convergence, and closes SSH.
//! Output lines become datastream records with gapless sequence numbers; they
//! never drive a decision. Invariants B1.. are in `spec/provisioning.md`.

mod commands;
mod invariants;
mod machine;
mod transitions;

pub use machine::Machine;

use crate::ids::{AgentId, LeaseId, LogicalNodeId, OpId, RunId, SessionId};
use crate::plan::{BootSpec, LogicalNodeSpec};
use crate::port::{
    CommandPurpose, JoinBinding, LogRecord, LogSeqs, LogStream, SshEndpoint, SshError,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The probe that proves a machine is touchable: tiny, side-effect free,
/// and it prints a line, so the output path is exercised too.
pub const PROBE_COMMAND: &str = "echo drover-probe && uname -a";

/// The `source` of every bootstrap log record (SPEC.md "Bootstrap session").
pub const LOG_SOURCE: &str = "ssh-bootstrap";

/// A session's stage (SPEC.md "Bootstrap session"; `SwactorStarting` is `AgentStarting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Step {
    /// Not started.
    Created,
    /// Connecting (with retries).
    SshConnecting,
    /// Connected; the probe runs.
    SshReady,
    /// The stdout/stderr sources are being followed.
    StdoutStreaming,
    /// Verify commands run, in order.
    BootChecking,
    /// The agent start command runs.
    AgentStarting,
    /// Waiting for the agent to join.
    WaitingForJoin,
    /// The agent joined; SSH is closing.
    Converged,
    /// SSH closed after convergence (success, terminal).
    Closed,
    /// No SSH session within the connect timeout (terminal).
    SshTimeout,
    /// The probe or a verify command failed (terminal).
    BootCheckFailed,
    /// The start command failed (terminal).
    StartFailed,
    /// The agent did not join in time (terminal).
    JoinTimeout,
    /// The connection broke mid-command (terminal).
    StreamError,
    /// Cancelled by the node manager (terminal).
    Cancelled,
}

/// What a session needs to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The session's id.
    pub session: SessionId,
    /// The run.
    pub run_id: RunId,
    /// The logical node.
    pub node: LogicalNodeId,
    /// The lease the node runs on.
    pub lease_id: LeaseId,
    /// Where to connect.
    pub endpoint: SshEndpoint,
    /// Commands, sources and timeouts (shared with the plan).
    pub boot: Arc<BootSpec>,
    /// The probe command.
    pub probe_command: Arc<str>,
    /// The node's last log sequence numbers before this session: its lines
    /// continue from them (numbers are per node and stream for the run).
    pub log_seqs: LogSeqs,
}

impl Config {
    /// The session for `spec` on `lease_id` at `endpoint`.
    pub fn new(
        session: SessionId,
        spec: &LogicalNodeSpec,
        lease_id: LeaseId,
        endpoint: SshEndpoint,
    ) -> Config {
        Config::with_probe(session, spec, lease_id, endpoint, PROBE_COMMAND.into())
    }

    /// Like [`Config::new`], with the probe command given (shared: the
    /// composite makes it once for all its sessions).
    pub fn with_probe(
        session: SessionId,
        spec: &LogicalNodeSpec,
        lease_id: LeaseId,
        endpoint: SshEndpoint,
        probe_command: Arc<str>,
    ) -> Config {
        Config {
            session,
            run_id: spec.run_id,
            node: spec.node_id.clone(),
            lease_id,
            endpoint,
            boot: Arc::clone(&spec.boot),
            probe_command,
            log_seqs: LogSeqs::default(),
        }
    }

    /// The binding a join token is minted for.
    pub fn join_binding(&self) -> JoinBinding {
        JoinBinding {
            run_id: self.run_id,
            node: self.node.clone(),
            lease_id: self.lease_id.clone(),
        }
    }
}

/// A compact observation for the node manager (SPEC.md "Bootstrap session").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The session.
    pub session: SessionId,
    /// Its stage now.
    pub stage: Step,
    /// Sequence number of the node's last stdout line so far (earlier
    /// sessions' lines count: numbers run for the whole run).
    pub last_stdout_seq: Option<u64>,
    /// Sequence number of the node's last stderr line so far.
    pub last_stderr_seq: Option<u64>,
}

/// How a session ended; reported only once SSH is closed (or was never
/// opened).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The agent joined and SSH is closed: the handoff may complete.
    Converged,
    /// It failed.
    Failed {
        /// The failure stage.
        stage: Step,
        /// Why, for people and the node record.
        reason: String,
    },
    /// It was cancelled.
    Cancelled,
}

/// What a session is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer may have expired.
    Tick,
    /// Begin connecting.
    Start,
    /// Answer to [`Effect::SshConnect`].
    SshConnected {
        /// The operation.
        op: OpId,
        /// Connected, or why not.
        result: Result<(), SshError>,
    },
    /// A line of a running command.
    SshOutput {
        /// The command's operation.
        op: OpId,
        /// Which stream.
        stream: LogStream,
        /// The line.
        line: String,
    },
    /// A command ended.
    SshExited {
        /// The operation.
        op: OpId,
        /// Exit code, or why it could not finish.
        result: Result<i32, SshError>,
    },
    /// The connection is closed.
    SshClosed {
        /// The operation.
        op: OpId,
    },
    /// The node manager saw the agent join (SPEC.md "Bootstrap session").
    ConvergenceObserved {
        /// The agent.
        agent: AgentId,
    },
    /// Stop now and close SSH.
    Cancel,
}

/// What a session asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Open the connection.
    SshConnect {
        /// The operation.
        op: OpId,
        /// Where.
        endpoint: SshEndpoint,
        /// The lease (host keys are pinned per lease).
        lease_id: LeaseId,
    },
    /// Run a command.
    SshExec {
        /// The operation.
        op: OpId,
        /// The command line.
        command: Arc<str>,
        /// Why it runs.
        purpose: CommandPurpose,
        /// For the start command: the binding to mint a join token for.
        join: Option<JoinBinding>,
    },
    /// Close the connection.
    SshClose {
        /// The operation.
        op: OpId,
    },
    /// Revoke an unused join token (the start ran but the session failed).
    RevokeJoin(JoinBinding),
    /// A log line for the datastream.
    Log(LogRecord),
    /// A compact observation for the node manager.
    Observed(Observation),
    /// The session is over (SSH closed); the last effect it emits.
    Finished(Outcome),
}

/// A session's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TimerKind {
    /// All connect attempts together are over time.
    ConnectDeadline,
    /// The current connect attempt is over time.
    ConnectAttempt,
    /// Time for the next connect attempt.
    ConnectRetry,
    /// The running command is over time.
    Command,
    /// The agent did not join in time.
    Join,
    /// The close was not confirmed in time.
    Close,
}

crate::timer::timer_kinds!(TimerKind: ConnectDeadline, ConnectAttempt, ConnectRetry, Command, Join, Close);

/// A shell command that follows `sources` from their first line, onto
/// stderr when `to_stderr`. Paths are single-quoted for `/bin/sh`.
pub fn tail_command(sources: &[String], to_stderr: bool) -> String {
    let mut command = String::from("tail -n +1 -F --");
    for source in sources {
        command.push_str(" '");
        command.push_str(&source.replace('\'', r"'\''"));
        command.push('\'');
    }
    if to_stderr {
        command.push_str(" 1>&2");
    }
    command
}
