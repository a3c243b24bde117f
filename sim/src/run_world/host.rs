//! The orchestrator's effect side of the pipeline host, as
//! `runtime-real/src/pipeline/host.rs` carries it out: control frames to
//! agents (a send to an agent whose connection is gone fails), the token
//! edges, the prompt service and the clients' calls.

use super::edges::{End, Frame};
use super::{Ev, RUN, RunWorld, agent_id_of, model, node_id, orchestrator_id, run_input};
use conformance::run::{RunFault, RunProfile};
use core_fsm::agent;
use core_fsm::pipeline::Effect;
use core_fsm::run::{self, RequestId, TokenEndpoint};
use core_fsm::time::Duration;

/// The host sink's own state.
pub struct HostSide {
    token_in: Option<u32>,
    /// Whether the token-out endpoint accepts its edge.
    pub token_out_open: bool,
    /// The accepted token-out connection.
    pub token_out: Option<u32>,
    next_step: u64,
    /// The agent of each stage, from the acknowledgements (as `host.rs`
    /// keeps them): control frames go to that identity only.
    agents: std::collections::BTreeMap<u32, core_fsm::ids::AgentId>,
    submitted: u32,
    shutdown_sent: bool,
}

impl HostSide {
    /// The host side of a pipeline of `stages` stages.
    pub fn new(_stages: u32) -> HostSide {
        HostSide {
            token_in: None,
            token_out_open: false,
            token_out: None,
            next_step: 0,
            agents: std::collections::BTreeMap::new(),
            submitted: 0,
            shutdown_sent: false,
        }
    }
}

/// The run machine, configured as `drover up` configures it (shorter
/// timeouts where the simulated world is faster).
pub fn run_config(p: &RunProfile) -> run::Config {
    let stages = p.stages.max(1);
    run::Config {
        run_id: RUN,
        orchestrator: orchestrator_id(),
        model_id: "stand-in".to_owned(),
        layers: p.layers.max(stages),
        stages,
        nodes: (0..stages).map(node_id).collect(),
        split: Vec::new(),
        readiness_timeout: Duration::from_secs(60),
        ack_retry_interval: Duration::from_secs(1),
        ack_attempts_max: 10,
        ack_timeout: Duration::from_secs(15),
        weights_timeout: Duration::from_secs(20),
        stage_ready_timeout: Duration::from_secs(60),
        prompt_open_timeout: Duration::from_secs(10),
        token_timeout: super::TOKEN_TIMEOUT,
        prefill_per_token: super::PREFILL_PER_TOKEN,
        queue_max: 16,
        context: p.context,
        stop_timeout: Duration::from_secs(20),
        repairs_max: p.repairs,
        repair_timeout: Duration::from_secs(30),
    }
}

impl HostSide {
    /// The host side of a restarted orchestrator: nothing open; the
    /// clients that had not submitted yet still will.
    pub fn resumed(stages: u32, before: &HostSide) -> HostSide {
        HostSide {
            submitted: before.submitted,
            ..HostSide::new(stages)
        }
    }
}

impl RunWorld<'_> {
    pub(super) fn host_effect(&mut self, effect: Effect) {
        let effect = match effect {
            Effect::Liveness { .. } => return,
            // The drill: the agent exits at once, as `transport/agent.rs`
            // does on the orchestrator's `Crash`.
            Effect::KillAgent { node, .. } => {
                if let Some(s) = (0..self.nodes.len() as u32).find(|s| node_id(*s) == node)
                    && self.nodes[s as usize].alive
                {
                    self.die(s);
                }
                return;
            }
            Effect::Run(effect) => effect,
        };
        match effect {
            run::Effect::SendReadyAck {
                node,
                agent,
                run_id,
                stage,
                readiness_id,
            } => {
                self.hs.agents.insert(stage, agent.clone());
                let from = orchestrator_id();
                let ack = agent::Input::ReadyAck {
                    from,
                    run_id,
                    readiness_id,
                };
                self.send(&node, Some(&agent), ack);
            }
            run::Effect::OpenTokenEndpoints => self.open_token_endpoints(),
            run::Effect::ProvisionStage {
                node,
                agent,
                provision,
            } => {
                let s = provision.stage;
                if self.planned(RunFault::ProvisionLost, s).is_some() {
                    self.inject(RunFault::ProvisionLost);
                    return;
                }
                let order = agent::Input::Provision {
                    from: orchestrator_id(),
                    provision,
                };
                if self.planned(RunFault::ProvisionDuplicated, s).is_some() {
                    self.inject(RunFault::ProvisionDuplicated);
                    self.send(&node, Some(&agent), order.clone());
                }
                self.send(&node, Some(&agent), order);
            }
            run::Effect::OpenPromptService { op } => {
                let opened = run::Input::PromptServiceOpened { op, result: Ok(()) };
                self.at(Duration::from_millis(1), Ev::Host(run_input(opened)));
                // Clients can reach the service once it is bound.
                let gap = self.case.profile.submit_gap_ms;
                for r in self.hs.submitted..self.case.profile.requests {
                    let delay = 2 + self.case.profile.latency_ms + u64::from(r) * gap;
                    self.at(Duration::from_millis(delay), Ev::Submit(r));
                }
            }
            run::Effect::Inject {
                request,
                seq,
                pos,
                tokens,
            } => self.inject_tokens(request, seq, pos, tokens),
            run::Effect::Enlist { node, agent, stage } => self.enlist(&node, &agent, stage),
            // Observational: the oracle saw them.
            run::Effect::Repairing { .. } => {}
            run::Effect::Repaired { resumed, .. } => {
                let label = super::config::repaired_label(resumed);
                self.coverage.labels.insert(label.to_owned());
            }
            // The oracle saw it; a disconnected client's events go nowhere.
            run::Effect::Prompt { .. } | run::Effect::Finished(_) => {}
            run::Effect::StopStage { node, stage } => {
                let from = orchestrator_id();
                let stop = agent::Input::StopStage {
                    from,
                    run_id: RUN,
                    stage,
                };
                let to = self.hs.agents.get(&stage).cloned();
                self.send(&node, to.as_ref(), stop);
            }
            run::Effect::CloseTokenEndpoints => {
                if let Some(conn) = self.hs.token_in.take() {
                    self.close_conn(conn);
                }
                if let Some(conn) = self.hs.token_out.take() {
                    self.conns[conn as usize].open = false;
                }
                self.hs.token_out_open = false;
                let closed = run::Input::TokenEndpointsClosed { run_id: RUN };
                self.at(Duration::ZERO, Ev::Host(run_input(closed)));
            }
        }
    }

    /// A control frame to `node`'s agent `to` (its current one when `None`),
    /// in order; a send to an agent whose connection is gone (dead, or
    /// replaced by a new identity) fails at once.
    fn send(
        &mut self,
        node: &core_fsm::ids::LogicalNodeId,
        to: Option<&core_fsm::ids::AgentId>,
        input: agent::Input,
    ) {
        let Some(s) = (0..self.nodes.len() as u32).find(|s| node_id(*s) == *node) else {
            return;
        };
        let n = &self.nodes[s as usize];
        let replaced = to.is_some_and(|a| *a != agent_id_of(s, n.generation));
        if n.lost || replaced {
            let reason = "the agent is not connected (or its queue is full)".to_owned();
            let failed = run::Input::SendFailed {
                node: node.clone(),
                reason,
            };
            self.at(Duration::ZERO, Ev::Host(run_input(failed)));
            return;
        }
        let when = (self.now + self.latency()).max(self.nodes[s as usize].from_host_at);
        self.nodes[s as usize].from_host_at = when;
        self.at_instant(when, Ev::Agent { node: s, input });
    }

    /// Dials stage 0 for token-in, accepts the last stage's token-out, and
    /// sends every stage its prefetch hint.
    fn open_token_endpoints(&mut self) {
        // A (re)built pipeline's stages count their steps from 0.
        self.hs.next_step = 0;
        self.hs.token_out_open = true;
        let answer = match self.dial(0, End::Orch, End::Node(0)) {
            Some(conn) => {
                self.hs.token_in = Some(conn);
                run::Input::TokenEndpointReady {
                    run_id: RUN,
                    endpoint: TokenEndpoint::In,
                }
            }
            None => run::Input::EndpointFault {
                run_id: RUN,
                reason: "dialing edge 0: unreachable".to_owned(),
            },
        };
        self.at(self.latency(), Ev::Host(run_input(answer)));
        for s in 0..self.nodes.len() as u32 {
            if !self.nodes[s as usize].lost {
                self.prefetch(s);
            }
        }
    }

    fn inject_tokens(&mut self, request: RequestId, seq: u64, pos: u32, tokens: Vec<u32>) {
        // A prompt travels in chunks, several in flight, as `host.rs` sends
        // it; a fed-back token is one chunk.
        let chunks = super::config::prefill_chunks(tokens.len());
        let count = chunks.len();
        let mut at = 0;
        let mut sent = self.hs.token_in.is_some();
        for (i, len) in chunks.into_iter().enumerate() {
            let frame = Frame::Step {
                step: self.hs.next_step,
                request: request.0,
                seq,
                pos: pos + at as u32,
                rows: tokens[at..at + len]
                    .iter()
                    .map(|t| model::embed(*t))
                    .collect(),
                last: i + 1 == count,
            };
            self.hs.next_step += 1;
            at += len;
            sent = sent
                && self
                    .hs
                    .token_in
                    .is_some_and(|conn| self.send_frame(conn, frame));
        }
        if !sent {
            let reason = "the token-in edge is closed".to_owned();
            let fault = run::Input::EndpointFault {
                run_id: RUN,
                reason,
            };
            self.at(Duration::ZERO, Ev::Host(run_input(fault)));
        }
    }

    /// An agent is told its stage. The world's agents boot and report at
    /// once (their pipeline side starts with them), so the word is only
    /// counted: for a first agent, a replacement, or one gone already.
    fn enlist(
        &mut self,
        node: &core_fsm::ids::LogicalNodeId,
        agent: &core_fsm::ids::AgentId,
        stage: u32,
    ) {
        let label = match self.nodes.get(stage as usize) {
            Some(n)
                if n.alive
                    && *node == node_id(stage)
                    && *agent == agent_id_of(stage, n.generation) =>
            {
                match n.generation {
                    0 => "run:enlist/first",
                    _ => "run:enlist/replacement",
                }
            }
            _ => "run:enlist/stale",
        };
        self.coverage.labels.insert(label.to_owned());
        self.note(&format!("world: {agent} enlisted for stage {stage}"));
    }

    /// The client of request `index` submits (the prompt service numbers
    /// requests from 1, in order).
    pub(super) fn submit(&mut self, index: u32) {
        let p = &self.case.profile;
        let (prompt, max_tokens) = model::request(
            p.prompt_seed,
            index,
            p.prompt_max,
            p.max_tokens_max,
            p.context,
        );
        self.hs.submitted += 1;
        let request = RequestId(u64::from(index) + 1);
        let disconnect = self.planned(RunFault::ClientDisconnects, index);
        self.oracle
            .submitted(request, prompt.clone(), max_tokens, disconnect);
        let submit = run::Input::Submit {
            request,
            prompt,
            max_tokens,
        };
        self.feed_host(run_input(submit));
    }

    /// The operator stops the run once every client has its answer.
    pub(super) fn maybe_shutdown(&mut self) {
        let all = self.hs.submitted == self.case.profile.requests;
        // A restarted orchestrator serves before it is stopped.
        let serving = self
            .the_run()
            .is_some_and(|r| matches!(r.phase(), run::Phase::Serving(_)));
        if all
            && serving
            && !self.hs.shutdown_sent
            && self.oracle.all_answered()
            && self.ended_at.is_none()
        {
            self.hs.shutdown_sent = true;
            self.note("world: every client has its answer; the operator stops the run");
            let stop = run::Input::Shutdown;
            self.at(Duration::from_millis(1), Ev::Host(run_input(stop)));
        }
    }
}
