//! The pipeline on a node: `drover-agent` drives `core_fsm::agent` (boot
//! readiness, the stage controller, worker supervision) through the shared
//! effect loop, and this file is its effect side: the worker child, the
//! edges, the weights, the reports to the orchestrator.

use super::edges::{self, Rendezvous};
use super::fetch::{self, Fetched};
use super::wire::{EdgeFrame, StageOrder, Step, WeightsRef};
use super::worker::{self, Job, WorkerHandle};
use crate::transport::wire::Frame;
use crate::transport::{agent_id_of, format_addr, parse_addr};
use crate::up::ports::{ChannelSource, TokioClock};
use core_fsm::agent::{Config, Effect, Input, Machine, Report};
use core_fsm::boot;
use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
use core_fsm::stage::{self, EdgeKind};
use core_fsm::time::Duration;
use driver::{Driver, NoJournal, Ports};
use iroh::EndpointAddr;
use iroh::endpoint::Endpoint;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// How long the worker may take to stop before it is killed.
const WORKER_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// What the node's pipeline side needs.
pub struct NodeConfig {
    /// The node.
    pub node: LogicalNodeId,
    /// The run.
    pub run_id: RunId,
    /// The stage the plan assigned.
    pub stage: u32,
    /// The orchestrator's address (its id is the only one obeyed).
    pub orchestrator: EndpointAddr,
    /// The agent's endpoint.
    pub endpoint: Endpoint,
    /// Where slices are cached.
    pub cache: PathBuf,
}

type FetchResult = Option<Result<Fetched, String>>;

/// State the effect side shares with the frame router.
struct Shared {
    to_orch: mpsc::Sender<Frame>,
    node: LogicalNodeId,
    stage: u32,
    run_id: RunId,
    endpoint: Endpoint,
    orchestrator: EndpointAddr,
    cache: PathBuf,
    orders: Mutex<BTreeMap<u32, StageOrder>>,
    fetches: Mutex<BTreeMap<(u32, u32), watch::Receiver<FetchResult>>>,
    pending: Mutex<BTreeMap<u64, Step>>,
    outbound: Mutex<BTreeMap<u32, mpsc::Sender<EdgeFrame>>>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    worker: Mutex<Option<WorkerHandle>>,
}

impl Shared {
    /// The fetch of `w`, started on first ask (a prefetch or the load).
    fn fetch(self: &Arc<Self>, w: &WeightsRef) -> watch::Receiver<FetchResult> {
        let key = (w.first_layer, w.end_layer);
        let mut fetches = self.fetches.lock().expect("fetches");
        if let Some(rx) = fetches.get(&key) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        fetches.insert(key, rx.clone());
        let (this, w) = (self.clone(), w.clone());
        tokio::spawn(async move {
            let result =
                fetch::slice(&this.endpoint, this.orchestrator.clone(), &w, &this.cache).await;
            match &result {
                Ok(f) if f.bytes_fetched == 0 => say(
                    &this.node,
                    &format!(
                        "weights {}..{}: the cached slice is reused (0 bytes fetched)",
                        w.first_layer, w.end_layer
                    ),
                ),
                Ok(f) => say(
                    &this.node,
                    &format!(
                        "weights {}..{}: fetched {} bytes (header {}, tensors {})",
                        w.first_layer, w.end_layer, f.bytes_fetched, w.header_len, w.slice_bytes
                    ),
                ),
                Err(e) => warn(
                    &this.node,
                    &format!("weights {}..{}: {e}", w.first_layer, w.end_layer),
                ),
            }
            if let Ok(f) = &result {
                let _ = this.to_orch.try_send(Frame::WeightsFetched {
                    first_layer: w.first_layer,
                    end_layer: w.end_layer,
                    bytes: f.bytes_fetched,
                    refetched: f.refetched,
                });
            }
            let _ = tx.send(Some(result));
        });
        rx
    }

    fn order(&self, stage: u32) -> Option<StageOrder> {
        self.orders.lock().expect("orders").get(&stage).cloned()
    }
}

/// The running pipeline side of an agent.
pub struct NodeHandle {
    inbox: mpsc::Sender<Frame>,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl NodeHandle {
    /// Hands a pipeline frame from the orchestrator to the node.
    pub async fn deliver(&self, frame: Frame) {
        let _ = self.inbox.send(frame).await;
    }

    /// Stops the worker (bounded) and the loop.
    pub async fn shutdown(self) {
        let worker = self.shared.worker.lock().expect("worker").take();
        if let Some(mut worker) = worker {
            let (done, stopped) = oneshot::channel();
            if worker.jobs.send(Job::Stop(done)).await.is_ok() {
                let _ = tokio::time::timeout(WORKER_STOP, stopped).await;
            }
            worker.kill();
        }
        self.task.abort();
    }
}

/// Starts the node's pipeline side; frames for the orchestrator go to
/// `to_orch`.
pub fn start(config: NodeConfig, to_orch: mpsc::Sender<Frame>) -> NodeHandle {
    let orchestrator_id = agent_id_of(config.orchestrator.id);
    let agent = agent_id_of(config.endpoint.id());
    let shared = Arc::new(Shared {
        to_orch: to_orch.clone(),
        node: config.node.clone(),
        stage: config.stage,
        run_id: config.run_id,
        endpoint: config.endpoint.clone(),
        orchestrator: config.orchestrator.clone(),
        cache: config.cache.clone(),
        orders: Mutex::new(BTreeMap::new()),
        fetches: Mutex::new(BTreeMap::new()),
        pending: Mutex::new(BTreeMap::new()),
        outbound: Mutex::new(BTreeMap::new()),
        readers: Mutex::new(Vec::new()),
        worker: Mutex::new(None),
    });
    let (tx, rx) = mpsc::channel(1024);
    let (inbox, inbox_rx) = mpsc::channel(64);
    let rendezvous = Rendezvous::default();
    let (edge_tx, edge_rx) = mpsc::channel(16);
    tokio::spawn(edges::accept_loop(config.endpoint.clone(), edge_tx));
    tokio::spawn(edges::accept(config.run_id, edge_rx, rendezvous.clone()));
    tokio::spawn(route(
        inbox_rx,
        shared.clone(),
        tx.clone(),
        orchestrator_id.clone(),
    ));
    let clock = TokioClock::start();
    let machine = Machine::new(
        Config {
            boot: boot::Config {
                node: config.node.clone(),
                worker_start: boot::WorkerStartPolicy::Required,
                boot_timeout: Duration::from_secs(60),
            },
            run_id: config.run_id,
            agent: agent.clone(),
            orchestrator: orchestrator_id,
            stage: config.stage,
            stages_max: 1,
            ready_resend_interval: Duration::from_secs(1),
            ready_reports_max: 60,
            heartbeat_interval: Duration::from_secs(1),
            stop_step_timeout: Duration::from_secs(10),
            stage_ring: super::PREFILL_IN_FLIGHT,
        },
        driver::Clock::now(&clock),
    );
    let sink = NodeSink {
        shared: shared.clone(),
        tx,
        to_orch,
        rendezvous,
    };
    let ports = Ports {
        clock,
        source: ChannelSource { rx, clock },
        disk: NoJournal,
        sink,
    };
    let node = config.node.clone();
    let cache = config.cache.clone();
    let task = tokio::spawn(async move {
        let mut driver = Driver::new(machine, ports);
        let arena = std::fs::create_dir_all(&cache);
        let facts = [
            Input::Start,
            Input::Boot(boot::Input::TransportReady),
            Input::Boot(boot::Input::IdentityAssigned { node: node.clone() }),
            match arena {
                Ok(()) => Input::Boot(boot::Input::ArenaCreated),
                Err(e) => Input::Boot(boot::Input::ArenaFailed {
                    reason: format!("{}: {e}", cache.display()),
                }),
            },
            Input::Boot(boot::Input::Membership(boot::Membership::Joined)),
            Input::Boot(boot::Input::CanAcceptProvisioning),
        ];
        for fact in facts {
            if driver.step(fact).await.is_err() {
                return;
            }
        }
        let _ = driver.run_until(|_| false).await;
    });
    NodeHandle {
        inbox,
        shared,
        task,
    }
}

/// Frames from the orchestrator become the agent's inputs.
async fn route(
    mut frames: mpsc::Receiver<Frame>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Input>,
    from: AgentId,
) {
    while let Some(frame) = frames.recv().await {
        let input = match frame {
            Frame::ReadyAck {
                run_id,
                readiness_id,
            } => Input::ReadyAck {
                from: from.clone(),
                run_id,
                readiness_id,
            },
            Frame::Prefetch(weights) => {
                shared.fetch(&weights);
                continue;
            }
            Frame::Provision(order) => {
                let provision = order.provision.clone();
                shared.fetch(&order.weights);
                shared
                    .orders
                    .lock()
                    .expect("orders")
                    .insert(provision.stage, *order);
                Input::Provision {
                    from: from.clone(),
                    provision,
                }
            }
            Frame::StopStage { run_id, stage } => Input::StopStage {
                from: from.clone(),
                run_id,
                stage,
            },
            other => {
                warn(&shared.node, &format!("ignoring unexpected {other:?}"));
                continue;
            }
        };
        if tx.send(input).await.is_err() {
            return;
        }
    }
}

/// The agent's effects, carried out.
struct NodeSink {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Input>,
    to_orch: mpsc::Sender<Frame>,
    rendezvous: Rendezvous,
}

impl driver::EffectSink<Effect> for NodeSink {
    async fn dispatch(&mut self, _now: core_fsm::Instant, effect: Effect) {
        match effect {
            Effect::SpawnWorker { op } => {
                let stage = self.shared.stage;
                let label = self.shared.node.to_string();
                let result = worker::spawn(op, stage, &label, self.tx.clone());
                let result = result.map(|handle| {
                    *self.shared.worker.lock().expect("worker") = Some(handle);
                });
                let _ = self.tx.send(Input::WorkerSpawned { op, result }).await;
            }
            Effect::Boot(effect) => say(&self.shared.node, &format!("boot: {effect:?}")),
            Effect::Report(report) => self.report(report),
            // The control connection heartbeats on its own interval.
            Effect::Heartbeat { .. } => {}
            Effect::Stage { stage, effect } => self.stage(stage, effect),
        }
    }
}

impl NodeSink {
    fn report(&self, report: Report) {
        let frame = match report {
            Report::RuntimeReady {
                run_id,
                stage,
                readiness_id,
                ..
            } => {
                let mut addr = EndpointAddr::new(self.shared.endpoint.id());
                for socket in self.shared.endpoint.bound_sockets() {
                    addr = addr.with_ip_addr(dialable(socket, &self.shared.orchestrator));
                }
                Frame::RuntimeReady {
                    run_id,
                    stage,
                    readiness_id,
                    addr: format_addr(&addr),
                }
            }
            Report::ReadyAcked {
                run_id,
                stage,
                readiness_id,
                ..
            } => Frame::ReadyAcked {
                run_id,
                stage,
                readiness_id,
            },
            Report::Stage(report) => Frame::StageReport(report),
        };
        // A report lost with a connection is resent (readiness) or
        // superseded by the run's timeouts.
        if self.to_orch.try_send(frame).is_err() {
            warn(
                &self.shared.node,
                "the orchestrator's queue is full; a report was dropped",
            );
        }
    }

    fn answer(&self, stage: u32, input: stage::Input) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(Input::Stage { stage, input }).await;
        });
    }

    fn stage(&self, stage: u32, effect: stage::Effect) {
        let shared = self.shared.clone();
        let tx = self.tx.clone();
        match effect {
            stage::Effect::EstablishInbound(edge) => {
                let rendezvous = self.rendezvous.clone();
                let reader = tokio::spawn(async move {
                    let fault = |reason: String| Input::Stage {
                        stage,
                        input: stage::Input::EdgeFault { reason },
                    };
                    let Some(mut inbound) = rendezvous.claim(edge.id).await else {
                        return;
                    };
                    let expected = shared.order(stage).map(|o| o.upstream);
                    if expected.as_ref() != Some(&inbound.from) {
                        let why = format!(
                            "edge {} came from {}, not the upstream stage",
                            edge.id, inbound.from
                        );
                        inbound.conn.close(3u32.into(), b"unexpected sender");
                        let _ = tx.send(fault(why)).await;
                        return;
                    }
                    let ready = Input::Stage {
                        stage,
                        input: stage::Input::InboundReady,
                    };
                    if tx.send(ready).await.is_err() {
                        return;
                    }
                    let why = loop {
                        match edges::next(&mut inbound.recv).await {
                            Ok(Some(EdgeFrame::Step(step))) => {
                                let seq = step.step;
                                shared.pending.lock().expect("pending").insert(seq, step);
                                let arrived = Input::Stage {
                                    stage,
                                    input: stage::Input::StepArrived { seq },
                                };
                                if tx.send(arrived).await.is_err() {
                                    return;
                                }
                            }
                            Ok(Some(other)) => {
                                break format!("edge {}: unexpected {other:?}", edge.id);
                            }
                            Ok(None) => break format!("edge {} closed", edge.id),
                            Err(e) => break format!("edge {}: {e}", edge.id),
                        }
                    };
                    let _ = tx.send(fault(why)).await;
                });
                self.shared.readers.lock().expect("readers").push(reader);
            }
            stage::Effect::EstablishOutbound(edge) => {
                tokio::spawn(async move {
                    let input = match outbound(&shared, stage, edge, tx.clone()).await {
                        Ok(()) => stage::Input::OutboundReady,
                        Err(reason) => stage::Input::EdgeFault { reason },
                    };
                    let _ = tx.send(Input::Stage { stage, input }).await;
                });
            }
            stage::Effect::ConfigureWorker { .. } => self.answer(stage, stage::Input::WorkerReady),
            stage::Effect::LoadWeights { .. } => {
                tokio::spawn(async move {
                    if let Err(reason) = load(&shared, stage).await {
                        let input = stage::Input::LoadFailed { reason };
                        let _ = tx.send(Input::Stage { stage, input }).await;
                    }
                });
            }
            stage::Effect::ExecuteStep { seq } => {
                let step = self.shared.pending.lock().expect("pending").remove(&seq);
                let out = self
                    .shared
                    .outbound
                    .lock()
                    .expect("outbound")
                    .get(&stage)
                    .cloned();
                let last = self
                    .shared
                    .order(stage)
                    .is_some_and(|o| o.provision.stage + 1 == o.provision.stage_count);
                let jobs = self
                    .shared
                    .worker
                    .lock()
                    .expect("worker")
                    .as_ref()
                    .map(|w| w.jobs.clone());
                match (step, out, jobs) {
                    (Some(step), Some(out), Some(jobs)) => {
                        tokio::spawn(async move {
                            if jobs.send(Job::Step { step, last, out }).await.is_err() {
                                let reason = "the worker is gone".to_owned();
                                let _ = tx
                                    .send(Input::Stage {
                                        stage,
                                        input: stage::Input::StepFailed { seq, reason },
                                    })
                                    .await;
                            }
                        });
                    }
                    _ => {
                        let reason = format!("step {seq}: no input, outbound edge or worker");
                        self.answer(stage, stage::Input::StepFailed { seq, reason });
                    }
                }
            }
            stage::Effect::StopLocalEdges => {
                self.shared
                    .outbound
                    .lock()
                    .expect("outbound")
                    .remove(&stage);
                for reader in self.shared.readers.lock().expect("readers").drain(..) {
                    reader.abort();
                }
                self.answer(stage, stage::Input::LocalEdgesStopped);
            }
            stage::Effect::Report(report) => self.report(Report::Stage(report)),
            stage::Effect::QuiesceRings => self.answer(stage, stage::Input::RingsQuiesced),
            stage::Effect::ReleaseDeviceObjects => {
                self.answer(stage, stage::Input::DeviceObjectsReleased);
            }
            stage::Effect::ResetWorkerRole => {
                let worker = self.shared.worker.lock().expect("worker").take();
                tokio::spawn(async move {
                    if let Some(mut worker) = worker {
                        let (done, stopped) = oneshot::channel();
                        if worker.jobs.send(Job::Stop(done)).await.is_ok() {
                            let _ = tokio::time::timeout(WORKER_STOP, stopped).await;
                        }
                        worker.kill();
                    }
                    let input = stage::Input::WorkerRoleReset;
                    let _ = tx.send(Input::Stage { stage, input }).await;
                });
            }
        }
    }
}

/// Dials the stage's outbound edge and keeps its queue.
async fn outbound(
    shared: &Arc<Shared>,
    stage: u32,
    edge: stage::Edge,
    tx: mpsc::Sender<Input>,
) -> Result<(), String> {
    let order = shared.order(stage).ok_or("no provision for the stage")?;
    let to = parse_addr(&order.downstream).map_err(|e| format!("{e:#}"))?;
    let failed = move |reason: String| {
        let input = Input::Stage {
            stage,
            input: stage::Input::EdgeFault { reason },
        };
        tokio::spawn(async move {
            let _ = tx.send(input).await;
        });
    };
    let (queue, _conn) = edges::dial(&shared.endpoint, to, shared.run_id, edge.id, failed).await?;
    if edge.kind == EdgeKind::TokenOut {
        say(&shared.node, "token-out edge to the orchestrator open");
    }
    shared
        .outbound
        .lock()
        .expect("outbound")
        .insert(stage, queue);
    Ok(())
}

/// Waits for the stage's slice and loads it into the worker.
async fn load(shared: &Arc<Shared>, stage: u32) -> Result<(), String> {
    let order = shared.order(stage).ok_or("no provision for the stage")?;
    let mut fetch = shared.fetch(&order.weights);
    let fetched = loop {
        if let Some(result) = fetch.borrow_and_update().clone() {
            break result?;
        }
        fetch
            .changed()
            .await
            .map_err(|_| "the fetch was abandoned".to_owned())?;
    };
    let jobs = shared
        .worker
        .lock()
        .expect("worker")
        .as_ref()
        .map(|w| w.jobs.clone());
    let jobs = jobs.ok_or("the worker is gone")?;
    let job = Job::Load {
        model: fetched.path,
        layers: (order.weights.first_layer, order.weights.end_layer),
        ctx: order.ctx,
        sampling: order.sampling,
    };
    jobs.send(job)
        .await
        .map_err(|_| "the worker is gone".to_owned())
}

/// A socket bound to the unspecified address is advertised with the local
/// address this machine reaches the orchestrator from (a container's
/// bridge address), which its peers on that network can dial.
fn dialable(socket: std::net::SocketAddr, orchestrator: &EndpointAddr) -> std::net::SocketAddr {
    if !socket.ip().is_unspecified() {
        return socket;
    }
    let route = orchestrator
        .ip_addrs()
        .find(|a| a.is_ipv4() == socket.is_ipv4())
        .and_then(|to| {
            let probe =
                std::net::UdpSocket::bind(std::net::SocketAddr::new(socket.ip(), 0)).ok()?;
            probe.connect(to).ok()?;
            probe.local_addr().ok()
        });
    match route {
        Some(local) => std::net::SocketAddr::new(local.ip(), socket.port()),
        None => socket,
    }
}

fn say(node: &LogicalNodeId, line: &str) {
    crate::transport::agent_log::say(node, line);
}

fn warn(node: &LogicalNodeId, line: &str) {
    crate::transport::agent_log::warn(node, line);
}
