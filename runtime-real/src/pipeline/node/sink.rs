//! The agent's effects, carried out: the worker, the edges, the weights,
//! the reports to the orchestrator.

use super::{Shared, say, warn};
use crate::pipeline::edges::{self, Rendezvous};
use crate::pipeline::wire::EdgeFrame;
use crate::pipeline::worker::{self, Job, Life};
use crate::transport::wire::Frame;
use crate::transport::{format_addr, parse_addr};
use core_fsm::agent::{Effect, Input, Report};
use core_fsm::stage::{self, EdgeKind};
use iroh::EndpointAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The agent's effects, carried out.
pub(super) struct NodeSink {
    pub(super) shared: Arc<Shared>,
    pub(super) tx: mpsc::Sender<Input>,
    pub(super) to_orch: mpsc::Sender<Frame>,
    pub(super) rendezvous: Rendezvous,
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
            Effect::Boot(effect) => say(&self.shared.node, &format!("boot: {effect}")),
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
        let (tx, life) = (self.tx.clone(), self.shared.lives.of(stage));
        tokio::spawn(async move { life.send(&tx, input).await });
    }

    fn stage(&self, stage: u32, effect: stage::Effect) {
        let shared = self.shared.clone();
        let tx = self.tx.clone();
        // What this effect's tasks answer is for the controller life that
        // asked; a later provision of the stage voids it.
        let life = self.shared.lives.of(stage);
        match effect {
            stage::Effect::EstablishInbound(edge) => {
                let rendezvous = self.rendezvous.clone();
                let reader = tokio::spawn(async move {
                    let fault = |reason: String| stage::Input::EdgeFault { reason };
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
                        life.send(&tx, fault(why)).await;
                        return;
                    }
                    life.send(&tx, stage::Input::InboundReady).await;
                    let why = loop {
                        shared.pending.room().await;
                        match edges::next(&mut inbound.recv).await {
                            Ok(Some(EdgeFrame::Step(step))) => {
                                let seq = step.step;
                                if !life.current() {
                                    return;
                                }
                                shared.pending.arrive(seq, step);
                                life.send(&tx, stage::Input::StepArrived { seq }).await;
                            }
                            Ok(Some(other)) => {
                                break format!("edge {}: unexpected {other:?}", edge.id);
                            }
                            Ok(None) => break format!("edge {} closed", edge.id),
                            Err(e) => break format!("edge {}: {e}", edge.id),
                        }
                    };
                    life.send(&tx, fault(why)).await;
                });
                self.shared.readers.lock().expect("readers").push(reader);
            }
            stage::Effect::EstablishOutbound(edge) => {
                tokio::spawn(async move {
                    let input = match outbound(&shared, edge, tx.clone(), life.clone()).await {
                        Ok(()) => stage::Input::OutboundReady,
                        Err(reason) => stage::Input::EdgeFault { reason },
                    };
                    life.send(&tx, input).await;
                });
            }
            stage::Effect::ConfigureWorker { .. } => self.answer(stage, stage::Input::WorkerReady),
            stage::Effect::LoadWeights { .. } => {
                tokio::spawn(async move {
                    if let Err(reason) = load(&shared, stage, life.clone()).await {
                        life.send(&tx, stage::Input::LoadFailed { reason }).await;
                    }
                });
            }
            stage::Effect::ExecuteStep { seq } => {
                let step = self.shared.pending.take(seq);
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
                            let job = Job::Step {
                                step,
                                last,
                                out,
                                life: life.clone(),
                            };
                            if jobs.send(job).await.is_err() {
                                let reason = "the worker is gone".to_owned();
                                life.send(&tx, stage::Input::StepFailed { seq, reason })
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
                // Steps of the old edges are never executed: a rebuilt
                // stage counts its steps from 0 again.
                self.shared.pending.clear();
                self.answer(stage, stage::Input::LocalEdgesStopped);
            }
            stage::Effect::Report(report) => self.report(Report::Stage(report)),
            stage::Effect::QuiesceRings => self.answer(stage, stage::Input::RingsQuiesced),
            stage::Effect::ReleaseDeviceObjects => {
                self.answer(stage, stage::Input::DeviceObjectsReleased);
            }
            // The worker keeps its process and its loaded slice: a repair
            // provisions the stage again on the same worker (a request
            // starts at position 0, which truncates its cache). It stops
            // with the agent (`NodeHandle::shutdown`).
            stage::Effect::ResetWorkerRole => self.answer(stage, stage::Input::WorkerRoleReset),
        }
    }
}

/// Dials the stage's outbound edge and keeps its queue.
async fn outbound(
    shared: &Arc<Shared>,
    edge: stage::Edge,
    tx: mpsc::Sender<Input>,
    life: Life,
) -> Result<(), String> {
    let stage = life.stage();
    let order = shared.order(stage).ok_or("no provision for the stage")?;
    let to = parse_addr(&order.downstream).map_err(|e| format!("{e:#}"))?;
    let failed = move |reason: String| {
        tokio::spawn(async move {
            life.send(&tx, stage::Input::EdgeFault { reason }).await;
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
async fn load(shared: &Arc<Shared>, stage: u32, life: Life) -> Result<(), String> {
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
        settings: order.worker,
        life,
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
