//! The control plane: an iroh (QUIC) endpoint on the orchestrator that node
//! agents dial with the orchestrator's endpoint id and a one-time join token.
//!
//! - [`ControlPlane`] is the orchestrator side: it binds the endpoint (its
//!   key persisted in the state dir), mints and revokes join tokens, admits
//!   agents and reports [`ControlEvent`]s on a bounded channel.
//! - [`agent`] is the node side, run by the `drover-agent` binary.
//! - [`wire`] is the frame format both sides speak.
//! - [`logs`] is the log stream (agent and worker lines after the handoff),
//!   fed on the agent by [`agent_log`].
//!
//! The agent's authenticated endpoint id (`conn.remote_id()`) becomes its
//! [`AgentId`]. The contract is `spec/control-plane.md`.

pub mod agent;
pub mod agent_log;
mod control;
pub mod logs;
mod serve;
mod store;
mod tokens;
pub mod wire;

pub use control::{ControlConfig, ControlPlane};

use anyhow::{Context, Result, bail};
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::port::JoinBinding;
use iroh::endpoint::{
    AckFrequencyConfig, Endpoint, IdleTimeout, QuicTransportConfig, RelayMode, VarInt, presets,
};
use iroh::{EndpointAddr, EndpointId, SecretKey};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// QUIC close code: the agent is done (after a `Shutdown`).
pub const CLOSE_DONE: VarInt = VarInt::from_u32(0);
/// QUIC close code: the join or rejoin was refused.
pub const CLOSE_REJECTED: VarInt = VarInt::from_u32(1);
/// QUIC close code: a malformed, oversized, wrong-version or unexpected frame.
pub const CLOSE_PROTOCOL: VarInt = VarInt::from_u32(2);
/// QUIC close code: the orchestrator told the agent to exit.
pub const CLOSE_SHUTDOWN: VarInt = VarInt::from_u32(3);
/// QUIC close code: the orchestrator is going away; agents reconnect.
pub const CLOSE_GOING_AWAY: VarInt = VarInt::from_u32(4);
/// QUIC close code: a newer connection of the same agent replaced this one.
pub const CLOSE_SUPERSEDED: VarInt = VarInt::from_u32(5);
/// The orchestrator's membership holds the agent Dead: its connection is
/// closed (a process that was killed never closes its own).
pub const CLOSE_DEAD: VarInt = VarInt::from_u32(6);

/// What the control plane reports to the orchestrator.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlEvent {
    /// An agent redeemed a valid token minted for `binding`.
    Joined {
        /// What the token was minted for.
        binding: JoinBinding,
        /// The agent's authenticated endpoint id.
        agent: AgentId,
    },
    /// An already admitted agent reconnected (after a network loss or an
    /// orchestrator restart) and was admitted again by its endpoint id.
    Rejoined {
        /// The binding it was first admitted for.
        binding: JoinBinding,
        /// The agent.
        agent: AgentId,
    },
    /// A heartbeat of an admitted agent (observational; dropped, and
    /// counted, when the event channel is full).
    Heartbeat {
        /// The agent.
        agent: AgentId,
        /// Its node.
        node: LogicalNodeId,
        /// The agent's heartbeat sequence number.
        seq: u64,
    },
    /// A pipeline frame of an admitted agent (runtime ready, an
    /// acknowledgement's confirmation, a stage report).
    Pipeline {
        /// The agent.
        agent: AgentId,
        /// Its node.
        node: LogicalNodeId,
        /// The frame.
        frame: Box<wire::Frame>,
    },
    /// An admitted agent's connection ended.
    Disconnected {
        /// The agent.
        agent: AgentId,
        /// Its node.
        node: LogicalNodeId,
    },
    /// A connection was refused or closed for misbehaving.
    Rejected {
        /// The peer's authenticated endpoint id.
        peer: AgentId,
        /// Why.
        reason: RejectReason,
    },
}

/// Why the control plane refused or closed a connection. Never holds a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The token is not one this orchestrator minted (or is not a token).
    UnknownToken,
    /// The token was already redeemed (tokens are one-time).
    TokenReplayed,
    /// The token was revoked.
    TokenRevoked,
    /// The token was minted for another node, run or lease.
    BindingMismatch {
        /// The node the agent claimed.
        node: LogicalNodeId,
    },
    /// A `Rejoin` from an endpoint id not admitted for that node.
    UnknownAgent {
        /// The node the agent claimed.
        node: LogicalNodeId,
    },
    /// The agent speaks another protocol version.
    VersionMismatch {
        /// The agent's version.
        version: u8,
    },
    /// The agent's first frame is of another control wire version (a
    /// `drover-agent` of another build): refused, so it stops dialling.
    WireVersion {
        /// The version byte seen.
        version: u8,
    },
    /// A frame could not be read: malformed, oversized, wrong wire version.
    BadFrame {
        /// What was wrong.
        detail: String,
    },
    /// A valid frame at the wrong time (e.g. a heartbeat before joining).
    UnexpectedFrame {
        /// The frame's name.
        frame: &'static str,
    },
    /// No stream or no first frame within the hello timeout.
    NoHello,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::UnknownToken => f.write_str("unknown join token"),
            RejectReason::TokenReplayed => f.write_str("join token already used"),
            RejectReason::TokenRevoked => f.write_str("join token revoked"),
            RejectReason::BindingMismatch { node } => {
                write!(f, "join token was not minted for node {node}")
            }
            RejectReason::UnknownAgent { node } => {
                write!(f, "rejoin from an agent not admitted for node {node}")
            }
            RejectReason::VersionMismatch { version } => write!(
                f,
                "protocol version {version}, expected {}",
                wire::PROTOCOL_VERSION
            ),
            RejectReason::WireVersion { version } => write!(
                f,
                "the agent speaks control wire version {version}, this orchestrator {}: \
                 run the drover-agent of this drover's build",
                wire::WIRE_VERSION
            ),
            RejectReason::BadFrame { detail } => write!(f, "bad frame: {detail}"),
            RejectReason::UnexpectedFrame { frame } => write!(f, "unexpected {frame} frame"),
            RejectReason::NoHello => f.write_str("no join frame in time"),
        }
    }
}

/// The text form of an orchestrator address, what `${ORCH_ADDR}` becomes:
/// `<endpoint id, hex>@<ip:port>[,<ip:port>...]`.
pub fn format_addr(addr: &EndpointAddr) -> String {
    let sockets: Vec<String> = addr.ip_addrs().map(ToString::to_string).collect();
    format!("{}@{}", addr.id, sockets.join(","))
}

/// Parses [`format_addr`]'s form.
pub fn parse_addr(text: &str) -> Result<EndpointAddr> {
    let (id, sockets) = text
        .trim()
        .split_once('@')
        .context("an orchestrator address is <endpoint id>@<ip:port>[,<ip:port>...]")?;
    let id: EndpointId = id
        .parse()
        .with_context(|| format!("bad endpoint id in orchestrator address `{text}`"))?;
    let mut addr = EndpointAddr::new(id);
    for socket in sockets.split(',').filter(|s| !s.is_empty()) {
        let socket: SocketAddr = socket
            .parse()
            .with_context(|| format!("bad socket address `{socket}` in orchestrator address"))?;
        addr = addr.with_ip_addr(socket);
    }
    if addr.ip_addrs().next().is_none() {
        bail!("orchestrator address `{text}` names no ip:port");
    }
    Ok(addr)
}

/// How long a connection may stay silent before it is taken for dead; both
/// ends send keep-alives each [`KEEP_ALIVE`]. An agent whose orchestrator
/// was killed (no close reached it) notices within this and dials again,
/// so a restarted `up` adopts it soon after (QUIC's default is 30 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Keep-alive period of every connection (see [`IDLE_TIMEOUT`]).
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// How long after a restarted `up` starts a live agent may take to rejoin
/// it: its old connection's idle timeout, then its longest wait between
/// dials ([`agent::BACKOFF_MAX`]). A restarted `up` holds a restored
/// node's agent Dead only after this more than `dead_after` of silence.
pub const REJOIN_WITHIN: Duration =
    Duration::from_secs(IDLE_TIMEOUT.as_secs() + agent::BACKOFF_MAX.as_secs());

/// An iroh endpoint for drover: relays and address lookup off (peers are
/// reached on the direct addresses they are given), one IP socket at `bind`,
/// connections kept alive and timed out as [`IDLE_TIMEOUT`] says.
pub(crate) async fn build_endpoint(
    key: SecretKey,
    bind: SocketAddr,
    alpns: Vec<Vec<u8>>,
) -> Result<Endpoint> {
    let idle = IdleTimeout::try_from(IDLE_TIMEOUT).context("the idle timeout")?;
    let transport = QuicTransportConfig::builder()
        .keep_alive_interval(KEEP_ALIVE)
        .max_idle_timeout(Some(idle))
        .ack_frequency_config(Some(ack_frequency()))
        .build();
    let endpoint = Endpoint::builder(presets::Minimal)
        .secret_key(key)
        .transport_config(transport)
        .relay_mode(RelayMode::Disabled)
        .clear_address_lookup()
        .clear_ip_transports()
        .bind_addr(bind)
        .context("bad bind address")?
        .alpns(alpns)
        .bind()
        .await
        .with_context(|| format!("binding the iroh endpoint on {bind}"))?;
    Ok(endpoint)
}

/// What each end asks of its peer's acknowledgements (the QUIC ACK
/// frequency extension): one ACK per eight packets or per 5 ms, whichever
/// comes first, instead of one per two packets.
fn ack_frequency() -> AckFrequencyConfig {
    let mut config = AckFrequencyConfig::default();
    config
        .ack_eliciting_threshold(VarInt::from_u32(ACK_ELICITING_THRESHOLD))
        .max_ack_delay(Some(MAX_ACK_DELAY));
    config
}

/// Packets a peer may receive before it must acknowledge them.
const ACK_ELICITING_THRESHOLD: u32 = 7;

/// The longest a peer may hold back an acknowledgement.
const MAX_ACK_DELAY: Duration = Duration::from_millis(5);

/// The agent id of an endpoint id: its hex form (what `remote_id()` gives).
pub fn agent_id_of(id: EndpointId) -> AgentId {
    AgentId::new(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every endpoint asks its peer for fewer acknowledgements (one
    /// ACK_FREQUENCY frame each way); messages sent one at a time, as an
    /// activation edge sends a token's, are acknowledged about once per
    /// eight (QUIC's default: once per two).
    #[tokio::test]
    async fn peers_acknowledge_once_per_several_packets() {
        const ALPN: &[u8] = b"drover/test-ack";
        const MESSAGES: u64 = 128;
        let local = SocketAddr::from(([127, 0, 0, 1], 0));
        let a = build_endpoint(SecretKey::from_bytes(&[1; 32]), local, vec![ALPN.to_vec()]);
        let b = build_endpoint(SecretKey::from_bytes(&[2; 32]), local, vec![ALPN.to_vec()]);
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let mut addr = EndpointAddr::new(b.id());
        for socket in b.bound_sockets() {
            addr = addr.with_ip_addr(socket);
        }
        // The receiver says when it has read each message, so each goes
        // in a packet of its own.
        let (read_tx, mut read_rx) = tokio::sync::mpsc::unbounded_channel();
        let receiver = async {
            let conn = b.accept().await.expect("incoming").await.expect("accepted");
            let mut recv = conn.accept_uni().await.expect("a stream");
            for i in 0..MESSAGES {
                let mut message = [0u8; 32];
                recv.read_exact(&mut message).await.expect("a message");
                assert_eq!(message, [i as u8; 32]);
                read_tx.send(()).expect("the sender waits");
            }
            conn
        };
        let sender = async {
            let conn = a.connect(addr, ALPN).await.expect("connected");
            let mut send = conn.open_uni().await.expect("a stream");
            for i in 0..MESSAGES {
                send.write_all(&[i as u8; 32]).await.expect("written");
                read_rx.recv().await.expect("read");
            }
            send.finish().expect("finished");
            conn
        };
        let bound = Duration::from_secs(20);
        let (receiver, sender) =
            tokio::time::timeout(bound, async { tokio::join!(receiver, sender) })
                .await
                .expect("the messages arrive within their bound");
        let (sent, received) = (sender.stats(), receiver.stats());
        assert!(sent.frame_tx.ack_frequency >= 1, "{sent:?}");
        assert!(received.frame_tx.ack_frequency >= 1, "{received:?}");
        let acks = received.frame_tx.acks + received.frame_tx.path_acks;
        assert!(
            3 * acks < MESSAGES,
            "{acks} ACK frames for {MESSAGES} messages sent one at a time"
        );
        sender.close(CLOSE_DONE, b"done");
        receiver.close(CLOSE_DONE, b"done");
        a.close().await;
        b.close().await;
    }

    #[test]
    fn addresses_round_trip() {
        let id = SecretKey::from_bytes(&[7; 32]).public();
        let addr = EndpointAddr::new(id)
            .with_ip_addr("127.0.0.1:4000".parse().unwrap())
            .with_ip_addr("[::1]:4001".parse().unwrap());
        let text = format_addr(&addr);
        assert_eq!(parse_addr(&text).unwrap(), addr);
        assert!(parse_addr("nonsense").is_err());
        assert!(parse_addr(&format!("{id}@")).is_err());
        assert!(parse_addr(&format!("{id}@localhost")).is_err());
    }
}
