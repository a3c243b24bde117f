//! A node: its agent machine and the agent's effect side, as
//! `runtime-real/src/pipeline/node.rs` and `worker.rs` carry it out: the
//! worker child (one job at a time), the edges, the weights, the reports.

use super::edges::{End, Frame};
use super::worker::{Job, Worker};
use super::{Ev, RunWorld};
use conformance::run::RunFault;
use core_fsm::agent::{self, Effect, Input, Report};
use core_fsm::boot;
use core_fsm::stage::{self, Provision};
use core_fsm::time::{Duration, Instant};
use std::collections::BTreeMap;

/// How long a dial keeps retrying before it fails (`edges::DIAL_FOR`).
const DIAL_FOR: Duration = Duration::from_secs(30);

/// One simulated node.
pub struct Node {
    /// Its stage (node `i` runs stage `i`).
    pub stage: u32,
    /// 0 for the node's first agent, then one more per replacement.
    pub generation: u32,
    /// The agent's pipeline side, started again once per orchestrator
    /// restart.
    pub incarnation: u32,
    /// The agent composite.
    pub agent: agent::Machine,
    /// Whether the agent runs.
    pub alive: bool,
    /// Whether its connections are known gone (after a death).
    pub lost: bool,
    pub(super) worker: Option<Worker>,
    /// Bumped whenever the worker goes; jobs of an older life are void.
    pub(super) life: u32,
    pub(super) fetched_at: Option<Instant>,
    /// The provision received, if any (`orders`).
    pub order: Option<Provision>,
    /// Steps arrived and not executed yet.
    pub pending: BTreeMap<u64, Frame>,
    /// Whether the stage asked for its inbound edge.
    pub claiming: bool,
    /// The inbound connection the stage reads.
    pub reader: Option<u32>,
    /// An inbound connection waiting to be claimed.
    pub arrived: Option<u32>,
    /// The outbound connection.
    pub outbound: Option<u32>,
    /// Steps executed on this stage.
    pub(super) stage_steps: u64,
    /// Whether the first runtime-ready report was sent.
    pub reported: bool,
    /// When the last message to the orchestrator arrives (in order).
    pub to_host_at: Instant,
    /// When the last message from the orchestrator arrives (in order).
    pub from_host_at: Instant,
}

impl Node {
    /// Node `stage`, its agent starting at `now`.
    pub fn new(stage: u32, config: agent::Config, now: Instant) -> Node {
        Node {
            stage,
            generation: 0,
            incarnation: 0,
            agent: agent::Machine::new(config, now),
            alive: true,
            lost: false,
            worker: None,
            life: 0,
            fetched_at: None,
            order: None,
            pending: BTreeMap::new(),
            claiming: false,
            reader: None,
            arrived: None,
            outbound: None,
            stage_steps: 0,
            reported: false,
            to_host_at: now,
            from_host_at: now,
        }
    }
}

/// The boot facts `drover-agent` feeds its agent on start.
pub fn boot_inputs(stage: u32) -> Vec<Input> {
    vec![
        Input::Start,
        Input::Boot(boot::Input::TransportReady),
        Input::Boot(boot::Input::IdentityAssigned {
            node: super::node_id(stage),
        }),
        Input::Boot(boot::Input::ArenaCreated),
        Input::Boot(boot::Input::Membership(boot::Membership::Joined)),
        Input::Boot(boot::Input::CanAcceptProvisioning),
    ]
}

impl RunWorld<'_> {
    /// An answer of the node's machinery for stage controller `s`.
    pub(super) fn stage_answer(&mut self, s: u32, delay: Duration, input: stage::Input) {
        let input = Input::Stage { stage: s, input };
        self.at(delay, Ev::Agent { node: s, input });
    }

    pub(super) fn agent_effect(&mut self, s: u32, effect: Effect) {
        match effect {
            Effect::SpawnWorker { op } => {
                let n = &mut self.nodes[s as usize];
                n.life += 1;
                n.worker = Some(Worker {
                    op,
                    free_at: self.now,
                    cache: Vec::new(),
                    loaded: false,
                });
                let spawned = Input::WorkerSpawned { op, result: Ok(()) };
                self.at(
                    Duration::ZERO,
                    Ev::Agent {
                        node: s,
                        input: spawned,
                    },
                );
                let life = self.nodes[s as usize].life;
                let spawn = Duration::from_millis(self.case.profile.spawn_ms);
                self.at(
                    spawn,
                    Ev::Worker {
                        node: s,
                        life,
                        job: Job::Hello,
                    },
                );
            }
            Effect::Boot(_) => {}
            Effect::Report(report) => self.report(s, report),
            Effect::Heartbeat { node, agent } => {
                let input = core_fsm::membership::Input::Heartbeat { node, agent };
                self.send_to_host(s, core_fsm::pipeline::Input::Membership(input));
            }
            Effect::Stage { stage, effect } => self.stage_effect(stage, effect),
        }
    }

    /// A message from node `s` to the orchestrator, in order.
    fn send_to_host(&mut self, s: u32, input: core_fsm::pipeline::Input) {
        let when = (self.now + self.latency()).max(self.nodes[s as usize].to_host_at);
        self.nodes[s as usize].to_host_at = when;
        self.at_instant(when, Ev::Host(input));
    }

    fn report(&mut self, s: u32, report: Report) {
        if let Report::RuntimeReady { readiness_id, .. } = &report {
            let first = !std::mem::replace(&mut self.nodes[s as usize].reported, true);
            if first && self.nodes[s as usize].generation == 0 {
                self.stray_reports(s, *readiness_id);
            }
        }
        let loaded = matches!(report, Report::Stage(stage::Report::WeightsReady { .. }));
        self.send_to_host(s, super::run_input(report.into()));
        if loaded && self.planned(RunFault::AgentDiesLoaded, s).is_some() {
            self.inject(RunFault::AgentDiesLoaded);
            self.die(s);
        }
    }

    /// Runtime-ready reports from the wrong node or for the wrong run,
    /// planned beside stage `s`'s first one.
    fn stray_reports(&mut self, s: u32, readiness_id: u64) {
        let stages = self.case.profile.stages.max(1);
        let mut strays = Vec::new();
        if let Some(how) = self.planned(RunFault::ReadyWrongNode, s) {
            self.inject(RunFault::ReadyWrongNode);
            let (node, agent) = match (how, stages) {
                // Another node's connection names this stage.
                (0, 1) => (
                    core_fsm::ids::LogicalNodeId::new("stray"),
                    super::agent_id(99),
                ),
                (0, _) => (
                    super::node_id((s + 1) % stages),
                    super::agent_id((s + 1) % stages),
                ),
                // An identity that is not the node's agent.
                _ => (super::node_id(s), super::agent_id(100 + s)),
            };
            strays.push(core_fsm::run::Input::RuntimeReady {
                run_id: super::RUN,
                node,
                stage: s,
                agent,
                readiness_id: readiness_id + 1000,
            });
        }
        if self.planned(RunFault::ReadyWrongRun, s).is_some() {
            self.inject(RunFault::ReadyWrongRun);
            strays.push(core_fsm::run::Input::RuntimeReady {
                run_id: core_fsm::ids::RunId(super::RUN.0 + 1),
                node: super::node_id(s),
                stage: s,
                agent: super::agent_id(s),
                readiness_id,
            });
        }
        for stray in strays {
            self.send_to_host(s, super::run_input(stray));
        }
    }

    /// A control frame from the orchestrator reaches node `s`'s agent.
    pub(super) fn deliver_to_agent(&mut self, s: u32, input: Input) {
        if !self.nodes[s as usize].alive {
            return;
        }
        let dies = self.planned(RunFault::AgentDiesBeforeLoad, s).is_some();
        let fetch = Duration::from_millis(self.case.profile.fetch_ms);
        let node = &mut self.nodes[s as usize];
        match &input {
            Input::ReadyAck { .. } if dies => {
                self.inject(RunFault::AgentDiesBeforeLoad);
                self.die(s);
                return;
            }
            Input::Provision { provision, .. } => {
                // The route starts the fetch and keeps the order.
                node.order = Some(provision.clone());
                node.fetched_at.get_or_insert(self.now + fetch);
            }
            _ => {}
        }
        self.feed_agent(s, input);
    }

    /// A prefetch hint reaches node `s`: its slice starts fetching.
    pub(super) fn prefetch(&mut self, s: u32) {
        let fetch = Duration::from_millis(self.case.profile.fetch_ms);
        let at = self.now + self.latency() + fetch;
        let node = &mut self.nodes[s as usize];
        if node.alive {
            node.fetched_at.get_or_insert(at);
        }
    }

    fn stage_effect(&mut self, s: u32, effect: stage::Effect) {
        let p = &self.case.profile;
        let (stages, load_ms, step_ms) = (p.stages.max(1), p.load_ms, p.step_ms);
        match effect {
            stage::Effect::EstablishInbound(_) => {
                let node = &mut self.nodes[s as usize];
                node.claiming = true;
                if let Some(conn) = node.arrived.take() {
                    self.claim(s, conn);
                }
            }
            stage::Effect::EstablishOutbound(edge) => {
                let to = if s + 1 < stages {
                    End::Node(s + 1)
                } else {
                    End::Orch
                };
                match self.dial(edge.id, End::Node(s), to) {
                    Some(conn) => {
                        self.nodes[s as usize].outbound = Some(conn);
                        self.stage_answer(s, self.latency(), stage::Input::OutboundReady);
                    }
                    None => {
                        let reason = format!("dialing edge {}: unreachable", edge.id);
                        self.stage_answer(s, DIAL_FOR, stage::Input::EdgeFault { reason });
                    }
                }
            }
            stage::Effect::ConfigureWorker { .. } => {
                self.stage_answer(s, Duration::ZERO, stage::Input::WorkerReady);
            }
            stage::Effect::LoadWeights { .. } => {
                if self.planned(RunFault::AgentDiesLoading, s).is_some() {
                    self.inject(RunFault::AgentDiesLoading);
                    self.die(s);
                    return;
                }
                if self.nodes[s as usize].worker.is_none() {
                    let reason = "the worker is gone".to_owned();
                    self.stage_answer(s, Duration::ZERO, stage::Input::LoadFailed { reason });
                    return;
                }
                let start = self.nodes[s as usize].fetched_at.unwrap_or(self.now);
                let loaded = self.nodes[s as usize]
                    .worker
                    .as_ref()
                    .is_some_and(|w| w.loaded);
                if loaded {
                    // Provisioned again after a repair: the worker holds
                    // the slice already.
                    self.job(s, self.now, 0, Job::Loaded);
                } else if self.planned(RunFault::WorkerCrashLoad, s).is_some() {
                    self.inject(RunFault::WorkerCrashLoad);
                    self.job(s, start, load_ms / 2, Job::Crash);
                } else {
                    self.job(s, start, load_ms, Job::Loaded);
                }
            }
            stage::Effect::ExecuteStep { seq } => self.execute(s, seq, step_ms),
            stage::Effect::Report(report) => self.report(s, Report::Stage(report)),
            stage::Effect::StopLocalEdges => {
                let node = &mut self.nodes[s as usize];
                node.claiming = false;
                let (out, reader) = (node.outbound.take(), node.reader.take());
                if let Some(out) = out {
                    // Dropping the queue finishes the stream: the
                    // receiver reads the end.
                    self.close_conn(out);
                }
                if let Some(reader) = reader {
                    // An aborted reader: the sender fails at its next write.
                    self.conns[reader as usize].open = false;
                }
                // Steps of the old edges are never executed.
                self.nodes[s as usize].pending.clear();
                self.stage_answer(s, Duration::ZERO, stage::Input::LocalEdgesStopped);
            }
            stage::Effect::QuiesceRings => {
                self.stage_answer(s, Duration::ZERO, stage::Input::RingsQuiesced);
            }
            stage::Effect::ReleaseDeviceObjects => {
                self.stage_answer(s, Duration::ZERO, stage::Input::DeviceObjectsReleased);
            }
            stage::Effect::ResetWorkerRole => {
                // The worker keeps its process and its slice: a repair
                // provisions the stage again on it (`node/sink.rs`).
                let life = self.nodes[s as usize].life;
                self.at(
                    Duration::from_millis(10),
                    Ev::Worker {
                        node: s,
                        life,
                        job: Job::Reset,
                    },
                );
            }
        }
    }
}
