//! Control frames on the wire: `u32` big-endian length, then that many bytes:
//! one wire-version byte and the postcard encoding of a [`Frame`].
//!
//! Every frame is at most [`FRAME_BYTES_MAX`] long. A frame that is too long,
//! empty, of another wire version, or not a valid postcard `Frame` (trailing
//! bytes included) is a [`FrameError`]; the reader of a connection closes that
//! connection and only that one.

use core_fsm::ids::{LeaseId, LogicalNodeId, RunId};
use serde::{Deserialize, Serialize};
use std::fmt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The QUIC application protocol of drover's control plane.
pub const ALPN: &[u8] = b"drover/control/1";

/// The wire version: first byte of every frame body. Bumped when an existing
/// frame changes shape; new frames are appended to [`Frame`] without a bump.
pub const WIRE_VERSION: u8 = 2;

/// The protocol version an agent announces in `Join`/`Rejoin`.
pub const PROTOCOL_VERSION: u8 = 1;

/// Largest frame body (version byte + postcard), in bytes. Control frames are
/// small; the cap keeps a peer from making the orchestrator buffer much.
pub const FRAME_BYTES_MAX: usize = 64 * 1024;

/// A one-time join token as it travels in a `Join` frame. Its `Debug` never
/// shows the secret, so a frame can be logged without leaking it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JoinToken(String);

impl JoinToken {
    /// Wraps the token text.
    pub fn new(text: impl Into<String>) -> JoinToken {
        JoinToken(text.into())
    }

    /// The secret text; only the token book and the agent's dialer read it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JoinToken(<redacted>)")
    }
}

/// One control frame. Variants are only ever appended (postcard encodes the
/// variant index), so an old peer reads every frame it knows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// Agent -> orchestrator, first frame of a first connection: the one-time
    /// token minted for `(run, node, lease)`. `run` and `lease` are checked
    /// when the agent knows them.
    Join {
        /// The agent's [`PROTOCOL_VERSION`].
        version: u8,
        /// The one-time token.
        token: JoinToken,
        /// The logical node the agent runs as.
        node: LogicalNodeId,
        /// The run, when the start command passed it.
        run: Option<RunId>,
        /// The lease, when the start command passed it.
        lease: Option<LeaseId>,
    },
    /// Agent -> orchestrator, first frame of a reconnect by an agent that was
    /// welcomed before: admitted by its endpoint id, without a token.
    Rejoin {
        /// The agent's [`PROTOCOL_VERSION`].
        version: u8,
        /// The logical node the agent runs as.
        node: LogicalNodeId,
    },
    /// Orchestrator -> agent: admitted; heartbeats may start.
    Welcome {
        /// The node the agent was admitted as.
        node: LogicalNodeId,
    },
    /// Orchestrator -> agent: refused; the connection closes after it.
    Rejected {
        /// Why, for the agent's log (never holds a secret).
        reason: String,
    },
    /// Agent -> orchestrator: still alive.
    Heartbeat {
        /// Increases by one per heartbeat of the agent's process, from 1.
        seq: u64,
    },
    /// Orchestrator -> agent: stop and exit 0.
    Shutdown,
    /// Orchestrator -> agent: the node runs stage `stage` of the run's
    /// pipeline; the agent starts its pipeline side (boot, worker).
    Pipeline {
        /// The run.
        run_id: RunId,
        /// The stage the plan assigned.
        stage: u32,
    },
    /// Agent -> orchestrator: the node's runtime is ready for the run.
    RuntimeReady {
        /// The run.
        run_id: RunId,
        /// The stage it believes it runs.
        stage: u32,
        /// The report's id.
        readiness_id: u64,
        /// Where the agent accepts edges: `<endpoint id>@<ip:port>,...`.
        addr: String,
    },
    /// Orchestrator -> agent: the runtime-ready report is acknowledged.
    ReadyAck {
        /// The run.
        run_id: RunId,
        /// The report acknowledged.
        readiness_id: u64,
    },
    /// Agent -> orchestrator: the acknowledgement arrived.
    ReadyAcked {
        /// The run.
        run_id: RunId,
        /// The stage.
        stage: u32,
        /// The report acknowledged.
        readiness_id: u64,
    },
    /// Orchestrator -> agent: provision a stage.
    Provision(Box<crate::pipeline::wire::StageOrder>),
    /// Orchestrator -> agent: fetch these weights now (a stage loads them
    /// into its worker only once provisioned).
    Prefetch(Box<crate::pipeline::wire::WeightsRef>),
    /// Orchestrator -> agent: stop a stage.
    StopStage {
        /// The run.
        run_id: RunId,
        /// The stage.
        stage: u32,
    },
    /// Agent -> orchestrator: a stage controller's report.
    StageReport(core_fsm::stage::Report),
    /// Agent -> orchestrator: a slice is on the node (progress, for people).
    WeightsFetched {
        /// First block.
        first_layer: u32,
        /// One past the last block.
        end_layer: u32,
        /// Bytes that crossed the network (0: the cache held it).
        bytes: u64,
        /// Whether a cached slice was refused and fetched again.
        refetched: bool,
    },
    /// Orchestrator -> agent: exit at once, without a goodbye, as a crash
    /// would (the operator's drill; only the orchestrator is obeyed).
    Crash,
    /// Agent -> orchestrator: how far a slice's fetch got (progress, for
    /// people: every few seconds while it runs).
    WeightsFetching {
        /// First block.
        first_layer: u32,
        /// One past the last block.
        end_layer: u32,
        /// Bytes of its tensors on the node so far.
        bytes: u64,
        /// Bytes of its tensors.
        total: u64,
    },
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The length prefix exceeds [`FRAME_BYTES_MAX`].
    Oversized {
        /// The announced length.
        len: usize,
    },
    /// A zero-length frame (no version byte).
    Empty,
    /// The body starts with another wire version.
    WrongVersion {
        /// The version byte seen.
        version: u8,
    },
    /// The body is not a postcard `Frame`, or has trailing bytes.
    Malformed {
        /// What postcard said.
        detail: String,
    },
    /// The stream failed or ended inside a frame.
    Io(std::io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Oversized { len } => {
                write!(f, "frame of {len} bytes exceeds {FRAME_BYTES_MAX}")
            }
            FrameError::Empty => f.write_str("empty frame"),
            FrameError::WrongVersion { version } => {
                write!(f, "wire version {version}, expected {WIRE_VERSION}")
            }
            FrameError::Malformed { detail } => write!(f, "malformed frame: {detail}"),
            FrameError::Io(err) => write!(f, "stream error: {err}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Encodes `frame` with its length prefix and version byte. Fails only when
/// the frame would exceed [`FRAME_BYTES_MAX`] (e.g. an absurd node name).
pub fn encode(frame: &Frame) -> Result<Vec<u8>, FrameError> {
    let body = postcard::to_stdvec(frame).map_err(|err| FrameError::Malformed {
        detail: err.to_string(),
    })?;
    let len = body.len() + 1;
    if len > FRAME_BYTES_MAX {
        return Err(FrameError::Oversized { len });
    }
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&u32::try_from(len).expect("len <= 64 KiB").to_be_bytes());
    out.push(WIRE_VERSION);
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes one frame body (version byte + postcard), as read after its prefix.
pub fn decode_body(body: &[u8]) -> Result<Frame, FrameError> {
    let (&version, rest) = body.split_first().ok_or(FrameError::Empty)?;
    if version != WIRE_VERSION {
        return Err(FrameError::WrongVersion { version });
    }
    let (frame, trailing) =
        postcard::take_from_bytes::<Frame>(rest).map_err(|err| FrameError::Malformed {
            detail: err.to_string(),
        })?;
    if !trailing.is_empty() {
        return Err(FrameError::Malformed {
            detail: format!("{} trailing bytes", trailing.len()),
        });
    }
    Ok(frame)
}

/// A frame's 4-byte big-endian length, as a stream gives it.
pub(crate) enum Prefix {
    /// The stream ended between frames: a clean end.
    End,
    /// The stream ended this many bytes into the length: a cut.
    Cut(usize),
    /// The length.
    Len(u32),
}

/// Reads a frame's length (the control, edge and log streams' framing).
pub(crate) async fn read_prefix<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Prefix> {
    let mut prefix = [0u8; 4];
    let mut filled = 0;
    while filled < prefix.len() {
        match reader.read(&mut prefix[filled..]).await? {
            0 if filled == 0 => return Ok(Prefix::End),
            0 => return Ok(Prefix::Cut(filled)),
            n => filled += n,
        }
    }
    Ok(Prefix::Len(u32::from_be_bytes(prefix)))
}

/// Reads one frame. `Ok(None)` is a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, FrameError> {
    let len = match read_prefix(reader).await.map_err(FrameError::Io)? {
        Prefix::End => return Ok(None),
        Prefix::Cut(_) => return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into())),
        Prefix::Len(len) => usize::try_from(len).expect("u32 fits usize"),
    };
    if len > FRAME_BYTES_MAX {
        return Err(FrameError::Oversized { len });
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await.map_err(FrameError::Io)?;
    decode_body(&body).map(Some)
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &Frame,
) -> Result<(), FrameError> {
    let bytes = encode(frame)?;
    writer.write_all(&bytes).await.map_err(FrameError::Io)?;
    writer.flush().await.map_err(FrameError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejections() {
        let frame = Frame::Heartbeat { seq: 7 };
        let bytes = encode(&frame).unwrap();
        assert_eq!(decode_body(&bytes[4..]).unwrap(), frame);
        assert!(matches!(decode_body(&[]), Err(FrameError::Empty)));
        assert!(matches!(
            decode_body(&[9, 0]),
            Err(FrameError::WrongVersion { version: 9 })
        ));
        assert!(matches!(
            decode_body(&[WIRE_VERSION, 200]),
            Err(FrameError::Malformed { .. })
        ));
        let mut trailing = bytes[4..].to_vec();
        trailing.push(0);
        assert!(matches!(
            decode_body(&trailing),
            Err(FrameError::Malformed { .. })
        ));
    }

    #[test]
    fn token_debug_is_redacted() {
        let frame = Frame::Join {
            version: PROTOCOL_VERSION,
            token: JoinToken::new("s3cr3t"),
            node: LogicalNodeId::from("w-0"),
            run: None,
            lease: None,
        };
        assert!(!format!("{frame:?}").contains("s3cr3t"));
    }

    #[test]
    fn oversized_frames_are_refused_on_encode() {
        let frame = Frame::Rejected {
            reason: "x".repeat(FRAME_BYTES_MAX),
        };
        assert!(matches!(encode(&frame), Err(FrameError::Oversized { .. })));
    }
}
