//! [`LineReader`]: bounded, numbered lines from a socket, safe to use in a
//! `select!` (a partial line survives a cancelled read).

use super::protocol::LINE_BYTES_MAX;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Why no line came.
#[derive(Debug)]
pub enum LineError {
    /// The line grew past [`LINE_BYTES_MAX`] without its newline.
    TooLong {
        /// Its number on the connection, from 1.
        line_number: u64,
    },
    /// The line is not UTF-8.
    NotUtf8 {
        /// Its number on the connection, from 1.
        line_number: u64,
    },
    /// The peer closed in the middle of a line.
    Truncated {
        /// Its number on the connection, from 1.
        line_number: u64,
    },
    /// Reading the socket failed.
    Io(std::io::Error),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::TooLong { line_number } => {
                write!(f, "line {line_number}: longer than {LINE_BYTES_MAX} bytes")
            }
            LineError::NotUtf8 { line_number } => write!(f, "line {line_number}: not UTF-8"),
            LineError::Truncated { line_number } => {
                write!(
                    f,
                    "line {line_number}: the connection ended before its newline"
                )
            }
            LineError::Io(e) => write!(f, "reading the connection: {e}"),
        }
    }
}

/// Lines of at most [`LINE_BYTES_MAX`] bytes, numbered from 1.
pub struct LineReader<R> {
    inner: BufReader<R>,
    /// The line being read; kept here, not in the read future, so that a
    /// cancelled read loses nothing.
    partial: Vec<u8>,
    /// How many lines were returned (blank ones included).
    lines_read: u64,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads lines from `inner`.
    pub fn new(inner: R) -> LineReader<R> {
        LineReader {
            inner: BufReader::new(inner),
            partial: Vec::new(),
            lines_read: 0,
        }
    }

    /// The number of the next line (or of the last one returned, after it).
    pub fn line_number(&self) -> u64 {
        self.lines_read
    }

    /// Reads and drops what the peer still sends, up to `bytes_max` bytes
    /// or its end. Closing a socket with unread bytes resets it, and a reset
    /// can destroy the last answer before the peer reads it.
    pub async fn discard(&mut self, bytes_max: usize) {
        self.partial = Vec::new();
        let mut dropped = 0;
        while dropped < bytes_max {
            let n = match self.inner.fill_buf().await {
                Ok(available) if !available.is_empty() => available.len(),
                _ => return,
            };
            self.inner.consume(n);
            dropped += n;
        }
    }

    /// The next line, without its `\n` (or `\r\n`), with its number; `None`
    /// at the end of the stream. Cancel safe: the only await is `fill_buf`.
    pub async fn next_line(&mut self) -> Result<Option<(u64, String)>, LineError> {
        let line_number = self.lines_read + 1;
        loop {
            let available = self.inner.fill_buf().await.map_err(LineError::Io)?;
            if available.is_empty() {
                return match self.partial.is_empty() {
                    true => Ok(None),
                    false => Err(LineError::Truncated { line_number }),
                };
            }
            let (taken, complete) = match available.iter().position(|&b| b == b'\n') {
                Some(end) => (end + 1, true),
                None => (available.len(), false),
            };
            // `\r\n` included, a line may take two bytes more than its text.
            if self.partial.len() + taken > LINE_BYTES_MAX + 2 {
                return Err(LineError::TooLong { line_number });
            }
            self.partial.extend_from_slice(&available[..taken]);
            self.inner.consume(taken);
            if !complete {
                continue;
            }
            let mut line = std::mem::take(&mut self.partial);
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.len() > LINE_BYTES_MAX {
                return Err(LineError::TooLong { line_number });
            }
            self.lines_read = line_number;
            return match String::from_utf8(line) {
                Ok(text) => Ok(Some((line_number, text))),
                Err(_) => Err(LineError::NotUtf8 { line_number }),
            };
        }
    }
}
