//! The prompt service's server: accepts connections, reads their lines,
//! hands prompts to the pipeline as [`Call`]s and writes the pipeline's
//! answers back, one task a connection.

use super::Call;
use super::lines::{LineError, LineReader};
use super::protocol::{ClientMsg, ServerMsg, parse_client_line};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// The most connections served at once; one more is told so and closed.
pub const CONNECTIONS_MAX: usize = 64;

/// How long one line may take to reach a client that stopped reading
/// before its connection is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a closing connection keeps reading (and dropping) what the
/// client still sends, and how much at most, so that its last line (a
/// `ProtocolError`, say) is not lost to a reset.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES_MAX: usize = 4 << 20;

/// How long the accept loop waits after a failed accept (out of file
/// descriptors, say) before it tries again, so that it does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// A bound, not yet serving, prompt service.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
}

impl Server {
    /// Binds `addr` (port 0: any free port). The error names the address.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Server> {
        let named = |e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("prompt service on {addr}: {e}"))
        };
        let listener = TcpListener::bind(addr).await.map_err(named)?;
        let local_addr = listener.local_addr().map_err(named)?;
        Ok(Server {
            listener,
            local_addr,
        })
    }

    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Accepts connections until the returned handle is aborted or `calls`
    /// is closed; each connection is its own task, and ends with the server
    /// (a connection ended so sends no `Disconnected`: nobody listens).
    pub fn serve(self, calls: mpsc::Sender<Call>) -> JoinHandle<()> {
        tokio::spawn(accept_loop(self.listener, self.local_addr, calls))
    }
}

async fn accept_loop(listener: TcpListener, local_addr: SocketAddr, calls: mpsc::Sender<Call>) {
    // Dropping the set (abort, or `calls` closed) aborts every connection.
    let mut connections = JoinSet::new();
    let mut next_conn = 1u64;
    loop {
        tokio::select! {
            biased;
            () = calls.closed() => return,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if connections.len() >= CONNECTIONS_MAX => refuse(&stream),
                Ok((stream, _)) => {
                    let conn = next_conn;
                    next_conn += 1;
                    connections.spawn(connection(conn, stream, calls.clone()));
                }
                Err(e) => {
                    let what = format!("prompt service on {local_addr}: accepting a connection");
                    crate::stdout::eline!("drover: {what}: {e}");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
        }
    }
}

/// Tells a connection over [`CONNECTIONS_MAX`] why it is closed. A fresh
/// socket's send buffer is empty, so the one line goes out without waiting;
/// if it does not, the close alone says enough.
fn refuse(stream: &TcpStream) {
    let reason = format!("the prompt service serves at most {CONNECTIONS_MAX} connections at once");
    let _ = stream.try_write(ServerMsg::ProtocolError { reason }.to_line().as_bytes());
}

/// Serves one connection, then tells the pipeline it is gone, once.
async fn connection(conn: u64, stream: TcpStream, calls: mpsc::Sender<Call>) {
    let (read, write) = stream.into_split();
    let mut lines = LineReader::new(read);
    let mut connection = Connection {
        conn,
        calls,
        writer: write,
        flight: None,
    };
    connection.run(&mut lines).await;
    // What the pipeline sends from now on fails to send: it is dropped.
    connection.flight = None;
    let _ = connection.calls.send(Call::Disconnected { conn }).await;
    let _ = connection.writer.shutdown().await;
    let _ = tokio::time::timeout(LINGER, lines.discard(LINGER_BYTES_MAX)).await;
}

/// The request a connection has in flight.
struct Flight {
    request_id: u64,
    events: mpsc::UnboundedReceiver<ServerMsg>,
}

/// The connection ends (the reason was already written, if it has one).
struct Closed;

struct Connection {
    conn: u64,
    calls: mpsc::Sender<Call>,
    writer: OwnedWriteHalf,
    flight: Option<Flight>,
}

impl Connection {
    /// Reads lines and forwards events, at once, until the connection ends.
    /// At the end of the client's stream a request in flight is still
    /// answered in full (`printf '...' | nc` half-closes); a client gone
    /// altogether is noticed when a write to it fails.
    async fn run(&mut self, lines: &mut LineReader<OwnedReadHalf>) {
        let mut reading = true;
        while reading || self.flight.is_some() {
            let step = tokio::select! {
                biased;
                event = next_event(&mut self.flight) => self.forward(event).await,
                line = lines.next_line(), if reading => match line {
                    Ok(Some((line_number, text))) => self.on_line(line_number, &text).await,
                    Ok(None) => {
                        reading = false;
                        Ok(())
                    }
                    Err(LineError::Io(_)) => Err(Closed),
                    Err(e) => self.protocol_error(e.to_string()).await,
                },
            };
            if step.is_err() {
                return;
            }
        }
    }

    /// Writes an event of the request in flight; its terminal ends it.
    async fn forward(&mut self, event: Option<ServerMsg>) -> Result<(), Closed> {
        let Some(flight) = &self.flight else {
            return Ok(());
        };
        let request_id = flight.request_id;
        let event = event.unwrap_or_else(|| ServerMsg::Fault {
            request_id,
            reason: format!("the run dropped request {request_id} without an answer"),
        });
        if event.is_terminal() {
            self.flight = None;
        }
        self.write(&event).await
    }

    async fn on_line(&mut self, line_number: u64, text: &str) -> Result<(), Closed> {
        if text.trim().is_empty() {
            return Ok(());
        }
        let message = match parse_client_line(line_number, text) {
            Ok(message) => message,
            Err(reason) => return self.protocol_error(reason).await,
        };
        match message {
            ClientMsg::SubmitPrompt {
                request_id,
                prompt_text,
                max_tokens,
            } => {
                if let Some(flight) = &self.flight {
                    let reason = format!(
                        "line {line_number}: SubmitPrompt {request_id} while request {} has \
                         not ended: one prompt at a time per connection",
                        flight.request_id
                    );
                    return self.protocol_error(reason).await;
                }
                self.submit(request_id, prompt_text, ClientMsg::cap(max_tokens))
                    .await
            }
            ClientMsg::Shutdown {} => {
                let _ = self.calls.send(Call::Shutdown { conn: self.conn }).await;
                self.write(&ServerMsg::ShuttingDown {}).await
            }
        }
    }

    async fn submit(
        &mut self,
        request_id: u64,
        text: String,
        max_tokens: Option<u32>,
    ) -> Result<(), Closed> {
        let (events, receiver) = mpsc::unbounded_channel();
        let call = Call::Submit {
            conn: self.conn,
            request_id,
            text,
            max_tokens,
            events,
        };
        if self.calls.send(call).await.is_err() {
            let reason = "the prompt service is closed: the run takes no more prompts".to_owned();
            return self.write(&ServerMsg::Fault { request_id, reason }).await;
        }
        self.flight = Some(Flight {
            request_id,
            events: receiver,
        });
        Ok(())
    }

    /// Writes the error and ends the connection.
    async fn protocol_error(&mut self, reason: String) -> Result<(), Closed> {
        let _ = self.write(&ServerMsg::ProtocolError { reason }).await;
        Err(Closed)
    }

    async fn write(&mut self, message: &ServerMsg) -> Result<(), Closed> {
        let line = message.to_line();
        match tokio::time::timeout(WRITE_TIMEOUT, self.writer.write_all(line.as_bytes())).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(Closed),
        }
    }
}

/// The next event of the request in flight; never, when there is none.
async fn next_event(flight: &mut Option<Flight>) -> Option<ServerMsg> {
    match flight {
        Some(flight) => flight.events.recv().await,
        None => std::future::pending().await,
    }
}
