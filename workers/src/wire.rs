//! The stage protocol between an agent and its `drover-worker stage`
//! process: length-prefixed postcard frames on the worker's stdin and
//! stdout (its stderr is for log lines). Versioned and size-capped; a frame
//! that does not decode is an error naming its offset in the stream, and
//! the worker answers it with [`Reply::Fault`] before it exits.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

pub mod f32s;

/// The protocol's version: the worker sends it first (`Hello`, `Ready`),
/// and an agent lets go of a worker that speaks another.
pub const VERSION: u16 = 3;
/// The largest frame accepted: a 512-token prefill of an 8192-wide model's
/// activations is 16 MiB.
pub const MAX_FRAME_BYTES: u32 = 64 << 20;

/// What the agent asks of its worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Run the next positions, starting at `pos` (which must equal the
    /// worker's position: a resume first truncates).
    Forward {
        /// The request's sequence number, echoed in the reply.
        seq: u64,
        /// The first position of the batch.
        pos: u32,
        /// Token ids (first stage) or activations (the others).
        input: Input,
        /// What the last stage returns.
        output: OutputKind,
    },
    /// Forget every position from `pos` on.
    Truncate {
        /// The new length.
        pos: u32,
    },
    /// Finish the current work and exit 0.
    Stop,
    /// Load a stage (a worker started without `--model` waits for this
    /// first); answered by [`Reply::Ready`] or [`Reply::Fault`].
    Load(Load),
}

/// The most threads a [`Load`] may ask for.
pub const MAX_THREADS: u32 = 1024;

/// Which stage a worker started without a model is to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// The GGUF file, or the stage's slice of it.
    pub model: String,
    /// First block.
    pub first_layer: u32,
    /// One past the last block.
    pub end_layer: u32,
    /// Context positions (0: the model's).
    pub ctx: u32,
    /// The sampler of the last stage.
    pub sampling: Sampling,
    /// Threads the stage computes with (0: the worker's own setting, every
    /// core unless `--threads` says otherwise).
    pub threads: u32,
    /// Where the stage's blocks run; a backend this machine cannot run is
    /// a `Fault` naming what is missing.
    pub backend: crate::model::Backend,
}

/// Sampling settings as they travel.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// 0: greedy.
    pub temperature: f32,
    /// 0: off.
    pub top_k: u32,
    /// 1: off.
    pub top_p: f32,
    /// The seed of the sampler; it restarts with each request (position 0).
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// A batch's input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Input {
    /// Token ids.
    Tokens(Vec<u32>),
    /// `rows × embedding` f32 residual activations.
    Activations(#[serde(with = "f32s")] Vec<f32>),
}

/// What the last stage returns for a batch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum OutputKind {
    /// The sampled next token.
    Token,
    /// The last position's logits.
    LastLogits,
    /// Every position's logits.
    AllLogits,
}

/// What the worker answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Sent once, after the weights are mapped: the worker is ready.
    Ready {
        /// [`VERSION`].
        version: u16,
        /// First block.
        first_layer: u32,
        /// One past the last block.
        end_layer: u32,
        /// Hidden size (activation row width).
        embedding: u32,
        /// Vocabulary size.
        vocab: u32,
        /// Bytes of the model mapped.
        bytes_mapped: u64,
    },
    /// Activations for the next stage.
    Activations {
        /// The request's sequence number.
        seq: u64,
        /// `rows × embedding` values.
        #[serde(with = "f32s")]
        data: Vec<f32>,
    },
    /// The sampled token (last stage).
    Token {
        /// The request's sequence number.
        seq: u64,
        /// The token id.
        id: u32,
    },
    /// Logits (last stage).
    Logits {
        /// The request's sequence number.
        seq: u64,
        /// `vocab` values per position.
        #[serde(with = "f32s")]
        data: Vec<f32>,
    },
    /// The request failed (or the stream broke); `seq` 0 when no request
    /// is to blame.
    Fault {
        /// The request's sequence number.
        seq: u64,
        /// Why, for people.
        reason: String,
    },
    /// Sent first by a worker started without `--model`: it runs and waits
    /// for [`Request::Load`].
    Hello {
        /// [`VERSION`].
        version: u16,
    },
}

/// A frame that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream ended cleanly before a frame.
    #[error("the stream ended")]
    Closed,
    /// An I/O error.
    #[error("offset {offset}: {source}")]
    Io {
        /// Bytes read from the stream before the frame.
        offset: u64,
        /// The cause.
        source: io::Error,
    },
    /// A frame too large, or bytes that do not decode.
    #[error("offset {offset}: {reason}")]
    Malformed {
        /// Bytes read from the stream before the frame.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Reads frames from a stream, counting offsets for errors.
pub struct FrameReader<R> {
    inner: R,
    offset: u64,
}

impl<R: Read> FrameReader<R> {
    /// Reads from `inner`.
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader { inner, offset: 0 }
    }

    /// The next frame, decoded as `T`.
    pub fn read<T: for<'de> Deserialize<'de>>(&mut self) -> Result<T, FrameError> {
        let at = self.offset;
        let mut len = [0u8; 4];
        // The end of the stream is clean only between frames: inside a
        // frame's length it is a cut, as inside its body.
        let mut filled = 0;
        while filled < len.len() {
            match self.inner.read(&mut len[filled..]) {
                Ok(0) if filled == 0 => return Err(FrameError::Closed),
                Ok(0) => {
                    return Err(FrameError::Malformed {
                        offset: at,
                        reason: format!("the stream ended {filled} bytes into a frame's length"),
                    });
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(FrameError::Io { offset: at, source }),
            }
        }
        let len = u32::from_le_bytes(len);
        if len > MAX_FRAME_BYTES {
            return Err(FrameError::Malformed {
                offset: at,
                reason: format!("a frame of {len} bytes is over the {MAX_FRAME_BYTES}-byte cap"),
            });
        }
        let mut body = vec![0u8; len as usize];
        self.inner
            .read_exact(&mut body)
            .map_err(|source| FrameError::Io {
                offset: at + 4,
                source,
            })?;
        self.offset += 4 + len as u64;
        postcard::from_bytes(&body).map_err(|e| FrameError::Malformed {
            offset: at,
            reason: format!("the frame does not decode: {e}"),
        })
    }
}

/// Why a value is not a frame.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// Its body is over [`MAX_FRAME_BYTES`].
    #[error("a frame of {0} bytes is over the {MAX_FRAME_BYTES}-byte cap")]
    Oversized(usize),
    /// It does not serialize.
    #[error("the frame does not encode: {0}")]
    Postcard(#[from] postcard::Error),
}

/// One frame of `value`: its length (u32 little-endian) and its postcard
/// body, in one buffer (the body written straight after the length).
pub fn encode_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let mut frame = postcard::to_extend(value, vec![0u8; 4])?;
    let len = frame.len() - 4;
    let len32 = u32::try_from(len)
        .ok()
        .filter(|&n| n <= MAX_FRAME_BYTES)
        .ok_or(EncodeError::Oversized(len))?;
    frame[..4].copy_from_slice(&len32.to_le_bytes());
    Ok(frame)
}

/// Writes one frame ([`encode_frame`]) in one `write_all`, and flushes: on
/// an unbuffered pipe that is one `write` (the reader wakes once a frame,
/// not once for the length and again for each piece of the body). A value
/// that is no frame is an `InvalidInput` error saying why, and nothing is
/// written.
pub fn write_frame<T: Serialize>(w: &mut impl Write, value: &T) -> io::Result<()> {
    let frame = encode_frame(value).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    w.write_all(&frame)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_cut_inside_a_frames_length_is_not_a_clean_end() {
        let mut clean = FrameReader::new(&[][..]);
        assert!(matches!(clean.read::<Reply>(), Err(FrameError::Closed)));
        let mut cut = FrameReader::new(&[7u8, 0][..]);
        match cut.read::<Reply>() {
            Err(e @ FrameError::Malformed { offset: 0, .. }) => assert_eq!(
                e.to_string(),
                "offset 0: the stream ended 2 bytes into a frame's length"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_oversized_frame_is_an_error_and_writes_nothing() {
        let values = (MAX_FRAME_BYTES as usize / 4) + 1;
        let reply = Reply::Activations {
            seq: 1,
            data: vec![0.5; values],
        };
        let mut out = Vec::new();
        let e = write_frame(&mut out, &reply).expect_err("over the cap");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string().starts_with("a frame of 67108") && e.to_string().contains("cap"),
            "{e}"
        );
        assert!(out.is_empty());
    }

    /// Records each `write` it is handed.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_frame_is_one_write_and_reads_back() {
        // Activations with newline bytes in them (0x0a), which a line
        // buffer would have split at.
        let reply = Reply::Activations {
            seq: 7,
            data: vec![f32::from_le_bytes([0x0a, 0x0a, 0x0a, 0x0a]); 1536],
        };
        let mut w = Writes::default();
        write_frame(&mut w, &reply).unwrap();
        assert_eq!(
            w.0.len(),
            1,
            "writes: {:?}",
            w.0.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let frame = &w.0[0];
        let len = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len + 4, frame.len());
        // The variant, the seq, then the values as one byte string: its
        // length in bytes (6144, a two-byte varint) and the bytes.
        assert_eq!(&frame[4..8], &[1, 7, 0x80, 0x30]);
        assert_eq!(frame.len(), 8 + 4 * 1536);
        let mut r = FrameReader::new(&frame[..]);
        assert_eq!(r.read::<Reply>().unwrap(), reply);
        assert!(matches!(r.read::<Reply>(), Err(FrameError::Closed)));
    }
}
