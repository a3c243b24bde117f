//! What the orchestrator's pipeline side shares between its effect sink,
//! the control-plane events and the prompt calls: the model, the run's
//! stages, each client's request and text, the status file.

use super::model::Model;
use super::spec::PipelineSpec;
use super::wire::{self};
use crate::prompt::{Call, ServerMsg};
use crate::transport::ControlPlane;
use crate::transport::wire::Frame;
use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
use core_fsm::membership::Liveness;
use core_fsm::port::Input;
use core_fsm::run::{self, PromptEvent, PromptFault, RequestId, RunError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use workers::tokenizer::Utf8Stream;

/// The run's stages (node and agent, in order) and their weights.
pub type RunParts = (Vec<(LogicalNodeId, AgentId)>, Vec<wire::WeightsRef>);

/// What the live view is told of a liveness change.
pub type LivenessHook = Box<dyn Fn(&LogicalNodeId, &AgentId, Liveness) + Send + Sync>;

/// One client request in flight.
struct Client {
    request_id: u64,
    events: mpsc::UnboundedSender<ServerMsg>,
    text: Utf8Stream,
}

/// What the sink, the event router and the prompt calls share.
pub struct HostShared {
    /// The run.
    pub run_id: RunId,
    /// The control plane (frames to agents, the endpoint).
    pub control: Arc<ControlPlane>,
    /// The model (a plan with a pipeline).
    pub model: Option<Arc<Model>>,
    /// The plan's pipeline section (a plan with a pipeline).
    pub spec: Option<PipelineSpec>,
    /// The state dir (the prompt address is written there).
    pub state_dir: PathBuf,
    /// Each agent's edge address, from its runtime-ready report.
    pub addrs: Mutex<BTreeMap<AgentId, String>>,
    /// How the run ended, once it has.
    pub outcome: Mutex<Option<Result<(), RunError>>>,
    /// Set once the run ended.
    pub(super) done: tokio::sync::watch::Sender<bool>,
    /// Lines for machines (`--json`), not people.
    pub json: bool,
    /// What `<state>/pipeline.json` shows.
    pub status: Mutex<super::status::PipelineStatus>,
    /// The run's stages (node and agent, in order) and their weights, set
    /// when the run begins.
    pub parts: Mutex<Option<RunParts>>,
    /// Told every liveness change (the live view).
    pub on_liveness: LivenessHook,
    /// Told every heartbeat (the live view's heartbeat age).
    pub on_heartbeat: Box<dyn Fn(&LogicalNodeId) + Send + Sync>,
    /// Where prompt-serving events go (the orchestrator's `prompt`
    /// channel); none: nowhere. Observational only: nothing reads it back.
    pub datastream: Option<crate::datastream::Hub>,
    clients: Mutex<BTreeMap<RequestId, Client>>,
    next_request: Mutex<u64>,
}

impl HostShared {
    /// The shared state of a new host.
    pub fn new(
        run_id: RunId,
        control: Arc<ControlPlane>,
        model: Option<Arc<Model>>,
        spec: Option<PipelineSpec>,
        state_dir: PathBuf,
    ) -> HostShared {
        let status = Mutex::new(super::status::PipelineStatus::new(&state_dir, Vec::new()));
        HostShared {
            status,
            parts: Mutex::new(None),
            on_liveness: Box::new(|_, _, _| {}),
            on_heartbeat: Box::new(|_| {}),
            run_id,
            control,
            model,
            spec,
            state_dir,
            addrs: Mutex::new(BTreeMap::new()),
            outcome: Mutex::new(None),
            done: tokio::sync::watch::channel(false).0,
            json: false,
            datastream: None,
            clients: Mutex::new(BTreeMap::new()),
            next_request: Mutex::new(0),
        }
    }

    /// Waits for the run's end; its outcome.
    pub async fn finished(&self) -> Result<(), RunError> {
        let mut done = self.done.subscribe();
        let _ = done.wait_for(|d| *d).await;
        self.outcome
            .lock()
            .expect("outcome")
            .clone()
            .unwrap_or(Ok(()))
    }

    /// The model; only a plan with a pipeline begins a run.
    pub(super) fn model(&self) -> &Model {
        self.model.as_deref().expect("a pipeline run has its model")
    }

    /// The pipeline section; only a plan with one begins a run.
    pub(super) fn spec(&self) -> &PipelineSpec {
        self.spec.as_ref().expect("a pipeline run has its spec")
    }

    /// A control-plane frame of an agent, as the host's input.
    pub fn frame_input(&self, agent: AgentId, node: LogicalNodeId, frame: Frame) -> Option<Input> {
        let input = match frame {
            Frame::RuntimeReady {
                run_id,
                stage,
                readiness_id,
                addr,
            } => {
                self.addrs
                    .lock()
                    .expect("addrs")
                    .insert(agent.clone(), addr);
                run::Input::RuntimeReady {
                    run_id,
                    node,
                    stage,
                    agent,
                    readiness_id,
                }
            }
            Frame::ReadyAcked {
                run_id,
                stage,
                readiness_id,
            } => run::Input::ReadyAcked {
                run_id,
                node,
                stage,
                agent,
                readiness_id,
            },
            Frame::StageReport(report) => {
                self.update(|s| s.report(&report));
                run::Input::Stage(report)
            }
            Frame::WeightsFetched {
                first_layer,
                end_layer,
                bytes,
                refetched,
            } => {
                let line = if self.json {
                    serde_json::json!({
                        "event": "weights", "node": node.as_str(), "layers": format!("{first_layer}..{end_layer}"),
                        "bytes_fetched": bytes, "refetched": refetched,
                    })
                    .to_string()
                } else if bytes == 0 {
                    format!("{node}: layers {first_layer}..{end_layer} from the node's cache")
                } else {
                    format!("{node}: layers {first_layer}..{end_layer}: {bytes} bytes fetched")
                };
                crate::up::view::println_flush(&line);
                self.update(|s| s.fetched(first_layer, bytes));
                return None;
            }
            Frame::WeightsFetching {
                first_layer,
                end_layer,
                bytes,
                total,
            } => {
                let line = if self.json {
                    serde_json::json!({
                        "event": "weights_progress", "node": node.as_str(),
                        "layers": format!("{first_layer}..{end_layer}"),
                        "bytes_fetched": bytes, "bytes_total": total,
                    })
                    .to_string()
                } else {
                    format!(
                        "{node}: layers {first_layer}..{end_layer}: {} of {} MiB fetched",
                        bytes >> 20,
                        total >> 20
                    )
                };
                crate::up::view::println_flush(&line);
                return None;
            }
            _ => return None,
        };
        Some(super::run_input(input))
    }

    /// A prompt-service call, as the host's input (or answered here).
    pub fn call_input(&self, call: Call) -> Option<Input> {
        match call {
            Call::Submit {
                request_id,
                text,
                max_tokens,
                events,
                ..
            } => {
                let prompt = self.model().tokenizer.encode(&text, true);
                let request = {
                    let mut next = self.next_request.lock().expect("next request");
                    *next += 1;
                    RequestId(*next)
                };
                let client = Client {
                    request_id,
                    events,
                    text: Utf8Stream::default(),
                };
                self.clients
                    .lock()
                    .expect("clients")
                    .insert(request, client);
                self.update(|s| s.submitted());
                self.prompt_event(format!(
                    "request {} accepted: {} prompt tokens, max_tokens {}",
                    request.0,
                    prompt.len(),
                    max_tokens.map_or("none".to_owned(), |m| m.to_string())
                ));
                // No cap named: EOS or the context ends it.
                let max_tokens = max_tokens.unwrap_or(0);
                Some(super::run_input(run::Input::Submit {
                    request,
                    prompt,
                    max_tokens,
                }))
            }
            Call::Shutdown { .. } => Some(super::run_input(run::Input::Shutdown)),
            // Its request runs to its end; what it says goes nowhere.
            Call::Disconnected { .. } => None,
        }
    }

    /// Changes the status file.
    pub fn update(&self, change: impl FnOnce(&mut super::status::PipelineStatus)) {
        let mut status = self.status.lock().expect("status");
        change(&mut status);
        status.write();
    }

    /// Writes `text` on the orchestrator's `prompt` channel.
    pub(super) fn prompt_event(&self, text: String) {
        if let Some(hub) = &self.datastream {
            hub.event(crate::datastream::channel::PROMPT, None, text);
        }
    }

    /// Writes `text` on the orchestrator's `membership` channel, about
    /// `node`.
    pub(super) fn membership_event(&self, node: &LogicalNodeId, text: String) {
        if let Some(hub) = &self.datastream {
            hub.event(crate::datastream::channel::MEMBERSHIP, Some(node), text);
        }
    }

    /// Tells a request's client what happened.
    pub(super) fn tell(&self, request: RequestId, event: PromptEvent) {
        match &event {
            PromptEvent::Token { .. } => {
                let mut status = self.status.lock().expect("status");
                status.token(request.0);
            }
            PromptEvent::Done { tokens, reason } => {
                self.update(|s| s.ended(request.0, true));
                self.prompt_event(format!(
                    "request {} completed: {tokens} tokens, reason {reason:?}",
                    request.0
                ));
            }
            PromptEvent::Fault(fault) => {
                self.update(|s| s.ended(request.0, false));
                self.prompt_event(format!(
                    "request {} faulted: {}",
                    request.0,
                    fault_text(fault)
                ));
            }
        }
        let mut clients = self.clients.lock().expect("clients");
        let Some(client) = clients.get_mut(&request) else {
            return;
        };
        let request_id = client.request_id;
        let message = match event {
            PromptEvent::Token { token, .. } => {
                if self.model().tokenizer.is_eog(token) {
                    return;
                }
                let text = client.text.push(self.model().tokenizer.piece(token, false));
                if text.is_empty() {
                    return;
                }
                ServerMsg::TextDelta { request_id, text }
            }
            PromptEvent::Done { tokens, reason } => {
                let rest = client.text.finish();
                if !rest.is_empty() {
                    let _ = client.events.send(ServerMsg::TextDelta {
                        request_id,
                        text: rest,
                    });
                }
                ServerMsg::Done {
                    request_id,
                    tokens,
                    reason: reason.into(),
                }
            }
            PromptEvent::Fault(fault) => ServerMsg::Fault {
                request_id,
                reason: fault_text(&fault),
            },
        };
        let terminal = !matches!(message, ServerMsg::TextDelta { .. });
        let _ = client.events.send(message);
        if terminal {
            clients.remove(&request);
        }
    }
}

fn fault_text(fault: &PromptFault) -> String {
    match fault {
        PromptFault::QueueFull => "the queue is full; try again later".to_owned(),
        PromptFault::NotServing => "the pipeline is not serving".to_owned(),
        PromptFault::Invalid { reason } => format!("invalid request: {reason}"),
        PromptFault::Worker { reason } => format!("the worker failed: {reason}"),
        PromptFault::Timeout => "no token arrived in time".to_owned(),
        PromptFault::TokenSequence { expected, got } => {
            format!("token {got} arrived where {expected} was due")
        }
        PromptFault::Shutdown => "the run is stopping".to_owned(),
        PromptFault::RunFailed => "the run failed".to_owned(),
    }
}
