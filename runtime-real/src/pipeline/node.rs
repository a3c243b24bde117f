//! The pipeline on a node: `drover-agent` drives `core_fsm::agent` (boot
//! readiness, the stage controller, worker supervision) through the shared
//! effect loop, and this file is its effect side: the worker child, the
//! edges, the weights, the reports to the orchestrator.

mod backlog;
mod sink;

use super::edges::{self, Rendezvous};
use super::fetch::{self, Fetched};
use super::wire::{EdgeFrame, StageOrder, WeightsRef};
use super::worker::{Job, Lives, WorkerHandle};
use crate::transport::agent_id_of;
use crate::transport::wire::Frame;
use crate::up::ports::{ChannelSource, TokioClock};
use core_fsm::agent::{Config, Input, Machine};
use core_fsm::boot;
use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
use core_fsm::time::Duration;
use driver::{Driver, NoJournal, Ports};
use iroh::EndpointAddr;
use iroh::endpoint::Endpoint;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Steps a stage holds waiting behind the one it executes: its machine's
/// ring, and as far as its inbound edge is read ahead (`backlog.rs`), one
/// number, so a well-behaved upstream never overruns the ring.
const READ_AHEAD: u64 = super::PREFILL_IN_FLIGHT;
const _: () = assert!(READ_AHEAD > 0);

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
    pending: backlog::Backlog,
    outbound: Mutex<BTreeMap<u32, mpsc::Sender<EdgeFrame>>>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    worker: Mutex<Option<WorkerHandle>>,
    lives: Lives,
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
            // On the agent's log, and on `up`'s terminal.
            let progress = |bytes: u64, total: u64| {
                let (first_layer, end_layer) = (w.first_layer, w.end_layer);
                let line = format!(
                    "weights {first_layer}..{end_layer}: {} of {} MiB fetched",
                    bytes >> 20,
                    total >> 20
                );
                say(&this.node, &line);
                let _ = this.to_orch.try_send(Frame::WeightsFetching {
                    first_layer,
                    end_layer,
                    bytes,
                    total,
                });
            };
            let (orchestrator, cache) = (this.orchestrator.clone(), &this.cache);
            let result = fetch::slice(&this.endpoint, orchestrator, &w, cache, progress).await;
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
    /// The edge acceptors and the frame router.
    helpers: Vec<JoinHandle<()>>,
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
        for helper in self.helpers {
            helper.abort();
        }
        for reader in self.shared.readers.lock().expect("readers").drain(..) {
            reader.abort();
        }
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
        pending: backlog::Backlog::new(READ_AHEAD as usize),
        outbound: Mutex::new(BTreeMap::new()),
        readers: Mutex::new(Vec::new()),
        worker: Mutex::new(None),
        lives: Lives::default(),
    });
    let (tx, rx) = mpsc::channel(1024);
    let (inbox, inbox_rx) = mpsc::channel(64);
    let rendezvous = Rendezvous::default();
    let (edge_tx, edge_rx) = mpsc::channel(16);
    let helpers = vec![
        tokio::spawn(edges::accept_loop(config.endpoint.clone(), edge_tx)),
        tokio::spawn(edges::accept(config.run_id, edge_rx, rendezvous.clone())),
        tokio::spawn(route(
            inbox_rx,
            shared.clone(),
            tx.clone(),
            orchestrator_id.clone(),
        )),
    ];
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
            stage_ring: READ_AHEAD,
        },
        driver::Clock::now(&clock),
    );
    let sink = sink::NodeSink {
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
        helpers,
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
                // Each provision is a new life of its stage's controller
                // (a repair provisions a stopped stage again).
                shared.lives.begin(provision.stage);
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

fn say(node: &LogicalNodeId, line: &str) {
    crate::transport::agent_log::say(node, line);
}

fn warn(node: &LogicalNodeId, line: &str) {
    crate::transport::agent_log::warn(node, line);
}
