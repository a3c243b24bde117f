//! What travels on the pipeline's own iroh connections, and the pipeline's
//! control frames' payloads.
//!
//! - Edges (ALPN [`EDGE_ALPN`]): the sender dials the receiver (the
//!   orchestrator dials stage 0 for token-in, stage `k` dials stage `k + 1`,
//!   the last stage dials the orchestrator for token-out), says
//!   [`EdgeFrame::Hello`], then sends steps. A receiver accepts an edge only
//!   from the identity the provision names.
//! - Weights (ALPN [`WEIGHTS_ALPN`]): a node asks the orchestrator for byte
//!   ranges of the model ([`WeightsRequest`]); the answer is those bytes,
//!   in order, raw.
//!
//! Frames are `u32` big-endian length, one version byte, postcard; at most
//! [`EDGE_FRAME_MAX`] bytes. A frame that does not decode faults its edge
//! only.

use crate::transport::wire::{Prefix, read_prefix};
use core_fsm::ids::{AgentId, RunId};
use core_fsm::stage::Provision;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The QUIC application protocol of activation and token edges.
pub const EDGE_ALPN: &[u8] = b"drover/edge/1";
/// The QUIC application protocol of the model's byte ranges.
pub const WEIGHTS_ALPN: &[u8] = b"drover/weights/1";
/// The version byte of every edge and weights frame.
pub const EDGE_VERSION: u8 = 2;
/// The largest frame: a 512-token prefill of an 8192-wide model is 16 MiB.
pub const EDGE_FRAME_MAX: usize = 64 << 20;

/// One frame on an edge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EdgeFrame {
    /// First frame: which edge of which run this connection carries.
    Hello {
        /// The run.
        run_id: RunId,
        /// The edge's number (edge `k` flows into stage `k`).
        edge: u32,
    },
    /// One step's input for the receiving stage.
    Step(Step),
    /// A sampled token, from the last stage to the orchestrator.
    Token {
        /// The step that produced it.
        step: u64,
        /// The request.
        request: u64,
        /// Its sequence number within the request.
        seq: u64,
        /// The token.
        token: u32,
    },
}

/// One step: a batch of positions of one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The pipeline's step number, from 0, one per injected batch.
    pub step: u64,
    /// The request.
    pub request: u64,
    /// The batch's sequence number within the request (0: the prompt).
    pub seq: u64,
    /// The batch's first position.
    pub pos: u32,
    /// Token ids (into stage 0) or activations (into the others).
    pub payload: Payload,
    /// The last chunk of its batch: the last stage samples only on it.
    pub last: bool,
}

/// A step's data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Payload {
    /// Token ids.
    Tokens(Vec<u32>),
    /// `rows × hidden` f32 residual activations, as their bytes
    /// ([`workers::wire::f32s`]).
    Activations(#[serde(with = "workers::wire::f32s")] Vec<f32>),
}

/// Where a stage's weights come from and how they are checked, carried in
/// its provision and its prefetch hint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsRef {
    /// The whole model's sha256 (hex): the cache key's first part.
    pub model_digest: String,
    /// Bytes of the whole model file.
    pub model_size: u64,
    /// Bytes of the GGUF header (metadata and tensor infos, padded).
    pub header_len: u64,
    /// The header's sha256 (hex).
    pub header_sha256: String,
    /// First block of the stage.
    pub first_layer: u32,
    /// One past its last block.
    pub end_layer: u32,
    /// sha256 (hex) of the stage's tensor bytes, in file order.
    pub slice_sha256: String,
    /// sha256 (hex) of the slice file's head, its bytes before the tensor
    /// data (`workers::gguf::slice::slice_head`): with `slice_sha256`, a
    /// cached slice is checked in every byte a worker reads.
    pub slice_head_sha256: String,
    /// Bytes of those tensors.
    pub slice_bytes: u64,
}

/// Sampling settings for the last stage.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingSpec {
    /// 0: greedy.
    pub temperature: f32,
    /// 0: off.
    pub top_k: u32,
    /// 1: off.
    pub top_p: f32,
    /// The seed; each request starts from it.
    pub seed: u64,
}

impl Default for SamplingSpec {
    fn default() -> Self {
        SamplingSpec {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// A provision as it travels: the machine's provision, and what the node
/// needs to carry it out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageOrder {
    /// What the run decided.
    pub provision: Provision,
    /// The receiver of the outbound edge: `<endpoint id>@<ip:port>,...`.
    pub downstream: String,
    /// The only identity the inbound edge is accepted from.
    pub upstream: AgentId,
    /// The stage's weights.
    pub weights: WeightsRef,
    /// How its worker runs.
    pub worker: WorkerSettings,
}

/// How every stage's worker of a run runs (the plan's `[pipeline]` and
/// `[sampling]`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSettings {
    /// Context positions (0: the model's).
    pub ctx: u32,
    /// Threads each stage computes with (0: every core of its machine).
    pub threads: u32,
    /// Where each stage's blocks run.
    pub backend: workers::model::Backend,
    /// The last stage's sampler.
    pub sampling: SamplingSpec,
}

/// A node's request for byte ranges of the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsRequest {
    /// The model the node expects (refused when it is not the one served).
    pub model_digest: String,
    /// `(offset, length)` ranges, answered in order.
    pub ranges: Vec<(u64, u64)>,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// The stream ended between frames.
    #[error("the stream ended")]
    Closed,
    /// The stream failed.
    #[error("stream error: {0}")]
    Io(#[from] std::io::Error),
    /// Too long, empty, another version, or not a frame.
    #[error("bad frame: {0}")]
    Malformed(String),
}

/// Writes one frame.
pub async fn write<T: Serialize, W: AsyncWrite + Unpin>(
    w: &mut W,
    value: &T,
) -> Result<(), EdgeError> {
    // The body goes straight after the length (filled in below) and the
    // version byte: one buffer, one copy.
    let mut out = postcard::to_extend(value, vec![0, 0, 0, 0, EDGE_VERSION])
        .map_err(|e| EdgeError::Malformed(e.to_string()))?;
    let len = out.len() - 4;
    if len > EDGE_FRAME_MAX {
        return Err(EdgeError::Malformed(format!(
            "a frame of {len} bytes is over the {EDGE_FRAME_MAX}-byte cap"
        )));
    }
    out[..4].copy_from_slice(&u32::try_from(len).expect("capped").to_be_bytes());
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one frame.
pub async fn read<T: for<'de> Deserialize<'de>, R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<T, EdgeError> {
    // Closed only between frames: a stream cut inside a frame's length is
    // malformed, as one cut inside its body is an I/O error.
    let len = match read_prefix(r).await? {
        Prefix::End => return Err(EdgeError::Closed),
        Prefix::Cut(filled) => {
            return Err(EdgeError::Malformed(format!(
                "the stream ended {filled} bytes into a frame's length"
            )));
        }
        Prefix::Len(len) => len as usize,
    };
    if len == 0 || len > EDGE_FRAME_MAX {
        return Err(EdgeError::Malformed(format!(
            "a frame of {len} bytes (1 to {EDGE_FRAME_MAX})"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    if body[0] != EDGE_VERSION {
        return Err(EdgeError::Malformed(format!(
            "version {}, expected {EDGE_VERSION}",
            body[0]
        )));
    }
    let (value, rest) =
        postcard::take_from_bytes(&body[1..]).map_err(|e| EdgeError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(EdgeError::Malformed(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_refused() {
        let frame = EdgeFrame::Step(Step {
            step: 3,
            request: 1,
            seq: 2,
            pos: 9,
            payload: Payload::Activations(vec![1.5, -2.0]),
            last: true,
        });
        let mut bytes = Vec::new();
        write(&mut bytes, &frame).await.unwrap();
        // The activations as one byte string: its length in bytes (8),
        // then 1.5 and -2.0 little-endian.
        assert!(
            bytes.ends_with(&[8, 0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0, 1]),
            "{bytes:?}"
        );
        let back: EdgeFrame = read(&mut bytes.as_slice()).await.unwrap();
        assert_eq!(back, frame);
        let mut wrong = bytes.clone();
        wrong[4] = 9;
        let err = read::<EdgeFrame, _>(&mut wrong.as_slice())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("version 9"), "{err}");
        let huge = (EDGE_FRAME_MAX as u32 + 1).to_be_bytes();
        let err = read::<EdgeFrame, _>(&mut huge.as_slice())
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "bad frame: a frame of {} bytes (1 to {EDGE_FRAME_MAX})",
                EDGE_FRAME_MAX + 1
            )
        );
        // Cut inside the length: not the clean end of an edge.
        let err = read::<EdgeFrame, _>(&mut [0u8, 0, 1].as_slice())
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad frame: the stream ended 3 bytes into a frame's length"
        );
        let garbage = [0, 0, 0, 2, EDGE_VERSION, 200];
        assert!(matches!(
            read::<EdgeFrame, _>(&mut garbage.as_slice()).await,
            Err(EdgeError::Malformed(_))
        ));
        assert!(matches!(
            read::<EdgeFrame, _>(&mut [].as_slice()).await,
            Err(EdgeError::Closed)
        ));
    }
}
