//! What crosses madsim's network. Messages travel as typed payloads (madsim
//! moves `Box<dyn Any>`), so there is no codec to get wrong here; the real
//! runtime's codecs are tested in `runtime-real`.
//!
//! - Provider API: one datagram per request and one per answer, like an HTTP
//!   call whose connection can be lost (a lost answer is a timeout).
//! - SSH: one madsim stream per connection (ordered and reliable like TCP;
//!   it stalls under a partition and breaks when either end dies).
//! - Control plane: one stream per agent dial, a join and its answer.

use core_fsm::ids::{AgentId, LeaseId, OpId, RunId, SessionId};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CommandPurpose, CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, LogStream,
    ProviderError, SshError,
};
use std::fmt;
use std::sync::Arc;

/// The provider API's port on its node.
pub const PROVIDER_PORT: u16 = 80;
/// The SSH port on every machine.
pub const SSH_PORT: u16 = 22;
/// The orchestrator's control plane port.
pub const CONTROL_PORT: u16 = 7000;
/// Datagram tag of provider requests.
pub const TAG_REQUEST: u64 = 1;
/// Datagram tag of provider answers.
pub const TAG_ANSWER: u64 = 2;

/// One provider API call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderCall {
    /// Rent an offer.
    Create(CreateLeaseRequest),
    /// Where is the lease reachable?
    Lookup(Arc<LeaseFacts>),
    /// Destroy the lease.
    Destroy(Arc<LeaseFacts>),
    /// Every lease of the run, by label.
    List {
        /// The run.
        run_id: RunId,
        /// The provider.
        provider: ProviderKind,
    },
}

/// A provider request; `id` is unique within the sending incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRequest {
    /// Correlates the answer.
    pub id: u64,
    /// The call.
    pub call: ProviderCall,
}

/// The provider's answer to one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderReply {
    /// To `Create`.
    Created(Result<LeaseGranted, ProviderError>),
    /// To `Lookup`.
    Looked(Result<EndpointStatus, ProviderError>),
    /// To `Destroy`.
    Destroyed(Result<(), ProviderError>),
    /// To `List`.
    Listed(Result<Vec<LeaseFacts>, ProviderError>),
}

/// A provider answer datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderAnswer {
    /// The request's id.
    pub id: u64,
    /// The answer.
    pub reply: ProviderReply,
}

/// A join token: the secret an agent presents. Its `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct JoinToken(pub u64);

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JoinToken(<redacted>)")
    }
}

/// Client to SSH server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SshRequest {
    /// Authenticate as `user` on the machine of `lease_id`.
    Hello {
        /// The session the connection belongs to.
        session: SessionId,
        /// The lease the client means to reach.
        lease_id: LeaseId,
        /// The login user.
        user: String,
    },
    /// Run a command.
    Exec {
        /// The operation it answers.
        op: OpId,
        /// Why it runs.
        purpose: CommandPurpose,
        /// The command line.
        command: String,
        /// The join token substituted into a start command.
        token: Option<JoinToken>,
    },
    /// Close the connection.
    Close,
}

/// SSH server to client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SshReply {
    /// Authenticated (or why not: refused, denied).
    Hello(Result<(), SshError>),
    /// One output line of a command.
    Output {
        /// The command.
        op: OpId,
        /// Which stream.
        stream: LogStream,
        /// The line.
        line: String,
    },
    /// A command ended.
    Exited {
        /// The command.
        op: OpId,
        /// Its exit code, or why it could not finish.
        result: Result<i32, SshError>,
    },
}

/// Agent to orchestrator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinRequest {
    /// The token the start command carried.
    pub token: JoinToken,
    /// The agent's identity (its endpoint id in the real transport).
    pub agent: AgentId,
}

/// Orchestrator to agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinAnswer {
    /// The token was valid; the join was handed to the orchestrator.
    Accepted,
    /// Unknown or revoked token.
    Rejected,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_never_shows_in_debug_output() {
        let request = JoinRequest {
            token: JoinToken(0xdead_beef),
            agent: AgentId::from("agent-1"),
        };
        let text = format!("{request:?}");
        assert!(
            !text.contains("deadbeef") && !text.contains("3735928559"),
            "{text}"
        );
        assert!(text.contains("redacted"), "{text}");
    }
}
