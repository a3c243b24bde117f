//! The pipeline on the orchestrator: `core_fsm::pipeline` (the run and the
//! membership of its nodes) driven by the shared effect loop; this file is
//! its effect side: control frames to agents, the token edges, the prompt
//! service. [`super::shared`] holds what it shares; `host/tokens.rs` the
//! token edges (a prompt cut into chunks, the sampled tokens back) and
//! `host/repair.rs` the repair's lines.

mod repair;
mod tokens;

pub use super::shared::{HostShared, LivenessHook, RunParts};
use tokens::{TokenIn, token_out};

use super::edges;
use super::run_input;
use super::wire::{self, StageOrder, WorkerSettings};
use crate::prompt::Call;
use crate::transport::parse_addr;
use crate::transport::wire::Frame;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::pipeline::Effect;
use core_fsm::port::Input;
use core_fsm::run::{self, TokenEndpoint};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// The run's effects, carried out.
pub struct HostSink {
    /// Shared state.
    pub shared: Arc<HostShared>,
    /// The host's own input channel.
    pub tx: mpsc::Sender<Input>,
    /// The nodes of the stages, in order, with their agents (from the run's
    /// begin).
    stages: Vec<(LogicalNodeId, AgentId)>,
    /// Each stage's weights, in stage order.
    weights: Vec<wire::WeightsRef>,
    token_in: Arc<Mutex<TokenIn>>,
    token_out: Option<tokio::task::JoinHandle<()>>,
    prompt: Option<tokio::task::JoinHandle<()>>,
    calls: Option<mpsc::Sender<Call>>,
    /// The step number of the next chunk into stage 0; every (re)built
    /// pipeline's stages count their steps from 0.
    next_step: u64,
}

impl HostSink {
    /// The sink of a host; `calls` takes the prompt service's calls.
    pub fn new(
        shared: Arc<HostShared>,
        tx: mpsc::Sender<Input>,
        calls: mpsc::Sender<Call>,
    ) -> HostSink {
        HostSink {
            shared,
            tx,
            stages: Vec::new(),
            weights: Vec::new(),
            token_in: Arc::default(),
            token_out: None,
            prompt: None,
            calls: Some(calls),
            next_step: 0,
        }
    }

    fn input(&self, input: run::Input) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(run_input(input)).await;
        });
    }

    fn send(&self, node: &LogicalNodeId, agent: &AgentId, frame: Frame) {
        if !self.shared.control.send(agent, frame) {
            let reason = "the agent is not connected (or its queue is full)".to_owned();
            let node = node.clone();
            self.input(run::Input::SendFailed { node, reason });
        }
    }

    /// Dials stage 0 for token-in; listens for the last stage's token-out.
    fn open_token_endpoints(&mut self) {
        self.next_step = 0;
        let shared = self.shared.clone();
        let tx = self.tx.clone();
        let run_id = shared.run_id;
        let (first_agent, last_agent) = (
            self.stages[0].1.clone(),
            self.stages.last().expect("a stage").1.clone(),
        );
        let addr = shared
            .addrs
            .lock()
            .expect("addrs")
            .get(&first_agent)
            .cloned();
        let token_in = self.token_in.clone();
        let endpoint = shared.control.endpoint().clone();
        let life = token_in.lock().expect("token in").life;
        tokio::spawn(async move {
            let fault = |reason: String| TokenIn::fault(&token_in, life, &tx, run_id, reason);
            let Some(addr) = addr else {
                fault("stage 0 reported no edge address".to_owned());
                return;
            };
            let to = match parse_addr(&addr) {
                Ok(to) => to,
                Err(e) => return fault(format!("stage 0's address: {e:#}")),
            };
            let failed = {
                let (token_in, tx) = (token_in.clone(), tx.clone());
                move |reason| TokenIn::fault(&token_in, life, &tx, run_id, reason)
            };
            match edges::dial(&endpoint, to, run_id, 0, failed).await {
                Ok((queue, _conn)) => {
                    if !TokenIn::open(&token_in, life, queue) {
                        return;
                    }
                    let ready = run::Input::TokenEndpointReady {
                        run_id,
                        endpoint: TokenEndpoint::In,
                    };
                    let _ = tx.send(run_input(ready)).await;
                }
                Err(reason) => fault(reason),
            }
        });
        let (conns_tx, conns_rx) = mpsc::channel(4);
        self.shared.control.route(wire::EDGE_ALPN, conns_tx);
        let last_edge = self.stages.len() as u32;
        self.token_out = Some(tokio::spawn(token_out(
            self.shared.clone(),
            self.tx.clone(),
            conns_rx,
            last_agent,
            last_edge,
        )));
        // Every stage fetches its slice now; loading stays one at a time.
        for ((node, agent), w) in self.stages.iter().zip(&self.weights) {
            self.send(node, agent, Frame::Prefetch(Box::new(w.clone())));
        }
    }

    fn provision(
        &self,
        node: &LogicalNodeId,
        agent: &AgentId,
        provision: core_fsm::stage::Provision,
    ) {
        let stage = provision.stage as usize;
        let downstream = match self.stages.get(stage + 1) {
            Some((_, next)) => self.shared.addrs.lock().expect("addrs").get(next).cloned(),
            None => Some(self.shared.control.addr_string()),
        };
        let Some(downstream) = downstream else {
            let reason = format!("stage {} reported no edge address", stage + 1);
            self.input(run::Input::SendFailed {
                node: node.clone(),
                reason,
            });
            return;
        };
        let upstream = match stage {
            0 => self.shared.control.id(),
            _ => self.stages[stage - 1].1.clone(),
        };
        let spec = self.shared.spec();
        let order = StageOrder {
            provision,
            downstream,
            upstream,
            weights: self.weights[stage].clone(),
            worker: WorkerSettings {
                // The run's context, as the run's machine counts it.
                ctx: super::run_context(spec.ctx, self.shared.model().context()),
                threads: spec.threads,
                backend: spec.backend,
                sampling: spec.sampling,
            },
        };
        self.send(node, agent, Frame::Provision(Box::new(order)));
    }

    async fn open_prompt(&mut self, op: core_fsm::ids::OpId) {
        let addr = self.shared.spec().rpc_addr;
        let server = match crate::prompt::Server::bind(addr).await {
            Ok(server) => server,
            Err(e) => {
                let result = Err(e.to_string());
                return self.input(run::Input::PromptServiceOpened { op, result });
            }
        };
        let bound = server.local_addr();
        if let Err(e) = crate::prompt::write_addr(&self.shared.state_dir, bound) {
            let result = Err(format!("writing the prompt address: {e}"));
            return self.input(run::Input::PromptServiceOpened { op, result });
        }
        self.shared
            .update(|s| s.prompt_addr = Some(bound.to_string()));
        // The run hears it is open before the first client can be heard:
        // both go through the host's one channel, this first.
        let opened = run_input(run::Input::PromptServiceOpened { op, result: Ok(()) });
        if let Err(mpsc::error::TrySendError::Full(opened)) = self.tx.try_send(opened) {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(opened).await;
            });
        }
        let calls = self.calls.take().expect("the prompt service opens once");
        self.prompt = Some(server.serve(calls));
        let stages = self.stages.len();
        let line = if self.shared.json {
            serde_json::json!({"event": "serving", "prompt_addr": bound.to_string(), "stages": stages})
                .to_string()
        } else {
            format!(
                "ready: the model is served on {stages} stage(s); prompt service on {bound}\n  \
                 try: drover prompt \"Once upon a time\"   (or `drover chat`)"
            )
        };
        crate::up::view::println_flush(&line);
    }

    /// Closes the prompt service (at the end of the run).
    pub fn close(&mut self) {
        if let Some(prompt) = self.prompt.take() {
            prompt.abort();
        }
        let _ = crate::prompt::remove_addr(&self.shared.state_dir);
    }
}

impl driver::EffectSink<Effect> for HostSink {
    async fn dispatch(&mut self, _now: core_fsm::Instant, effect: Effect) {
        let effect = match effect {
            Effect::Liveness {
                node,
                agent,
                liveness,
            } => {
                (self.shared.on_liveness)(&node, &agent, liveness);
                return;
            }
            Effect::KillAgent { node, agent } => {
                let sent = self.shared.control.send(&agent, Frame::Crash);
                let text = match sent {
                    true => format!("{node}: its agent is killed by the operator (a drill)"),
                    false => format!(
                        "{node}: the drill's kill could not be sent (its agent is not connected)"
                    ),
                };
                self.shared.membership_event(&node, text);
                return;
            }
            Effect::Run(effect) => effect,
        };
        if self.stages.is_empty()
            && let Some((stages, weights)) = self.shared.parts.lock().expect("parts").clone()
        {
            self.stages = stages;
            self.weights = weights;
        }
        match effect {
            run::Effect::SendReadyAck {
                node,
                agent,
                run_id,
                stage,
                readiness_id,
            } => {
                // The agents acknowledged are the pipeline's, also after a
                // repair replaced one.
                if let Some(slot) = self.stages.get_mut(stage as usize) {
                    *slot = (node.clone(), agent.clone());
                }
                self.send(
                    &node,
                    &agent,
                    Frame::ReadyAck {
                        run_id,
                        readiness_id,
                    },
                );
            }
            run::Effect::Enlist { node, agent, stage } => {
                let run_id = self.shared.run_id;
                self.shared.membership_event(
                    &node,
                    format!("{node}: its agent {agent} is told to run stage {stage}"),
                );
                self.send(&node, &agent, Frame::Pipeline { run_id, stage });
            }
            run::Effect::Repairing {
                cause,
                repair,
                request,
            } => self.repairing(&cause, repair, request),
            run::Effect::Repaired { repair, resumed } => self.repaired(repair, resumed),
            run::Effect::OpenTokenEndpoints => self.open_token_endpoints(),
            run::Effect::ProvisionStage {
                node,
                agent,
                provision,
            } => {
                self.shared.update(|s| s.loading(provision.stage));
                let (stage, layers) = (provision.stage, provision.layers);
                let line = if self.shared.json {
                    serde_json::json!({"event": "stage", "node": node.as_str(), "stage": stage, "layers": layers.to_string(), "state": "loading"}).to_string()
                } else {
                    format!("{node}: stage {stage} provisioned, loading layers {layers}")
                };
                crate::up::view::println_flush(&line);
                self.provision(&node, &agent, provision);
            }
            run::Effect::OpenPromptService { op } => self.open_prompt(op).await,
            run::Effect::Inject {
                request,
                seq,
                pos,
                tokens,
            } => self.inject(request, seq, pos, tokens),
            run::Effect::Prompt { request, event } => self.shared.tell(request, event),
            run::Effect::StopStage { node, stage } => {
                if let Some((_, agent)) = self.stages.get(stage as usize) {
                    let run_id = self.shared.run_id;
                    self.send(&node, agent, Frame::StopStage { run_id, stage });
                }
            }
            run::Effect::CloseTokenEndpoints => {
                self.token_in.lock().expect("token in").close();
                if let Some(out) = self.token_out.take() {
                    out.abort();
                }
                let run_id = self.shared.run_id;
                self.input(run::Input::TokenEndpointsClosed { run_id });
            }
            run::Effect::Finished(result) => {
                *self.shared.outcome.lock().expect("outcome") = Some(result);
                self.shared.done.send_replace(true);
                self.close();
            }
        }
    }
}
