//! The log stream: a node agent's own lines and its worker's, sent to the
//! orchestrator on a connection of their own (ALPN [`LOG_ALPN`]), so the
//! control stream never waits behind them (`spec/datastream.md`, "The log
//! stream").
//!
//! After its control connection is welcomed the agent dials with
//! [`LOG_ALPN`], opens one bidirectional stream and sends `Hello`; the
//! orchestrator admits it only while the same endpoint id holds a live
//! control connection for that node, and answers `Resume { after }`: the
//! highest position of this agent's lines its datastream already holds.
//! The agent then sends every line it still buffers above `after`, in
//! order, then new lines as they come; lines its bounded buffer had to drop
//! are announced by one `Gap`. Frames are framed as control frames are: a
//! `u32` big-endian length, a version byte, postcard.

use crate::datastream::{self, Forwarded, Hub};
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId};
use iroh::endpoint::Connection;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The QUIC application protocol of the log stream.
pub const LOG_ALPN: &[u8] = b"drover/logs/1";

/// The log stream's wire version (first byte of every frame body).
pub const LOG_WIRE_VERSION: u8 = 1;

/// Largest frame body, in bytes.
pub const LOG_FRAME_BYTES_MAX: usize = 64 * 1024;

/// Longest line forwarded; a longer one is cut there and marked.
pub const LINE_BYTES_MAX: usize = 16 * 1024;

/// How long the agent may take to send its `Hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Which of the node's outputs a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogChannel {
    /// The agent's progress lines.
    AgentStdout,
    /// The agent's problem lines.
    AgentStderr,
    /// The stage worker's stderr.
    WorkerStderr,
    /// The stage worker's per-step telemetry (appended: the wire's
    /// variants are only ever appended).
    WorkerTelemetry,
}

impl LogChannel {
    /// The datastream channel name.
    pub fn name(self) -> &'static str {
        match self {
            LogChannel::AgentStdout => datastream::channel::AGENT_STDOUT,
            LogChannel::AgentStderr => datastream::channel::AGENT_STDERR,
            LogChannel::WorkerStderr => datastream::channel::WORKER_STDERR,
            LogChannel::WorkerTelemetry => datastream::channel::WORKER_TELEMETRY,
        }
    }
}

/// One frame of the log stream. Variants are only ever appended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogFrame {
    /// Agent -> orchestrator, first: who is sending.
    Hello {
        /// [`LOG_WIRE_VERSION`].
        version: u8,
        /// The node the agent runs as.
        node: LogicalNodeId,
    },
    /// Orchestrator -> agent: the highest position already held (0: none).
    Resume {
        /// Lines up to this position need not be sent.
        after: u64,
    },
    /// Agent -> orchestrator: one line.
    Line {
        /// The agent's number for it, from 1 per agent process, without gaps.
        position: u64,
        /// Which output.
        channel: LogChannel,
        /// The line without its newline (any bytes).
        bytes: Vec<u8>,
    },
    /// Agent -> orchestrator: lines `first..=last` were dropped by the
    /// agent's bounded buffer and cannot be sent.
    Gap {
        /// The first lost position.
        first: u64,
        /// The last lost position.
        last: u64,
    },
}

/// Appends one frame, length-prefixed, to `out` (several frames go out in
/// one write).
pub fn encode_log_frame(frame: &LogFrame, out: &mut Vec<u8>) -> std::io::Result<()> {
    let body = postcard::to_stdvec(frame).map_err(std::io::Error::other)?;
    let len = body.len() + 1;
    if len > LOG_FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "log frame of {len} bytes exceeds {LOG_FRAME_BYTES_MAX}"
        )));
    }
    out.reserve(4 + len);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    out.push(LOG_WIRE_VERSION);
    out.extend_from_slice(&body);
    Ok(())
}

/// Writes one frame.
pub async fn write_log_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &LogFrame,
) -> std::io::Result<()> {
    let mut out = Vec::new();
    encode_log_frame(frame, &mut out)?;
    writer.write_all(&out).await?;
    writer.flush().await
}

/// Reads one frame; `Ok(None)` is a clean end between frames (a stream
/// cut inside a frame's length is an error, as inside its body).
pub async fn read_log_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<LogFrame>> {
    let len = match super::wire::read_prefix(reader).await? {
        super::wire::Prefix::End => return Ok(None),
        super::wire::Prefix::Cut(filled) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("a log frame cut after {filled} bytes of its length"),
            ));
        }
        super::wire::Prefix::Len(len) => usize::try_from(len).unwrap_or(usize::MAX),
    };
    if len == 0 || len > LOG_FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!("log frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await?;
    if body[0] != LOG_WIRE_VERSION {
        return Err(std::io::Error::other(format!(
            "log wire version {}, expected {LOG_WIRE_VERSION}",
            body[0]
        )));
    }
    let (frame, rest) = postcard::take_from_bytes::<LogFrame>(&body[1..])
        .map_err(|e| std::io::Error::other(format!("malformed log frame: {e}")))?;
    if !rest.is_empty() {
        return Err(std::io::Error::other("trailing bytes after a log frame"));
    }
    Ok(Some(frame))
}

/// The orchestrator's end of one agent's log connection: `node` is the
/// node the agent's live control connection was admitted for. Writes every
/// line into the node's datastream file until the connection ends.
pub async fn serve_log_stream(
    conn: Connection,
    agent: AgentId,
    node: LogicalNodeId,
    lease: Option<LeaseId>,
    hub: Hub,
) {
    let opened = tokio::time::timeout(HELLO_TIMEOUT, async {
        let (send, mut recv) = conn.accept_bi().await.ok()?;
        let hello = read_log_frame(&mut recv).await.ok()??;
        Some((send, recv, hello))
    })
    .await;
    let Ok(Some((mut send, mut recv, hello))) = opened else {
        conn.close(super::CLOSE_PROTOCOL, b"no log hello in time");
        return;
    };
    match hello {
        LogFrame::Hello {
            version,
            node: claimed,
        } if version == LOG_WIRE_VERSION && claimed == node => {}
        _ => {
            conn.close(super::CLOSE_PROTOCOL, b"bad log hello");
            return;
        }
    }
    let after = hub.with(|w| w.last_position(&node, &agent));
    if write_log_frame(&mut send, &LogFrame::Resume { after })
        .await
        .is_err()
    {
        return;
    }
    loop {
        let frame = match read_log_frame(&mut recv).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                conn.close(super::CLOSE_PROTOCOL, e.to_string().as_bytes());
                return;
            }
        };
        let written = match frame {
            LogFrame::Line {
                position,
                channel,
                bytes,
            } => hub.with(|w| {
                w.forwarded(Forwarded {
                    node: node.clone(),
                    lease: lease.clone(),
                    agent: agent.clone(),
                    channel: channel.name(),
                    position,
                    bytes,
                })
                .map(|_| ())
            }),
            LogFrame::Gap { first, last } => hub.with(|w| {
                // Part of the range may already be here (sent before a loss).
                let first = first.max(w.last_position(&node, &agent).saturating_add(1));
                if first > last {
                    return Ok(());
                }
                w.gap(&node, lease.clone(), &agent, first, last)
            }),
            LogFrame::Hello { .. } | LogFrame::Resume { .. } => {
                conn.close(super::CLOSE_PROTOCOL, b"unexpected log frame");
                return;
            }
        };
        if let Err(e) = written {
            crate::stdout::eline!("drover: datastream write for {node}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_garbage_is_refused() {
        let frames = [
            LogFrame::Hello {
                version: LOG_WIRE_VERSION,
                node: LogicalNodeId::from("w-0"),
            },
            LogFrame::Resume { after: 7 },
            LogFrame::Line {
                position: 8,
                channel: LogChannel::WorkerStderr,
                bytes: b"\xffbytes".to_vec(),
            },
            LogFrame::Gap { first: 9, last: 12 },
        ];
        let mut wire = Vec::new();
        for frame in &frames {
            write_log_frame(&mut wire, frame).await.unwrap();
        }
        let mut reader = wire.as_slice();
        for frame in &frames {
            assert_eq!(
                read_log_frame(&mut reader).await.unwrap().as_ref(),
                Some(frame)
            );
        }
        assert!(read_log_frame(&mut reader).await.unwrap().is_none());
        let error = |mut bytes: &'static [u8]| async move {
            match read_log_frame(&mut bytes).await {
                Err(e) => e.to_string(),
                Ok(frame) => panic!("read {frame:?}"),
            }
        };
        assert_eq!(
            error(&[0, 0, 0, 2, 9, 0]).await,
            format!("log wire version 9, expected {LOG_WIRE_VERSION}")
        );
        // The cap, not the missing body, refuses it.
        assert_eq!(
            error(&[0xff, 0xff, 0xff, 0xff]).await,
            "log frame of 4294967295 bytes"
        );
        assert_eq!(
            error(&[0, 0]).await,
            "a log frame cut after 2 bytes of its length"
        );
    }
}
