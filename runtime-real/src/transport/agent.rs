//! The node side of the control plane, run by `drover-agent`: dial the
//! orchestrator, `Join` with the one-time token, heartbeat after `Welcome`,
//! exit on `Shutdown`. A lost connection is redialled with bounded
//! exponential backoff and re-admitted with `Rejoin` (by endpoint id, no
//! token): the orchestrator may have restarted with the same key.
//!
//! Progress goes to stdout, problems to stderr, one line each, through the
//! one sink of `agent_log`: while a control connection is up, those lines
//! and the worker's stderr also go to the orchestrator's datastream on the
//! log stream (`super::logs`). The token is never printed.

use super::agent_log::{say, warn};
use super::wire::{ALPN, Frame, FrameError, JoinToken, PROTOCOL_VERSION, read_frame, write_frame};
use super::{CLOSE_DONE, CLOSE_REJECTED, CLOSE_SHUTDOWN, agent_id_of, build_endpoint};
use anyhow::Result;
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, RunId};
use iroh::endpoint::{Connection, ConnectionError, Endpoint, RecvStream, SendStream};
use iroh::{EndpointAddr, SecretKey};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::time::Instant;

/// How long one dial (QUIC handshake) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the orchestrator may take to answer the hello.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(10);

/// How long closing the endpoint at exit may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a shutdown waits for the log stream to take the last lines.
const LOG_DRAIN: Duration = Duration::from_millis(500);

/// How the agent joins.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The orchestrator's endpoint id and direct addresses.
    pub orchestrator: EndpointAddr,
    /// The logical node this agent runs as.
    pub node: LogicalNodeId,
    /// The one-time join token (redacted in `Debug`).
    pub token: JoinToken,
    /// The run, when known (checked against the token's binding).
    pub run: Option<RunId>,
    /// The lease, when known (checked against the token's binding).
    pub lease: Option<LeaseId>,
    /// Interval between heartbeats.
    pub heartbeat: Duration,
    /// Local socket to bind; `None` picks loopback when the orchestrator is
    /// on loopback, else the unspecified address.
    pub bind: Option<SocketAddr>,
    /// How long to keep redialling, from the start or from a lost
    /// connection, before giving up.
    pub reconnect_for: Duration,
    /// First backoff between dials; doubles per failed dial.
    pub backoff_base: Duration,
    /// Backoff ceiling.
    pub backoff_max: Duration,
    /// Where the pipeline's weight slices are cached.
    pub cache: std::path::PathBuf,
}

impl AgentConfig {
    /// A config with the default timings: heartbeat 1 s, redial for 5 min,
    /// backoff 100 ms doubling to 5 s.
    pub fn new(orchestrator: EndpointAddr, node: LogicalNodeId, token: JoinToken) -> AgentConfig {
        AgentConfig {
            orchestrator,
            node,
            token,
            run: None,
            lease: None,
            heartbeat: Duration::from_secs(1),
            bind: None,
            reconnect_for: Duration::from_secs(300),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            cache: default_cache(),
        }
    }
}

/// How the agent ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentExit {
    /// The orchestrator sent `Shutdown`.
    Shutdown,
    /// The orchestrator refused the join or rejoin.
    Rejected {
        /// Its reason.
        reason: String,
    },
    /// The orchestrator stayed unreachable for `reconnect_for`.
    Unreachable,
}

impl AgentExit {
    /// The process exit code: 0 shutdown, 3 rejected, 4 unreachable.
    pub fn code(&self) -> i32 {
        match self {
            AgentExit::Shutdown => 0,
            AgentExit::Rejected { .. } => 3,
            AgentExit::Unreachable => 4,
        }
    }
}

/// One connection's outcome.
enum Attempt {
    /// Could not reach or was not welcomed; dial again after a backoff.
    Failed(String),
    /// Welcomed, then the connection was lost; rejoin.
    Lost(String),
    /// Final.
    Exit(AgentExit),
}

/// Where slices are cached by default: `$DROVER_CACHE_DIR`, else
/// `~/.cache/drover/slices`, else `./drover-cache`.
pub fn default_cache() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("DROVER_CACHE_DIR") {
        return dir.into();
    }
    match std::env::var_os("HOME") {
        Some(home) => std::path::Path::new(&home).join(".cache/drover/slices"),
        None => "drover-cache".into(),
    }
}

/// A node agent with its own endpoint (a fresh identity per process).
pub struct Agent {
    /// The pipeline side, once the orchestrator assigned a stage.
    pipeline: Option<crate::pipeline::node::NodeHandle>,
    /// Frames the pipeline side sends to the orchestrator.
    to_orch: tokio::sync::mpsc::Sender<Frame>,
    from_pipeline: tokio::sync::mpsc::Receiver<Frame>,
    config: AgentConfig,
    endpoint: Endpoint,
    /// Last heartbeat sequence number sent; continues across reconnects.
    seq: u64,
    /// Welcomed at least once: later connections send `Rejoin`.
    welcomed: bool,
    /// A `Join` was sent and never answered.
    join_unanswered: bool,
    /// Send `Rejoin` next although never welcomed (see `refused`).
    rejoin_next: bool,
}

impl Agent {
    /// Binds the agent's endpoint with a fresh key from OS randomness.
    pub async fn bind(config: AgentConfig) -> Result<Agent> {
        let mut bytes = [0u8; 32];
        rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut bytes)?;
        let bind = config
            .bind
            .unwrap_or_else(|| default_bind(&config.orchestrator));
        let alpns = vec![crate::pipeline::wire::EDGE_ALPN.to_vec()];
        let endpoint = build_endpoint(SecretKey::from_bytes(&bytes), bind, alpns).await?;
        let (to_orch, from_pipeline) = tokio::sync::mpsc::channel(64);
        Ok(Agent {
            pipeline: None,
            to_orch,
            from_pipeline,
            config,
            endpoint,
            seq: 0,
            welcomed: false,
            join_unanswered: false,
            rejoin_next: false,
        })
    }

    /// The agent's identity, as the orchestrator will see it.
    pub fn id(&self) -> AgentId {
        agent_id_of(self.endpoint.id())
    }

    /// Runs until shut down, refused, or unreachable for too long.
    pub async fn run(mut self) -> AgentExit {
        let node = self.config.node.clone();
        say(
            &node,
            &format!("agent {} dialing the orchestrator", self.id()),
        );
        let mut deadline = Instant::now() + self.config.reconnect_for;
        let mut backoff = self.config.backoff_base;
        let exit = loop {
            match self.connect_once(deadline).await {
                Attempt::Exit(exit) => break exit,
                Attempt::Lost(why) => {
                    warn(&node, &format!("connection lost ({why}); rejoining"));
                    deadline = Instant::now() + self.config.reconnect_for;
                    backoff = self.config.backoff_base;
                }
                Attempt::Failed(why) => {
                    if Instant::now() >= deadline {
                        warn(&node, &format!("giving up: {why}"));
                        break AgentExit::Unreachable;
                    }
                    warn(
                        &node,
                        &format!("dial failed ({why}); retrying in {backoff:?}"),
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.backoff_max);
                }
            }
        };
        if let Some(pipeline) = self.pipeline.take() {
            pipeline.shutdown().await;
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.endpoint.close()).await;
        exit
    }

    async fn connect_once(&mut self, deadline: Instant) -> Attempt {
        // A dial to a dead port hangs until its timeout (UDP has no refusal),
        // so it never runs past the redial deadline.
        let left = deadline.saturating_duration_since(Instant::now());
        let dial_timeout = DIAL_TIMEOUT.min(left.max(Duration::from_millis(100)));
        let dial = self
            .endpoint
            .connect(self.config.orchestrator.clone(), ALPN);
        let conn = match tokio::time::timeout(dial_timeout, dial).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Attempt::Failed(err.to_string()),
            Err(_) => return Attempt::Failed("dial timed out".to_owned()),
        };
        let (mut send, mut recv) = match conn.open_bi().await {
            Ok(streams) => streams,
            Err(err) => return Attempt::Failed(err.to_string()),
        };
        let hello = self.hello();
        let sent_join = matches!(hello, Frame::Join { .. });
        if let Err(err) = write_frame(&mut send, &hello).await {
            return Attempt::Failed(err.to_string());
        }
        let answer = tokio::time::timeout(WELCOME_TIMEOUT, read_frame(&mut recv)).await;
        let unanswered = match answer {
            Ok(Ok(Some(Frame::Welcome { .. }))) => None,
            Ok(Ok(Some(Frame::Rejected { reason }))) => {
                conn.close(CLOSE_DONE, b"rejected");
                return self.refused(sent_join, reason);
            }
            Ok(Ok(Some(_))) => Some(Attempt::Failed("unexpected answer to hello".to_owned())),
            Ok(Ok(None)) | Ok(Err(_)) => Some(closed_outcome(&conn, false)),
            Err(_) => Some(Attempt::Failed("no answer to hello".to_owned())),
        };
        match unanswered {
            None => {}
            Some(Attempt::Exit(AgentExit::Rejected { reason })) => {
                return self.refused(sent_join, reason);
            }
            Some(other) => {
                // The orchestrator may have admitted us and died before
                // answering; remember it in case the token is refused next.
                self.join_unanswered |= sent_join;
                return other;
            }
        }
        let verb = if self.welcomed { "rejoined" } else { "joined" };
        say(
            &self.config.node,
            &format!("{verb} the orchestrator as node {}", self.config.node),
        );
        self.welcomed = true;
        self.serve(&conn, &mut send, &mut recv).await
    }

    /// A refused hello. A `Join` refused after an earlier `Join` went
    /// unanswered may have been redeemed by an orchestrator that then
    /// restarted: try `Rejoin` once before giving up.
    fn refused(&mut self, sent_join: bool, reason: String) -> Attempt {
        if sent_join && self.join_unanswered && !self.rejoin_next {
            self.rejoin_next = true;
            return Attempt::Failed(format!("join refused ({reason}) after an unanswered join"));
        }
        warn(&self.config.node, &format!("rejected: {reason}"));
        Attempt::Exit(AgentExit::Rejected { reason })
    }

    fn hello(&self) -> Frame {
        if self.welcomed || self.rejoin_next {
            Frame::Rejoin {
                version: PROTOCOL_VERSION,
                node: self.config.node.clone(),
            }
        } else {
            Frame::Join {
                version: PROTOCOL_VERSION,
                token: self.config.token.clone(),
                node: self.config.node.clone(),
                run: self.config.run,
                lease: self.config.lease.clone(),
            }
        }
    }

    /// Heartbeats out and control frames in, until the connection ends.
    async fn serve(
        &mut self,
        conn: &Connection,
        send: &mut SendStream,
        recv: &mut RecvStream,
    ) -> Attempt {
        let interval = self.config.heartbeat;
        let seq = &mut self.seq;
        let outgoing = &mut self.from_pipeline;
        let heartbeats = async move {
            let mut ticker = tokio::time::interval(interval);
            loop {
                let frame = tokio::select! {
                    _ = ticker.tick() => {
                        *seq += 1;
                        Frame::Heartbeat { seq: *seq }
                    }
                    Some(frame) = outgoing.recv() => frame,
                };
                if let Err(err) = write_frame(send, &frame).await {
                    return err;
                }
            }
        };
        let node = &self.config.node;
        let pipeline = PipelineSide {
            handle: &mut self.pipeline,
            to_orch: &self.to_orch,
            endpoint: &self.endpoint,
            orchestrator: &self.config.orchestrator,
            cache: &self.config.cache,
        };
        // The log stream lives as long as this control connection.
        let logs = super::agent_log::forward(&self.endpoint, &self.config.orchestrator, node);
        tokio::select! {
            biased;
            outcome = read_control(conn, recv, node, pipeline) => outcome,
            err = heartbeats => match conn.close_reason() {
                Some(_) => closed_outcome(conn, true),
                None => Attempt::Lost(err.to_string()),
            },
            () = logs => Attempt::Lost("the log stream ended".to_owned()),
        }
    }
}

/// What `read_control` needs to start and feed the pipeline side.
struct PipelineSide<'a> {
    handle: &'a mut Option<crate::pipeline::node::NodeHandle>,
    to_orch: &'a tokio::sync::mpsc::Sender<Frame>,
    endpoint: &'a Endpoint,
    orchestrator: &'a EndpointAddr,
    cache: &'a std::path::Path,
}

/// Reads control frames after the welcome.
async fn read_control(
    conn: &Connection,
    recv: &mut RecvStream,
    node: &LogicalNodeId,
    pipeline: PipelineSide<'_>,
) -> Attempt {
    // The first Pipeline frame on a connection starts the pipeline side
    // afresh: a side left running by an earlier connection belonged to an
    // orchestrator that restarted (its run begins again). Later ones on the
    // same connection are duplicates.
    let mut told = false;
    loop {
        match read_frame(recv).await {
            Ok(Some(Frame::Pipeline { run_id, stage })) => {
                if std::mem::replace(&mut told, true) {
                    warn(node, "a second Pipeline frame is ignored");
                    continue;
                }
                if let Some(old) = pipeline.handle.take() {
                    say(
                        node,
                        "the orchestrator begins its run again: restarting the stage",
                    );
                    old.shutdown().await;
                }
                say(node, &format!("running stage {stage} of {run_id}"));
                let config = crate::pipeline::node::NodeConfig {
                    node: node.clone(),
                    run_id,
                    stage,
                    orchestrator: pipeline.orchestrator.clone(),
                    endpoint: pipeline.endpoint.clone(),
                    cache: pipeline.cache.to_owned(),
                };
                let handle = crate::pipeline::node::start(config, pipeline.to_orch.clone());
                *pipeline.handle = Some(handle);
            }
            Ok(Some(
                frame @ (Frame::ReadyAck { .. }
                | Frame::Provision(_)
                | Frame::Prefetch(_)
                | Frame::StopStage { .. }),
            )) => match pipeline.handle.as_ref() {
                Some(handle) => handle.deliver(frame).await,
                None => warn(
                    node,
                    "a pipeline frame before the Pipeline frame is ignored",
                ),
            },
            Ok(Some(Frame::Crash)) => {
                // A drill: the orchestrator wants this node to look crashed.
                // No goodbye, no cleanup: the process ends as if killed.
                warn(
                    node,
                    "killed by the orchestrator (a drill); exiting at once",
                );
                std::process::exit(137);
            }
            Ok(Some(Frame::Shutdown)) => {
                say(node, "shutdown received; exiting");
                super::agent_log::drain(LOG_DRAIN).await;
                conn.close(CLOSE_DONE, b"shutdown");
                return Attempt::Exit(AgentExit::Shutdown);
            }
            Ok(Some(Frame::Rejected { reason })) => {
                warn(node, &format!("rejected: {reason}"));
                conn.close(CLOSE_DONE, b"rejected");
                return Attempt::Exit(AgentExit::Rejected { reason });
            }
            Ok(Some(other)) => {
                // Frames of later protocol phases are not ours to act on yet.
                warn(node, &format!("ignoring unexpected {other:?}"));
            }
            Ok(None) | Err(FrameError::Io(_)) => return closed_outcome(conn, true),
            Err(err) => {
                conn.close(super::CLOSE_PROTOCOL, err.to_string().as_bytes());
                return Attempt::Lost(err.to_string());
            }
        }
    }
}

/// Classifies a connection that ended: closed by the orchestrator with a
/// shutdown or reject code is final; anything else is a loss to recover.
fn closed_outcome(conn: &Connection, welcomed: bool) -> Attempt {
    let reason = conn.close_reason();
    if let Some(ConnectionError::ApplicationClosed(close)) = &reason {
        let text = String::from_utf8_lossy(&close.reason).into_owned();
        if close.error_code == CLOSE_SHUTDOWN {
            return Attempt::Exit(AgentExit::Shutdown);
        }
        if close.error_code == CLOSE_REJECTED {
            return Attempt::Exit(AgentExit::Rejected { reason: text });
        }
    }
    let why = reason.map_or_else(|| "stream ended".to_owned(), |r| r.to_string());
    if welcomed {
        Attempt::Lost(why)
    } else {
        Attempt::Failed(why)
    }
}

fn default_bind(orchestrator: &EndpointAddr) -> SocketAddr {
    let ips: Vec<IpAddr> = orchestrator.ip_addrs().map(SocketAddr::ip).collect();
    let ip = if !ips.is_empty() && ips.iter().all(IpAddr::is_loopback) {
        if ips.iter().any(IpAddr::is_ipv4) {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        }
    } else if ips.iter().any(IpAddr::is_ipv4) {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    SocketAddr::new(ip, 0)
}
