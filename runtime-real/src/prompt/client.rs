//! [`Client`]: one connection to the prompt service, as `drover prompt`,
//! `drover chat` and the tests use it.

use super::lines::{LineError, LineReader};
use super::protocol::{ClientMsg, ServerMsg, located, to_line};
use std::io::{Error, ErrorKind};
use std::net::SocketAddr;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A connection to the prompt service. Every error names its address.
pub struct Client {
    addr: SocketAddr,
    lines: LineReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let line = self.lines.line_number();
        write!(f, "Client {{ addr: {}, lines_read: {line} }}", self.addr)
    }
}

impl Client {
    /// Connects to the service at `addr`.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr).await.map_err(|e| {
            Error::new(
                e.kind(),
                format!("cannot reach the prompt service at {addr}: {e}"),
            )
        })?;
        let (read, writer) = stream.into_split();
        Ok(Client {
            addr,
            lines: LineReader::new(read),
            writer,
        })
    }

    /// The service's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Submits a prompt; `max_tokens` `None` (or 0) asks for no cap.
    pub async fn submit(
        &mut self,
        request_id: u64,
        text: &str,
        max_tokens: Option<u32>,
    ) -> std::io::Result<()> {
        let message = ClientMsg::SubmitPrompt {
            request_id,
            prompt_text: text.to_owned(),
            max_tokens,
        };
        self.send(&message).await
    }

    /// Asks the run to stop in order; the service answers `ShuttingDown`.
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        self.send(&ClientMsg::Shutdown {}).await
    }

    /// The next message; `None` when the service closed the connection.
    pub async fn next(&mut self) -> std::io::Result<Option<ServerMsg>> {
        Ok(self.next_line().await?.map(|(_, message)| message))
    }

    /// The next message with its line as received (no newline), for
    /// `--json`; `None` when the service closed the connection.
    pub async fn next_line(&mut self) -> std::io::Result<Option<(String, ServerMsg)>> {
        let addr = self.addr;
        let (line_number, text) = loop {
            match self.lines.next_line().await {
                Ok(Some((_, text))) if text.trim().is_empty() => continue,
                Ok(Some(line)) => break line,
                Ok(None) => return Ok(None),
                Err(LineError::Io(e)) => {
                    let message = format!("reading from the prompt service at {addr}: {e}");
                    return Err(Error::new(e.kind(), message));
                }
                Err(e) => {
                    let message = format!("the prompt service at {addr} sent a bad {e}");
                    return Err(Error::new(ErrorKind::InvalidData, message));
                }
            }
        };
        match serde_json::from_str(&text) {
            Ok(message) => Ok(Some((text, message))),
            Err(e) => {
                let reason = located(line_number, &e);
                let message = format!("the prompt service at {addr} sent a bad {reason}");
                Err(Error::new(ErrorKind::InvalidData, message))
            }
        }
    }

    async fn send(&mut self, message: &ClientMsg) -> std::io::Result<()> {
        let line = to_line(message);
        self.writer.write_all(line.as_bytes()).await.map_err(|e| {
            let message = format!("writing to the prompt service at {}: {e}", self.addr);
            Error::new(e.kind(), message)
        })
    }
}
