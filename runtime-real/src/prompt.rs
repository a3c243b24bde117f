//! The prompt RPC (seed 004 §2.5, §7.8): newline-delimited JSON over TCP
//! between `drover up`, which serves a pipeline, and its clients (`drover
//! prompt`, `drover chat`, anything that speaks the protocol).
//!
//! The [`Server`] knows nothing of the pipeline: it turns each connection's
//! lines into [`Call`]s on one channel and writes back the [`ServerMsg`]s the
//! pipeline sends for a request. Per connection one prompt is in flight, from
//! its `SubmitPrompt` until the server wrote the first terminal event (`Done`
//! or `Fault`) the pipeline sent for it; a second `SubmitPrompt` before that,
//! a malformed or unknown line, or one over 1 MiB is a `ProtocolError` that
//! closes that connection only. The service's address lies in the state dir
//! ([`write_addr`], [`read_addr`]) while it serves.

mod client;
pub mod commands;
mod lines;
pub mod protocol;
mod server;

pub use client::Client;
pub use protocol::{ClientMsg, DoneReason, ServerMsg};
pub use server::{CONNECTIONS_MAX, Server};

use crate::state_dir::StateDir;
use std::net::SocketAddr;
use std::path::Path;
use tokio::sync::mpsc::UnboundedSender;

/// What the server tells the pipeline.
#[derive(Debug)]
pub enum Call {
    /// A prompt from connection `conn`. `events` takes its answer: zero or
    /// more `TextDelta`s, then one terminal (`Done` or `Fault`), each with
    /// this `request_id`. The server forwards them to the socket in order and
    /// ends the request at the first terminal; a `Fault` is written for it if
    /// `events` is dropped before one. Once the request ended or the
    /// connection went away, `send` fails: ignore it.
    Submit {
        /// The connection, unique for the server's life.
        conn: u64,
        /// The client's id for the request: unique only per connection.
        request_id: u64,
        /// The prompt.
        text: String,
        /// The most tokens to generate; `None` for no cap (the client sent
        /// none, null or 0).
        max_tokens: Option<u32>,
        /// Where the request's answer goes.
        events: UnboundedSender<ServerMsg>,
    },
    /// A client asked the run to stop in order (it was answered
    /// `ShuttingDown`).
    Shutdown {
        /// The connection that asked.
        conn: u64,
    },
    /// The connection ended, for any reason (the client closed it, a write
    /// failed, a protocol error); sent once for every connection. Its
    /// request in flight, if any, is abandoned: the pipeline may cancel or
    /// finish it, and what it sends for it is dropped.
    Disconnected {
        /// The connection.
        conn: u64,
    },
}

/// Writes `addr` to the state dir's prompt address file, atomically (a
/// reader sees the old content or the new, never half of it).
pub fn write_addr(state_dir: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let path = StateDir::at(state_dir).prompt_addr();
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    std::fs::create_dir_all(state_dir).map_err(named)?;
    crate::provider::local::write_atomic(&path, format!("{addr}\n").as_bytes()).map_err(named)
}

/// Removes the prompt address file (when the service closes); a missing
/// file is fine.
pub fn remove_addr(state_dir: &Path) -> std::io::Result<()> {
    let path = StateDir::at(state_dir).prompt_addr();
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        )),
        _ => Ok(()),
    }
}

/// Reads the address [`write_addr`] wrote; the error, for a person, names
/// the file.
pub fn read_addr(state_dir: &Path) -> Result<SocketAddr, String> {
    let path = StateDir::at(state_dir).prompt_addr();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "no prompt service: is a pipeline `drover up` running on {}? ({} does not exist)",
                state_dir.display(),
                path.display()
            ));
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let text = text.trim();
    text.parse().map_err(|e| {
        format!(
            "{}: `{text}` is not an ip:port address ({e})",
            path.display()
        )
    })
}
