//! The pipeline: a model split across the run's nodes, one stage per node,
//! serving prompts (SPEC.md "The pipeline in the real runtime").
//!
//! - [`spec`]: the plan's sections; [`model`]: the model on the
//!   orchestrator, its digests and its byte ranges served over iroh;
//! - [`host`]: the orchestrator side, the effects of `core_fsm::pipeline`
//!   (run and membership), a child of the composite, in `up`'s loop;
//! - [`node`]: the node side, `core_fsm::agent` through the same loop, with
//!   [`worker`] (the `drover-worker stage` child), [`fetch`] (slice-only
//!   weights and their cache) and [`edges`] (activation and token edges),
//!   the agent and its worker's serving thread on one processor ([`pin`]);
//! - [`wire`]: what travels on the pipeline's connections.

pub mod download;
pub mod edges;
mod every;
pub mod fetch;
pub mod host;
pub mod lives;
pub mod model;
pub mod node;
pub mod pin;
mod prepared;
pub mod shared;
pub mod spec;
pub mod status;
pub mod wire;
pub mod worker;

pub use prepared::{PrepareError, Prepared, model_file, prepare};

use crate::transport::ControlPlane;
use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
use core_fsm::port::Input;
use core_fsm::run;
use core_fsm::time::Duration;
use host::{HostShared, HostSink};
use model::Model;
use spec::PipelineSpec;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Most steps of one prompt in flight at once: a prompt travels in this
/// many chunks (more only where a chunk would not fit a frame), so that
/// stage `k + 1` computes chunk `i` while stage `k` computes chunk `i + 1`;
/// each stage's inbound ring holds them, and each stage reads no more
/// ahead of what it executes (`node/backlog.rs`).
pub const PREFILL_IN_FLIGHT: u64 = 8;

/// The smallest chunk a prompt is cut into (shorter prompts go whole).
pub const PREFILL_CHUNK_MIN: usize = 32;

/// Bytes of a step frame besides its activations (the step's numbers and
/// the frame's own header), with room to spare.
const STEP_FRAME_SLACK: usize = 4096;

/// Most tokens one chunk may carry: its activations (`embedding` f32s a
/// token) must fit one edge frame and one frame of the worker's pipes.
pub fn chunk_tokens_max(embedding: usize) -> usize {
    let frame = wire::EDGE_FRAME_MAX.min(workers::wire::MAX_FRAME_BYTES as usize);
    ((frame - STEP_FRAME_SLACK) / (4 * embedding.max(1))).max(1)
}

/// How a prompt of `len` tokens is cut into chunks for a model of
/// `embedding` values a token, none over `most` tokens (the plan's
/// `prefill_chunk`; 0: no bound but the frame's): their lengths, in order
/// (`core_fsm::run::prefill_chunks` with this runtime's sizes).
pub fn prefill_chunks(len: usize, embedding: usize, most: u32) -> Vec<usize> {
    let fit = chunk_tokens_max(embedding);
    let max = match most {
        0 => fit,
        most => fit.min(most as usize),
    };
    core_fsm::run::prefill_chunks(len, PREFILL_CHUNK_MIN, PREFILL_IN_FLIGHT as usize, max)
}

/// The context a run serves, and its workers' caches hold: the plan's
/// (`0`: the model's), at most the model's.
pub fn run_context(plan_ctx: u32, model_ctx: u32) -> u32 {
    match plan_ctx {
        0 => model_ctx,
        ctx => ctx.min(model_ctx),
    }
}

/// A pipeline host input, as the composite takes it.
pub fn host_input(input: core_fsm::pipeline::Input) -> Input {
    Input::Pipeline(Box::new(input))
}

/// A run input, as the composite takes it.
pub fn run_input(input: run::Input) -> Input {
    host_input(core_fsm::pipeline::Input::Run(input))
}

/// The composite's input and the host's shared state, as the tap reaches
/// them.
type TapTarget = (mpsc::Sender<Input>, Arc<HostShared>);

/// Where control-plane events of a running pipeline go.
#[derive(Clone, Default)]
pub struct Tap {
    inner: Arc<Mutex<Option<TapTarget>>>,
}

impl Tap {
    /// A pipeline frame of `agent`.
    pub async fn frame(
        &self,
        agent: AgentId,
        node: LogicalNodeId,
        frame: crate::transport::wire::Frame,
    ) {
        let target = self.inner.lock().expect("tap").clone();
        if let Some((tx, shared)) = target
            && let Some(input) = shared.frame_input(agent, node, frame)
        {
            let _ = tx.send(input).await;
        }
    }

    /// A heartbeat of `agent` (dropped when the loop is busy: membership
    /// only needs one now and then).
    pub fn heartbeat(&self, agent: AgentId, node: LogicalNodeId) {
        let target = self.inner.lock().expect("tap").clone();
        if let Some((tx, shared)) = target {
            (shared.on_heartbeat)(&node);
            let input = core_fsm::membership::Input::Heartbeat { node, agent };
            let _ = tx.try_send(host_input(core_fsm::pipeline::Input::Membership(input)));
        }
    }

    /// The operator's drill: `node`'s agent is to die as a crash would
    /// (`core_fsm::pipeline::Input::Kill`). False when no host runs or the
    /// loop's queue is full.
    pub fn kill(&self, node: LogicalNodeId) -> bool {
        let target = self.inner.lock().expect("tap").clone();
        target.is_some_and(|(tx, _)| {
            tx.try_send(host_input(core_fsm::pipeline::Input::Kill { node }))
                .is_ok()
        })
    }

    /// `agent`'s control connection ended: membership holds it Suspect.
    pub async fn connection_lost(&self, agent: AgentId, node: LogicalNodeId) {
        let target = self.inner.lock().expect("tap").clone();
        if let Some((tx, _)) = target {
            let input = core_fsm::membership::Input::ConnectionLost { node, agent };
            let _ = tx
                .send(host_input(core_fsm::pipeline::Input::Membership(input)))
                .await;
        }
    }
}

/// What `up`'s view hears from the host.
pub struct ViewHooks {
    /// Lines for machines (`--json`).
    pub json: bool,
    /// A client's `Shutdown` request.
    pub stop: mpsc::Sender<()>,
    /// A node's liveness changed.
    pub liveness: host::LivenessHook,
    /// A node's agent heartbeated.
    pub heartbeat: Box<dyn Fn(&LogicalNodeId) + Send + Sync>,
    /// Where prompt-serving events are written (the `prompt` channel).
    pub datastream: Option<crate::datastream::Hub>,
}

/// The pipeline host's runtime side: the composite owns the host
/// (`Config::membership`); this carries out its effects ([`HostSink`],
/// which `up`'s sink is given) and feeds it control-plane events and
/// prompt calls through the composite's channel.
pub struct Running {
    /// The composite's inputs (a stop is `run_input(Shutdown)`).
    pub tx: mpsc::Sender<Input>,
    /// Its shared state.
    pub shared: Arc<HostShared>,
    control: Arc<ControlPlane>,
}

/// Connects the host's runtime side to the composite's channel `tx`; its
/// liveness changes go to `views.liveness`, and a client's `Shutdown` to
/// `views.stop`. Returns it with the sink of the host's effects.
pub fn start(
    run_id: RunId,
    control: Arc<ControlPlane>,
    state_dir: &Path,
    tap: &Tap,
    views: ViewHooks,
    spec: Option<(Arc<Model>, PipelineSpec)>,
    tx: mpsc::Sender<Input>,
) -> (Running, HostSink) {
    let (model, spec) = match spec {
        Some((model, spec)) => (Some(model), Some(spec)),
        None => (None, None),
    };
    let mut shared = HostShared::new(run_id, control.clone(), model, spec, state_dir.to_owned());
    shared.json = views.json;
    let stop = views.stop;
    shared.on_liveness = views.liveness;
    shared.on_heartbeat = views.heartbeat;
    shared.datastream = views.datastream;
    let shared = Arc::new(shared);
    *tap.inner.lock().expect("tap") = Some((tx.clone(), shared.clone()));
    let (calls_tx, mut calls_rx) = mpsc::channel(64);
    let call_shared = shared.clone();
    let call_tx = tx.clone();
    tokio::spawn(async move {
        while let Some(call) = calls_rx.recv().await {
            if matches!(call, crate::prompt::Call::Shutdown { .. }) {
                let _ = stop.send(()).await;
                continue;
            }
            if let Some(input) = call_shared.call_input(call)
                && call_tx.send(input).await.is_err()
            {
                return;
            }
        }
    });
    let sink = HostSink::new(shared.clone(), tx.clone(), calls_tx);
    let running = Running {
        tx,
        shared,
        control,
    };
    (running, sink)
}

impl Running {
    /// Begins the run of `prepared` on the agents connected now.
    pub async fn begin(&self, prepared: &Prepared, run_id: RunId) {
        let control = &self.control;
        let connected: BTreeMap<LogicalNodeId, AgentId> = control
            .connected()
            .into_iter()
            .map(|(agent, node)| (node, agent))
            .collect();
        let nodes: Vec<LogicalNodeId> = prepared.plan.iter().map(|a| a.node.clone()).collect();
        let stages: Vec<(LogicalNodeId, AgentId)> = nodes
            .iter()
            .map(|n| {
                let agent = connected.get(n).cloned();
                (n.clone(), agent.unwrap_or_else(|| AgentId::new("absent")))
            })
            .collect();
        let stages_status = prepared
            .plan
            .iter()
            .zip(&prepared.weights)
            .map(|(a, w)| status::StageStatus {
                stage: a.stage,
                node: a.node.to_string(),
                layers: a.layers.to_string(),
                slice_bytes: w.slice_bytes + w.header_len,
                fetched_bytes: 0,
                state: "waiting".to_owned(),
            })
            .collect();
        let default_max_tokens = prepared.spec.default_max_tokens;
        self.shared.update(|s| {
            s.stages = stages_status;
            s.default_max_tokens = default_max_tokens;
        });
        *self.shared.parts.lock().expect("parts") =
            Some((stages.clone(), prepared.weights.clone()));
        let context = run_context(prepared.spec.ctx, prepared.model.context());
        let config = run::Config {
            run_id,
            orchestrator: control.id(),
            model_id: prepared.model.digest.clone(),
            layers: prepared.model.layers(),
            stages: nodes.len() as u32,
            nodes: nodes.clone(),
            split: prepared.spec.split.clone(),
            readiness_timeout: Duration::from_secs(60),
            ack_retry_interval: Duration::from_secs(1),
            ack_attempts_max: 10,
            ack_timeout: Duration::from_secs(15),
            weights_timeout: Duration::from_secs(600),
            stage_ready_timeout: Duration::from_secs(60),
            prompt_open_timeout: Duration::from_secs(10),
            token_timeout: Duration::from_secs(120),
            // A prefill of 512 tokens may take 4 more minutes: a CPU stage
            // of a big model, or one sharing its cores, is slow, not stuck
            // (a dead node is found by its heartbeats, not by this).
            prefill_per_token: Duration::from_millis(500),
            queue_max: 16,
            context,
            stop_timeout: Duration::from_secs(20),
            repairs_max: prepared.repairs_max,
            // A replacement is found Dead (5 s by default), leased,
            // bootstrapped and joined: minutes on a rented host.
            repair_timeout: Duration::from_secs(600),
        };
        let (conns_tx, conns_rx) = mpsc::channel(16);
        control.route(wire::WEIGHTS_ALPN, conns_tx);
        tokio::spawn(prepared.model.clone().serve(conns_rx));
        // The run tells each node's agent its stage (`Enlist`) once
        // membership holds it Alive.
        let begin = core_fsm::pipeline::Input::Begin(Box::new(config));
        let _ = self.tx.send(host_input(begin)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_cut_into_at_most_the_chunks_in_flight() {
        // TinyStories 260K: 64 values a token.
        assert_eq!(prefill_chunks(5, 64, 0), [5]);
        assert_eq!(prefill_chunks(32, 64, 0), [32]);
        assert_eq!(prefill_chunks(33, 64, 0), [17, 16]);
        assert_eq!(prefill_chunks(200, 64, 0).len(), 7);
        let long = prefill_chunks(5000, 64, 0);
        assert_eq!(long.len(), PREFILL_IN_FLIGHT as usize);
        assert_eq!(long.iter().sum::<usize>(), 5000);
        assert!(prefill_chunks(0, 64, 0).is_empty());
    }

    #[test]
    fn the_plans_prefill_chunk_bounds_every_chunk() {
        // Under the 32-token floor too: 200 tokens of at most 4 in 50.
        let small = prefill_chunks(200, 64, 4);
        assert_eq!(small, [4; 50]);
        assert_eq!(prefill_chunks(200, 64, 100), [29, 29, 29, 29, 29, 29, 26]);
        assert_eq!(prefill_chunks(3, 64, 4), [3]);
        // The frame's bound holds under a larger one.
        let fit = chunk_tokens_max(4096);
        let wide = prefill_chunks(40_000, 4096, u32::MAX);
        assert_eq!(wide, prefill_chunks(40_000, 4096, 0));
        assert!(wide.iter().all(|&n| n <= fit), "{wide:?}");
    }

    /// A 4096-wide model's 40,000-token prompt: in 8 chunks, each would
    /// carry 80 MiB of activations, over the frames' 64 MiB; so it goes in
    /// more, each of whose step frames (encoded as the edge sends it) fits.
    #[tokio::test]
    async fn a_wide_models_long_prompt_goes_in_chunks_that_fit_a_frame() {
        let embedding = 4096;
        let chunks = prefill_chunks(40_000, embedding, 0);
        assert!(chunks.len() > PREFILL_IN_FLIGHT as usize, "{chunks:?}");
        assert_eq!(chunks.iter().sum::<usize>(), 40_000);
        let largest = *chunks.iter().max().expect("chunks");
        let step = wire::Step {
            step: u64::MAX,
            request: u64::MAX,
            seq: u64::MAX,
            pos: u32::MAX,
            payload: wire::Payload::Activations(vec![1.5; largest * embedding]),
            last: true,
        };
        let mut frame = Vec::new();
        wire::write(&mut frame, &wire::EdgeFrame::Step(step))
            .await
            .expect("fits an edge frame");
        let request = workers::wire::Request::Forward {
            seq: u64::MAX,
            pos: u32::MAX,
            input: workers::wire::Input::Activations(vec![1.5; largest * embedding]),
            output: workers::wire::OutputKind::LastLogits,
        };
        let mut bytes = Vec::new();
        workers::wire::write_frame(&mut bytes, &request).expect("fits the worker's frame");
    }

    #[test]
    fn a_runs_context_is_the_plans_within_the_models() {
        assert_eq!(run_context(0, 4096), 4096);
        assert_eq!(run_context(2048, 4096), 2048);
        assert_eq!(run_context(8192, 4096), 4096);
    }
}
