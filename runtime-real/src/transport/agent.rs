//! The node side of the control plane, run by `drover-agent`: dial the
//! orchestrator, `Join` with the one-time token, heartbeat after `Welcome`,
//! exit on `Shutdown`. A lost connection is redialled with bounded
//! exponential backoff and re-admitted with `Rejoin` (by endpoint id, no
//! token): the orchestrator may have restarted with the same key. Which
//! hello, when to dial again and when to give up are the decisions of
//! `core_fsm::link`; this file dials, serves and waits.
//!
//! Progress goes to stdout, problems to stderr, one line each, through the
//! one sink of `agent_log`: while a control connection is up, those lines
//! and the worker's stderr also go to the orchestrator's datastream on the
//! log stream (`super::logs`). The token is never printed.

use super::agent_log::{say, warn};
use super::wire::{ALPN, Frame, FrameError, JoinToken, PROTOCOL_VERSION, read_frame, write_frame};
use super::{CLOSE_DONE, CLOSE_REJECTED, CLOSE_SHUTDOWN, agent_id_of, build_endpoint};
use crate::retry;
use anyhow::Result;
use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, RunId};
use core_fsm::link;
use iroh::endpoint::{Connection, ConnectionError, Endpoint, RecvStream, SendStream};
use iroh::{EndpointAddr, SecretKey};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::time::Instant;

/// How long one dial (QUIC handshake) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest wait between two dials, by default.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

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
            backoff_max: BACKOFF_MAX,
            cache: default_cache(),
        }
    }
}

/// How the agent ended (exit codes 0 shutdown, 3 rejected, 4 unreachable).
pub use core_fsm::link::Exit as AgentExit;

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
        })
    }

    /// The agent's identity, as the orchestrator will see it.
    pub fn id(&self) -> AgentId {
        agent_id_of(self.endpoint.id())
    }

    /// Runs until shut down, refused, or unreachable for too long: the
    /// link machine decides; this loop dials, serves and waits for it.
    pub async fn run(mut self) -> AgentExit {
        let node = self.config.node.clone();
        say(
            &node,
            &format!("agent {} dialing the orchestrator", self.id()),
        );
        let mut link = link::Machine::new(link::Config {
            node: node.clone(),
            reconnect_for: retry::core(self.config.reconnect_for),
            backoff_base: retry::core(self.config.backoff_base),
            backoff_max: retry::core(self.config.backoff_max),
        });
        let epoch = Instant::now();
        let now = || core_fsm::Instant(epoch.elapsed().as_millis() as u64);
        let mut input = link::Input::Start;
        let exit = 'run: loop {
            let mut dial = None;
            for effect in link.handle(now(), input) {
                match effect {
                    link::Effect::Dial { hello, deadline } => dial = Some((hello, deadline)),
                    link::Effect::Exit(exit) => break 'run exit,
                    line => tell(&node, line),
                }
            }
            input = match dial {
                Some((hello, deadline)) => {
                    let deadline = epoch + Duration::from_millis(deadline.as_millis());
                    self.connect_once(hello, deadline, &mut link, now).await
                }
                None => {
                    let at = link
                        .next_deadline()
                        .expect("a link that neither dials nor exits waits");
                    tokio::time::sleep_until(epoch + Duration::from_millis(at.as_millis())).await;
                    link::Input::Tick
                }
            };
        };
        if let Some(pipeline) = self.pipeline.take() {
            pipeline.shutdown().await;
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.endpoint.close()).await;
        exit
    }

    /// One dial with `hello`: what came of it, for the link. A welcome is
    /// told to the link at once, and the connection served until it ends.
    async fn connect_once(
        &mut self,
        hello: link::Hello,
        deadline: Instant,
        link: &mut link::Machine,
        now: impl Fn() -> core_fsm::Instant,
    ) -> link::Input {
        let failed = |reason: String| link::Input::DialFailed { reason };
        // A dial to a dead port hangs until its timeout (UDP has no refusal),
        // so it never runs past the redial deadline.
        let left = deadline.saturating_duration_since(Instant::now());
        let dial_timeout = DIAL_TIMEOUT.min(left.max(Duration::from_millis(100)));
        let dial = self
            .endpoint
            .connect(self.config.orchestrator.clone(), ALPN);
        let conn = match tokio::time::timeout(dial_timeout, dial).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return failed(err.to_string()),
            Err(_) => return failed("dial timed out".to_owned()),
        };
        let (mut send, mut recv) = match conn.open_bi().await {
            Ok(streams) => streams,
            Err(err) => return failed(err.to_string()),
        };
        if let Err(err) = write_frame(&mut send, &self.hello(hello)).await {
            return failed(err.to_string());
        }
        // Anything but an answer may mean the orchestrator admitted the
        // hello and died before answering: the link remembers that.
        let answer = tokio::time::timeout(WELCOME_TIMEOUT, read_frame(&mut recv)).await;
        match answer {
            Ok(Ok(Some(Frame::Welcome { .. }))) => {}
            Ok(Ok(Some(Frame::Rejected { reason }))) => {
                conn.close(CLOSE_DONE, b"rejected");
                return link::Input::Refused { reason };
            }
            Ok(Ok(Some(_))) => {
                let reason = "unexpected answer to hello".to_owned();
                return link::Input::Unanswered { reason };
            }
            // An orchestrator of another build: dialling again would not help.
            Ok(Err(FrameError::WrongVersion { version })) => {
                conn.close(CLOSE_DONE, b"wire version");
                let reason = format!(
                    "the orchestrator speaks control wire version {version}, this agent {}: \
                     run the drover-agent of the orchestrator's build",
                    super::wire::WIRE_VERSION
                );
                return link::Input::Refused { reason };
            }
            Ok(Ok(None)) | Ok(Err(_)) => return closed_outcome(&conn, false),
            Err(_) => {
                let reason = "no answer to hello".to_owned();
                return link::Input::Unanswered { reason };
            }
        }
        for effect in link.handle(now(), link::Input::Welcomed) {
            tell(&self.config.node, effect);
        }
        self.serve(&conn, &mut send, &mut recv).await
    }

    fn hello(&self, hello: link::Hello) -> Frame {
        match hello {
            link::Hello::Rejoin => Frame::Rejoin {
                version: PROTOCOL_VERSION,
                node: self.config.node.clone(),
            },
            link::Hello::Join => Frame::Join {
                version: PROTOCOL_VERSION,
                token: self.config.token.clone(),
                node: self.config.node.clone(),
                run: self.config.run,
                lease: self.config.lease.clone(),
            },
        }
    }

    /// Heartbeats out and control frames in, until the connection ends.
    async fn serve(
        &mut self,
        conn: &Connection,
        send: &mut SendStream,
        recv: &mut RecvStream,
    ) -> link::Input {
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
                None => link::Input::Lost { reason: err.to_string() },
            },
            () = logs => link::Input::Lost { reason: "the log stream ended".to_owned() },
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
) -> link::Input {
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
                return link::Input::Shutdown;
            }
            Ok(Some(Frame::Rejected { reason })) => {
                conn.close(CLOSE_DONE, b"rejected");
                return link::Input::Refused { reason };
            }
            Ok(Some(other)) => {
                // Frames of later protocol phases are not ours to act on yet.
                warn(node, &format!("ignoring unexpected {other:?}"));
            }
            Ok(None) | Err(FrameError::Io(_)) => return closed_outcome(conn, true),
            Err(err) => {
                conn.close(super::CLOSE_PROTOCOL, err.to_string().as_bytes());
                return link::Input::Lost {
                    reason: err.to_string(),
                };
            }
        }
    }
}

/// Classifies a connection that ended: closed by the orchestrator with a
/// shutdown or reject code is final; anything else is a loss to recover
/// (before the welcome, a hello left unanswered).
fn closed_outcome(conn: &Connection, welcomed: bool) -> link::Input {
    let reason = conn.close_reason();
    if let Some(ConnectionError::ApplicationClosed(close)) = &reason {
        let text = String::from_utf8_lossy(&close.reason).into_owned();
        if close.error_code == CLOSE_SHUTDOWN {
            return link::Input::Shutdown;
        }
        if close.error_code == CLOSE_REJECTED {
            return link::Input::Refused { reason: text };
        }
    }
    let reason = reason.map_or_else(|| "stream ended".to_owned(), |r| r.to_string());
    if welcomed {
        link::Input::Lost { reason }
    } else {
        link::Input::Unanswered { reason }
    }
}

/// Prints one of the link's lines.
fn tell(node: &LogicalNodeId, effect: link::Effect) {
    match effect {
        link::Effect::Say(line) => say(node, &line),
        link::Effect::Warn(line) => warn(node, &line),
        link::Effect::Dial { .. } | link::Effect::Exit(_) => {}
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
