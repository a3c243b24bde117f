//! Simulated SSH hosts and the join tokens of the control plane.
//!
//! A connection belongs to a session of one orchestrator incarnation; a
//! crash drops all of them. The SSH port mints a join token when it runs a
//! start command with a binding, the transport accepts a join only with an
//! unrevoked token, and the token never leaves this module.

use core_fsm::ids::{LeaseId, SessionId};
use core_fsm::port::{JoinBinding, LogStream};
use std::collections::BTreeMap;

/// One SSH connection.
#[derive(Clone, Debug)]
pub struct Conn {
    /// The lease it is connected to.
    pub lease: LeaseId,
    /// Whether it is open.
    pub open: bool,
}

/// A minted join token's state.
#[derive(Clone, Debug, Default)]
pub struct Token {
    /// Revoked by `RevokeJoin`.
    pub revoked: bool,
}

/// SSH connections and tokens.
#[derive(Clone, Debug, Default)]
pub struct Ssh {
    /// Connections by session.
    pub conns: BTreeMap<SessionId, Conn>,
    /// Tokens by binding.
    pub tokens: BTreeMap<JoinBinding, Token>,
    /// Running log tails by session: they end when the connection does.
    pub tails: BTreeMap<SessionId, Vec<core_fsm::ids::OpId>>,
}

impl Ssh {
    /// Opens (or reopens) the connection of `session`.
    pub fn open(&mut self, session: SessionId, lease: LeaseId) {
        self.conns.insert(session, Conn { lease, open: true });
    }

    /// Closes the connection of `session`; true if it was open. Its tails
    /// end with it; `ended_tails` takes them.
    pub fn close(&mut self, session: SessionId) -> bool {
        match self.conns.get_mut(&session) {
            Some(conn) if conn.open => {
                conn.open = false;
                true
            }
            _ => false,
        }
    }

    /// The tails of `session` that end because its connection closed.
    pub fn ended_tails(&mut self, session: SessionId) -> Vec<core_fsm::ids::OpId> {
        self.tails.remove(&session).unwrap_or_default()
    }

    /// The lease an open session is connected to.
    pub fn open_lease(&self, session: SessionId) -> Option<&LeaseId> {
        self.conns
            .get(&session)
            .filter(|c| c.open)
            .map(|c| &c.lease)
    }

    /// Every open session (to drop them on a crash).
    pub fn open_sessions(&self) -> Vec<SessionId> {
        self.conns
            .iter()
            .filter(|(_, c)| c.open)
            .map(|(s, _)| *s)
            .collect()
    }

    /// Mints (or re-mints) the token of `binding`.
    pub fn mint(&mut self, binding: JoinBinding) {
        self.tokens.insert(binding, Token::default());
    }

    /// Whether the transport accepts a join presenting `binding`'s token.
    pub fn accepts(&self, binding: &JoinBinding) -> bool {
        self.tokens.get(binding).is_some_and(|t| !t.revoked)
    }

    /// A binding minted earlier for the same node and another lease
    /// (revoked or not: the transport decides).
    pub fn stale_binding(&self, binding: &JoinBinding) -> Option<JoinBinding> {
        self.tokens
            .keys()
            .find(|b| b.node == binding.node && b.lease_id != binding.lease_id)
            .cloned()
    }
}

/// What a command prints on a healthy host.
pub fn output_of(purpose: core_fsm::port::CommandPurpose) -> Vec<(LogStream, String)> {
    use core_fsm::port::CommandPurpose;
    match purpose {
        CommandPurpose::Probe => vec![(LogStream::Stdout, "drover probe: ok".to_owned())],
        CommandPurpose::Verify(i) => vec![(LogStream::Stdout, format!("check {i}: ok"))],
        CommandPurpose::Tail => vec![
            (LogStream::Stdout, "boot: container started".to_owned()),
            (LogStream::Stdout, "boot: sshd listening".to_owned()),
        ],
        CommandPurpose::Start => vec![
            (LogStream::Stdout, "drover-agent: starting".to_owned()),
            (
                LogStream::Stderr,
                "drover-agent: dialing orchestrator".to_owned(),
            ),
        ],
    }
}
