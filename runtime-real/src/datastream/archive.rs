//! The frame archive (`[observability] frame_log = PATH`, `drover up
//! --frame-log PATH`): every datastream line, as it is written, as one JSON
//! line with its arrival number. Opened for append (its folder created) at
//! startup, where a failure is an error; written one record per `write`, so
//! each record is on disk (in the OS) when it returns. A write failure
//! later is counted and reported, never fatal: the archive is an extra
//! copy, the datastream files stay the record.

use super::Line;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How far back from the end an opened archive is read for its last
/// arrival number.
const TAIL_BYTES: u64 = 256 * 1024;

/// One archive record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Arrival order over the archive's whole life, from 1 (a restarted
    /// `up` continues above the last one).
    pub arrival: u64,
    /// The datastream file the line went to: a node, or `orchestrator`.
    pub node: String,
    /// Who produced it: `ssh-bootstrap`, `agent`, `worker`, `orchestrator`.
    pub source: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The channel (`spec/datastream.md`, "Channels").
    pub channel: String,
    /// The line's sequence number in its file and stream.
    pub position: u64,
    /// The agent's own number for a forwarded line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_position: Option<u64>,
    /// When it was seen, ms on the orchestrator's run clock.
    pub at_ms: u64,
    /// `text` (the payload is the bytes, UTF-8) or `base64`.
    pub encoding: String,
    /// The line's bytes, without the newline.
    pub payload: String,
}

impl Record {
    /// The payload's bytes; `None` for a payload that does not decode.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        match self.encoding.as_str() {
            "text" => Some(self.payload.clone().into_bytes()),
            "base64" => base64_decode(&self.payload),
            _ => None,
        }
    }
}

/// An open archive.
pub struct Archive {
    path: PathBuf,
    file: File,
    arrival: u64,
    failed: u64,
}

impl Archive {
    /// Opens (creating it and its folders) `path` for append. The error
    /// names the path.
    pub fn open(path: &Path) -> Result<Archive, String> {
        let shown = path.display();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("frame log {shown}: cannot create {}: {e}", dir.display()))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)
            .map_err(|e| format!("frame log {shown}: cannot open for append: {e}"))?;
        let arrival = last_arrival(&mut file).unwrap_or(0);
        Ok(Archive {
            path: path.to_owned(),
            file,
            arrival,
            failed: 0,
        })
    }

    /// The archive's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records that could not be written.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Appends `line`, whose raw bytes are `bytes`.
    pub fn record(&mut self, line: &Line, bytes: &[u8]) {
        self.arrival += 1;
        let (encoding, payload) = match std::str::from_utf8(bytes) {
            Ok(text) => ("text", text.to_owned()),
            Err(_) => ("base64", base64_encode(bytes)),
        };
        let r = &line.record;
        let record = Record {
            arrival: self.arrival,
            node: r.node.as_str().to_owned(),
            source: r.source.clone(),
            stream: match r.stream {
                core_fsm::port::LogStream::Stdout => "stdout".to_owned(),
                core_fsm::port::LogStream::Stderr => "stderr".to_owned(),
            },
            channel: line.channel.clone(),
            position: r.seq,
            agent_position: line.position,
            at_ms: r.at.as_millis(),
            encoding: encoding.to_owned(),
            payload,
        };
        let written = serde_json::to_vec(&record)
            .map_err(io::Error::other)
            .and_then(|mut text| {
                text.push(b'\n');
                self.file.write_all(&text)?;
                self.file.flush()
            });
        if let Err(e) = written {
            self.failed += 1;
            if self.failed == 1 {
                crate::stdout::eline!(
                    "drover: frame log {}: {e} (later failures are only counted)",
                    self.path.display()
                );
            }
        }
    }
}

/// Reads an archive back; lines that do not parse are counted.
pub fn read(path: &Path) -> io::Result<(Vec<Record>, u64)> {
    let text = std::fs::read_to_string(path)?;
    let mut records = Vec::new();
    let mut skipped = 0;
    for line in text.lines() {
        match serde_json::from_str(line) {
            Ok(record) => records.push(record),
            Err(_) => skipped += 1,
        }
    }
    Ok((records, skipped))
}

/// The last arrival number in the file's tail (0 when none).
fn last_arrival(file: &mut File) -> io::Result<u64> {
    let len = file.metadata()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.take(len - start).read_to_end(&mut tail)?;
    Ok(tail
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Record>(line).ok())
        .map(|r| r.arrival)
        .max()
        .unwrap_or(0))
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes [`base64_encode`]'s form; `None` for anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.chunks(4) {
        let pad = chunk.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = if i >= 4 - pad {
                0
            } else {
                ALPHABET.iter().position(|a| a == c)? as u32
            };
            n = (n << 6) | v;
        }
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
}
