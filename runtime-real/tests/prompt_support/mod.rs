//! The prompt RPC's test rig: a `Server` on a loopback port driven by a
//! small backend (the prompt's words come back as deltas), raw sockets for
//! what a client should not send, and the `drover` binary. Every wait is
//! bounded; nothing sleeps.

use runtime_real::prompt::{Call, Client, DoneReason, Server, ServerMsg};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The bound on every wait.
pub const BOUND: Duration = Duration::from_secs(20);

pub async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(BOUND, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: nothing within {BOUND:?}"),
    }
}

/// A call as the backend saw it (without its events sender).
#[derive(Debug, PartialEq)]
pub enum Seen {
    Submit {
        conn: u64,
        request_id: u64,
        text: String,
        max_tokens: Option<u32>,
    },
    Shutdown {
        conn: u64,
    },
    Disconnected {
        conn: u64,
    },
}

/// A served `Server` and its test backend.
pub struct Service {
    pub addr: SocketAddr,
    pub seen: mpsc::UnboundedReceiver<Seen>,
    /// Lets every held request go on.
    pub release: mpsc::UnboundedSender<()>,
    pub server: tokio::task::JoinHandle<()>,
}

impl Service {
    pub async fn start() -> Service {
        let any_port: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        let server = Server::bind(any_port)
            .await
            .expect("binding a loopback port");
        let addr = server.local_addr();
        let (calls, calls_received) = mpsc::channel(16);
        let (seen_sender, seen) = mpsc::unbounded_channel();
        let (release, released) = mpsc::unbounded_channel();
        tokio::spawn(backend(calls_received, seen_sender, released));
        let server = server.serve(calls);
        Service {
            addr,
            seen,
            release,
            server,
        }
    }

    pub async fn client(&self) -> Client {
        within("connecting", Client::connect(self.addr))
            .await
            .expect("connecting")
    }

    /// The next call the backend saw that `wanted` picks; others are skipped.
    pub async fn wait_for(&mut self, what: &str, wanted: impl Fn(&Seen) -> bool) -> Seen {
        loop {
            let seen = within(what, self.seen.recv())
                .await
                .expect("the backend is gone");
            if wanted(&seen) {
                return seen;
            }
        }
    }

    /// The connection, request id and cap of the next submit of `text`.
    pub async fn submitted(&mut self, text: &str) -> (u64, u64, Option<u32>) {
        let wanted = |s: &Seen| matches!(s, Seen::Submit { text: t, .. } if t == text);
        match self.wait_for(text, wanted).await {
            Seen::Submit {
                conn,
                request_id,
                max_tokens,
                ..
            } => (conn, request_id, max_tokens),
            other => panic!("not a submit: {other:?}"),
        }
    }
}

/// Answers prompts: "hold ..." waits for a release, then answers "held";
/// "stream ..." sends one delta, then after a release streams until the
/// connection is gone; "fault ..." faults; anything else comes back word by
/// word (at most `max_tokens` words).
async fn backend(
    mut calls: mpsc::Receiver<Call>,
    seen: mpsc::UnboundedSender<Seen>,
    mut released: mpsc::UnboundedReceiver<()>,
) {
    let mut held = Vec::new();
    loop {
        tokio::select! {
            call = calls.recv() => match call {
                Some(call) => take(call, &seen, &mut held),
                None => return,
            },
            Some(()) = released.recv() => {
                for held in held.drain(..) {
                    match held {
                        Held::Hold(request_id, events) => words(request_id, "held", None, &events),
                        Held::Stream(request_id, events) => {
                            tokio::spawn(stream_until_gone(request_id, events));
                        }
                    }
                }
            }
        }
    }
}

/// A request the backend holds until released.
enum Held {
    Hold(u64, mpsc::UnboundedSender<ServerMsg>),
    Stream(u64, mpsc::UnboundedSender<ServerMsg>),
}

/// Notes a call and answers it (or holds it).
fn take(call: Call, seen: &mpsc::UnboundedSender<Seen>, held: &mut Vec<Held>) {
    let (conn, request_id, text, max_tokens, events) = match call {
        Call::Submit {
            conn,
            request_id,
            text,
            max_tokens,
            events,
        } => (conn, request_id, text, max_tokens, events),
        Call::Shutdown { conn } => {
            let _ = seen.send(Seen::Shutdown { conn });
            return;
        }
        Call::Disconnected { conn } => {
            let _ = seen.send(Seen::Disconnected { conn });
            return;
        }
    };
    let first = text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let _ = seen.send(Seen::Submit {
        conn,
        request_id,
        text: text.clone(),
        max_tokens,
    });
    match first.as_str() {
        "hold" => held.push(Held::Hold(request_id, events)),
        "stream" => {
            let _ = events.send(ServerMsg::TextDelta {
                request_id,
                text: "tick".into(),
            });
            held.push(Held::Stream(request_id, events));
        }
        "fault" => {
            let reason = "the test backend faults it".to_owned();
            let _ = events.send(ServerMsg::Fault { request_id, reason });
        }
        _ => words(request_id, &text, max_tokens, &events),
    }
}

fn words(
    request_id: u64,
    text: &str,
    max_tokens: Option<u32>,
    events: &mpsc::UnboundedSender<ServerMsg>,
) {
    let cap = max_tokens.map_or(usize::MAX, |n| n as usize);
    let all: Vec<&str> = text.split_whitespace().collect();
    for (i, word) in all.iter().take(cap).enumerate() {
        let text = if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        let _ = events.send(ServerMsg::TextDelta { request_id, text });
    }
    let tokens = all.len().min(cap) as u64;
    let reason = if all.len() > cap {
        DoneReason::MaxTokens
    } else {
        DoneReason::Eos
    };
    let _ = events.send(ServerMsg::Done {
        request_id,
        tokens,
        reason,
    });
}

/// Sends deltas until the connection's end drops the receiver.
async fn stream_until_gone(request_id: u64, events: mpsc::UnboundedSender<ServerMsg>) {
    for _ in 0..1_000_000 {
        if events
            .send(ServerMsg::TextDelta {
                request_id,
                text: " tick".into(),
            })
            .is_err()
        {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Reads a client's messages up to the terminal of `request_id`; returns
/// the text and the terminal.
pub async fn answer(client: &mut Client, request_id: u64) -> (String, ServerMsg) {
    let mut text = String::new();
    loop {
        let message = within("an answer", client.next()).await.expect("reading");
        match message.expect("the connection ended before the terminal") {
            ServerMsg::TextDelta {
                request_id: id,
                text: delta,
            } if id == request_id => text += &delta,
            terminal if terminal.is_terminal() => return (text, terminal),
            other => panic!("unexpected {other:?}"),
        }
    }
}

pub fn done(request_id: u64, tokens: u64, reason: DoneReason) -> ServerMsg {
    ServerMsg::Done {
        request_id,
        tokens,
        reason,
    }
}

/// A socket that writes whatever lines a test wants.
pub struct Raw {
    pub lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    pub writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let stream = within("connecting", TcpStream::connect(addr))
            .await
            .expect("connecting");
        let (read, writer) = stream.into_split();
        Raw {
            lines: BufReader::new(read).lines(),
            writer,
        }
    }

    pub async fn send(&mut self, text: &str) {
        within("writing", self.writer.write_all(text.as_bytes()))
            .await
            .expect("writing");
    }

    /// The next message, `None` at the end of the stream.
    pub async fn recv(&mut self) -> Option<ServerMsg> {
        let line = within("a line", self.lines.next_line())
            .await
            .expect("reading")?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("`{line}`: {e}")))
    }

    /// The protocol error's reason, and that the server closed after it.
    pub async fn protocol_error(&mut self) -> String {
        let Some(ServerMsg::ProtocolError { reason }) = self.recv().await else {
            panic!("expected a ProtocolError");
        };
        assert_eq!(
            self.recv().await,
            None,
            "the server closes after a protocol error"
        );
        reason
    }
}

/// A fresh, empty state dir.
pub fn state_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-prompt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the state dir");
    dir
}

/// Runs `drover --state-dir DIR ARGS` with `stdin`; returns its exit code,
/// stdout and stderr.
pub async fn drover(dir: &std::path::Path, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_drover"));
    command
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .kill_on_drop(true);
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("starting drover");
    let mut input = child.stdin.take().expect("its stdin");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("writing its stdin");
    drop(input);
    let output = within("drover", child.wait_with_output())
        .await
        .expect("running drover");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("UTF-8 output");
    (
        output.status.code().unwrap_or(-1),
        text(output.stdout),
        text(output.stderr),
    )
}
