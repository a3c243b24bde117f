//! The glue between `up` and the two parts built alongside it: the
//! orchestrator composite (`core_fsm::orchestrator`) and the iroh control
//! plane (`crate::transport`).

use super::ports::Leases;
use super::sink::Joins;
use super::{Orchestrated, Runtime, drive, prepare_state};
use crate::provider::BoxFuture;
use crate::transport::{ControlConfig, ControlEvent, ControlPlane};
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId};
use core_fsm::orchestrator::{Config, Orchestrator};
use core_fsm::plan::RunPlan;
use core_fsm::port::{Input, JoinBinding};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

impl Orchestrated for Orchestrator {
    fn is_settled(&self) -> bool {
        Orchestrator::is_settled(self)
    }

    fn is_torn_down(&self) -> bool {
        Orchestrator::is_torn_down(self)
    }

    fn node_rows(&self) -> Vec<super::control::LiveNode> {
        self.nodes()
            .filter(|m| m.stage() != core_fsm::node::Lifecycle::New)
            .map(|m| super::control::LiveNode {
                id: m.node().clone(),
                stage: m.stage(),
                ready: m.is_ready(),
                failed_reason: m.failed_reason().map(str::to_owned),
                liveness: None,
                last_heartbeat_ms: None,
            })
            .collect()
    }
}

/// How long an agent told to shut down may take to close its connection
/// (the control plane itself closes it after 2 s).
const AGENT_STOP_BOUND: Duration = Duration::from_millis(2500);
/// Refused connections reported on stderr; later ones are only counted.
const REJECTIONS_SHOWN: u64 = 32;

/// The control plane as the sink sees it; a plan that names its own
/// orchestrator address (anything but `auto`) gets that address.
pub(crate) struct ControlJoins {
    control: Arc<ControlPlane>,
    addr: String,
    /// The lease each node's agent was last admitted for.
    admitted: Mutex<BTreeMap<LogicalNodeId, LeaseId>>,
    /// Bumped on every `Disconnected`, so a waiter re-reads who is connected.
    disconnects: watch::Sender<u64>,
}

impl Joins for ControlJoins {
    fn addr_string(&self) -> String {
        self.addr.clone()
    }

    fn mint(&self, binding: JoinBinding) -> String {
        self.control.mint(binding)
    }

    fn revoke(&self, binding: &JoinBinding) {
        self.control.revoke(binding);
    }

    fn stop_agent(&self, node: &LogicalNodeId) -> BoxFuture<'_, ()> {
        let node = node.clone();
        Box::pin(async move {
            let mut changes = self.disconnects.subscribe();
            let agents: Vec<AgentId> = self
                .control
                .connected()
                .into_iter()
                .filter(|(_, n)| *n == node)
                .map(|(agent, _)| agent)
                .collect();
            let told: Vec<AgentId> = agents
                .into_iter()
                .filter(|agent| self.control.shutdown_agent(agent))
                .collect();
            let gone = async {
                loop {
                    let connected = self.control.connected();
                    if told.iter().all(|a| !connected.contains_key(a)) {
                        return;
                    }
                    if changes.changed().await.is_err() {
                        return;
                    }
                }
            };
            // A silent agent is killed with its lease anyway.
            let _ = tokio::time::timeout(AGENT_STOP_BOUND, gone).await;
        })
    }
}

impl ControlJoins {
    /// The lease of `node` was released: its agent may no longer rejoin,
    /// unless it was admitted for a newer lease of the node (a replacement).
    fn released(&self, node: &LogicalNodeId, lease: &LeaseId) {
        let mut admitted = self.admitted.lock().expect("admitted");
        if admitted.get(node).is_some_and(|l| l != lease) {
            return;
        }
        admitted.remove(node);
        if let Err(e) = self.control.forget(node) {
            crate::say::err!("drover: control plane: forgetting {node}'s agent: {e:#}");
        }
    }
}

/// Builds the machine (fresh, or restored from the journal: adoption) and
/// the control plane, and drives the run.
pub async fn up(
    state_dir: &Path,
    plan: RunPlan,
    (pipeline, liveness): (
        Option<crate::pipeline::Prepared>,
        core_fsm::membership::Config,
    ),
    (datastream, controls): (crate::datastream::Hub, crate::dashboard::controls::Controls),
    json: bool,
) -> anyhow::Result<i32> {
    let (journal, records, key) = prepare_state(state_dir, &plan)?;
    let mut control = ControlPlane::bind_with(state_dir, control_config(&plan).await?).await?;
    let events = control.take_events();
    let control = Arc::new(control);
    let addr = match plan
        .groups
        .first()
        .map(|g| g.join.orchestrator_addr.as_str())
    {
        Some(addr) if addr != "auto" => addr.to_owned(),
        _ => control.addr_string(),
    };
    // Where agents dial (what `${ORCH_ADDR}` becomes); not a secret.
    let line = if json {
        serde_json::json!({ "event": "control", "addr": addr }).to_string()
    } else {
        format!("control plane: {addr}")
    };
    super::view::println_flush(&line);
    let joins = Arc::new(ControlJoins {
        control: control.clone(),
        addr,
        admitted: Mutex::new(BTreeMap::new()),
        disconnects: watch::channel(0).0,
    });
    let (tx, rx) = mpsc::channel(256);
    let tap = crate::pipeline::Tap::default();
    tokio::spawn(forward_events(
        events,
        joins.clone(),
        tx,
        tap.clone(),
        datastream.clone(),
    ));
    let released = joins.clone();
    let leases = Arc::new(Leases::new(move |node, lease| {
        released.released(node, lease);
    }));
    leases.restore(&records);
    accept_log_streams(&control, leases.clone(), datastream.clone());
    let config = Config {
        plan: plan.clone(),
        seed: seed(),
        // The composite watches every handed-off node from its join on,
        // and runs the plan's pipeline.
        membership: Some(liveness),
    };
    let machine = if records.is_empty() {
        Orchestrator::new(config)
    } else {
        let mut machine = Orchestrator::restore(config, &records);
        // Lines a crash interrupted are in the datastream above the
        // journal's numbers; continue above them (before `Start`).
        super::seqs::raise_from_datastream(state_dir, &mut machine);
        machine
    };
    let runtime = Runtime {
        state_dir: state_dir.to_owned(),
        plan,
        key,
        json,
        joins,
        leases,
        control_inputs: rx,
        host: super::HostParts {
            prepared: pipeline,
            control: control.clone(),
            tap,
        },
        datastream,
        controls,
    };
    let code = drive(runtime, machine, journal).await;
    // Agents were told to shut down before their leases went, so no
    // connection is left to drain here (a connection to a killed agent
    // would hold the endpoint's close for seconds).
    control.shutdown().await;
    code
}

/// Where the control plane binds: loopback, or, for a plan with docker
/// groups, the default bridge's gateway, an address of this machine that
/// both containers and local nodes reach.
async fn control_config(plan: &RunPlan) -> anyhow::Result<ControlConfig> {
    let mut config = ControlConfig::default();
    if crate::provider::docker::in_plan(plan) {
        let engine = crate::provider::docker::engine::Engine::from_env();
        config.bind_ip = engine
            .bridge_gateway()
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
    }
    Ok(config)
}

/// Control-plane events: admitted agents become `AgentJoined` (a rejoin
/// too: a restored node that waits for its agent takes it, any other node
/// ignores it and counts it); disconnects wake `stop_agent` waiters;
/// refused or misbehaving connections are reported (bounded) on stderr.
async fn forward_events(
    mut events: mpsc::Receiver<ControlEvent>,
    joins: Arc<ControlJoins>,
    tx: mpsc::Sender<Input>,
    tap: crate::pipeline::Tap,
    datastream: crate::datastream::Hub,
) {
    let mut rejected: u64 = 0;
    while let Some(event) = events.recv().await {
        observe(&datastream, &event);
        let (binding, agent) = match event {
            ControlEvent::Joined { binding, agent } | ControlEvent::Rejoined { binding, agent } => {
                (binding, agent)
            }
            ControlEvent::Disconnected { agent, node } => {
                joins.disconnects.send_modify(|n| *n += 1);
                tap.connection_lost(agent, node).await;
                continue;
            }
            ControlEvent::Rejected { peer, reason } => {
                rejected += 1;
                if rejected <= REJECTIONS_SHOWN {
                    let peer = peer.as_str().get(..12).unwrap_or(peer.as_str());
                    crate::say::err!("drover: control plane refused {peer}..: {reason}");
                } else if rejected == REJECTIONS_SHOWN + 1 {
                    crate::say::err!("drover: control plane: further refusals are not shown");
                }
                continue;
            }
            ControlEvent::Heartbeat { agent, node, .. } => {
                tap.heartbeat(agent, node);
                continue;
            }
            ControlEvent::Pipeline { agent, node, frame } => {
                tap.frame(agent, node, *frame).await;
                continue;
            }
        };
        joins
            .admitted
            .lock()
            .expect("admitted")
            .insert(binding.node.clone(), binding.lease_id.clone());
        let input = Input::AgentJoined {
            node: binding.node,
            lease_id: binding.lease_id,
            agent,
        };
        if tx.send(input).await.is_err() {
            return;
        }
    }
}

/// Agents' log connections (`transport::logs`) are served when their
/// endpoint id holds a live control connection; the node is the one that
/// connection was admitted for.
fn accept_log_streams(
    control: &Arc<ControlPlane>,
    leases: Arc<Leases>,
    hub: crate::datastream::Hub,
) {
    let (handler, mut conns) = mpsc::channel(LOG_CONNECTIONS_QUEUED);
    control.route(crate::transport::logs::LOG_ALPN, handler);
    let control = Arc::downgrade(control);
    tokio::spawn(async move {
        while let Some(conn) = conns.recv().await {
            let agent = crate::transport::agent_id_of(conn.remote_id());
            let node = control
                .upgrade()
                .and_then(|c| c.connected().get(&agent).cloned());
            let Some(node) = node else {
                conn.close(
                    crate::transport::CLOSE_REJECTED,
                    b"no live control connection",
                );
                continue;
            };
            let lease = leases.lease_of(&node);
            let stream =
                crate::transport::logs::serve_log_stream(conn, agent, node, lease, hub.clone());
            tokio::spawn(stream);
        }
    });
}

/// Log connections waiting to be looked at.
const LOG_CONNECTIONS_QUEUED: usize = 64;

/// The orchestrator's own datastream lines for a control-plane event:
/// membership (joined, rejoined, disconnected) and stage progress. Only
/// observed: nothing reads these lines back.
fn observe(hub: &crate::datastream::Hub, event: &ControlEvent) {
    use crate::datastream::channel::{MEMBERSHIP, STAGE};
    use crate::transport::wire::Frame;
    let short = |agent: &AgentId| {
        agent
            .as_str()
            .get(..12)
            .unwrap_or(agent.as_str())
            .to_owned()
    };
    let (channel, node, text) = match event {
        ControlEvent::Joined { binding, agent } => {
            let text = format!(
                "{}: agent {}.. joined (lease {})",
                binding.node,
                short(agent),
                binding.lease_id
            );
            (MEMBERSHIP, &binding.node, text)
        }
        ControlEvent::Rejoined { binding, agent } => {
            let text = format!("{}: agent {}.. rejoined", binding.node, short(agent));
            (MEMBERSHIP, &binding.node, text)
        }
        ControlEvent::Disconnected { agent, node } => (
            MEMBERSHIP,
            node,
            format!("{node}: agent {}.. disconnected", short(agent)),
        ),
        ControlEvent::Pipeline { node, frame, .. } => {
            let text = match frame.as_ref() {
                Frame::RuntimeReady {
                    stage,
                    readiness_id,
                    ..
                } => {
                    format!("{node}: stage {stage} runtime ready (report {readiness_id})")
                }
                Frame::ReadyAcked { stage, .. } => format!("{node}: stage {stage} acknowledged"),
                Frame::StageReport(report) => format!("{node}: {report}"),
                Frame::WeightsFetched {
                    first_layer,
                    end_layer,
                    bytes,
                    refetched,
                } => format!(
                    "{node}: weights {first_layer}..{end_layer} on the node ({bytes} bytes fetched{})",
                    if *refetched { ", refetched" } else { "" }
                ),
                Frame::WeightsFetching {
                    first_layer,
                    end_layer,
                    bytes,
                    total,
                } => format!(
                    "{node}: weights {first_layer}..{end_layer}: {bytes} of {total} bytes fetched"
                ),
                _ => return,
            };
            (STAGE, node, text)
        }
        ControlEvent::Heartbeat { .. } | ControlEvent::Rejected { .. } => return,
    };
    hub.event(channel, Some(node), text);
}

/// The run's seed: only nonces derive from it, and they must differ between
/// runs and lives, so the wall clock is a fine source here (the machine
/// itself never reads a clock).
fn seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32)
}
