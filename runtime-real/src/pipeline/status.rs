//! `<state>/pipeline.json`: the pipeline's stages and serving figures, for
//! people and for the dashboard, rewritten (atomically) on every change.
//! Observational: nothing reads it back to decide anything.

use core_fsm::stage::Report;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One stage as the status shows it.
#[derive(Clone, Debug, Serialize)]
pub struct StageStatus {
    /// Its index.
    pub stage: u32,
    /// Its node.
    pub node: String,
    /// Its layers, `a..b`.
    pub layers: String,
    /// Header and tensor bytes of its slice.
    pub slice_bytes: u64,
    /// Bytes it fetched (0 when its cache held the slice).
    pub fetched_bytes: u64,
    /// `waiting`, `loading`, `loaded`, `ready`, `failed`, `stopped`.
    pub state: String,
}

/// Serving figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Serving {
    /// The active request (the run's id), if any.
    pub active: Option<u64>,
    /// Requests waiting behind it.
    pub queue: u64,
    /// Requests that ended Done.
    pub requests_done: u64,
    /// Requests that ended with a fault.
    pub requests_faulted: u64,
    /// Time to first token of the last request, in milliseconds.
    pub ttft_ms: Option<f64>,
    /// Repairs begun (a stage lost while serving, the pipeline rebuilt).
    pub repairs: u32,
    /// Whether a repair is rebuilding the pipeline now.
    pub repairing: bool,
    /// Decode speed of the last request (tokens after the first, per second).
    pub tokens_per_s: Option<f64>,
}

/// The whole file.
#[derive(Clone, Debug, Serialize)]
pub struct PipelineStatus {
    /// The stages, in order.
    pub stages: Vec<StageStatus>,
    /// Serving.
    pub serving: Serving,
    /// The prompt service's address, once open.
    pub prompt_addr: Option<String>,
    /// What `drover prompt` and `drover chat` ask for without
    /// `--max-tokens` (the plan's `[prompt] default_max_tokens`; 0: no cap).
    pub default_max_tokens: u32,
    #[serde(skip)]
    path: PathBuf,
    #[serde(skip)]
    started: Option<(u64, Instant, Option<Instant>, u64)>,
    #[serde(skip)]
    submitted: u64,
}

impl PipelineStatus {
    /// The status of `stages`, kept at `state_dir`'s status file.
    pub fn new(state_dir: &Path, stages: Vec<StageStatus>) -> PipelineStatus {
        PipelineStatus {
            stages,
            serving: Serving::default(),
            prompt_addr: None,
            default_max_tokens: 0,
            path: crate::state_dir::StateDir::at(state_dir).pipeline_status(),
            started: None,
            submitted: 0,
        }
    }

    /// Writes the file (a failure is only reported: the file is for people).
    pub fn write(&self) {
        let Ok(text) = serde_json::to_vec_pretty(self) else {
            return;
        };
        if let Err(e) = crate::provider::local::write_atomic(&self.path, &text) {
            crate::say::err!("drover: {}: {e}", self.path.display());
        }
    }

    fn set(&mut self, stage: u32, state: &str) {
        if let Some(s) = self.stages.get_mut(stage as usize) {
            s.state = state.to_owned();
        }
    }

    /// A stage was provisioned and loads its weights.
    pub fn loading(&mut self, stage: u32) {
        self.set(stage, "loading");
    }

    /// A stage's report.
    pub fn report(&mut self, report: &Report) {
        match report {
            Report::WeightsReady { stage, .. } => self.set(*stage, "loaded"),
            Report::StageReady { stage, .. } => self.set(*stage, "ready"),
            Report::StageFault {
                stage: Some(stage), ..
            } => self.set(*stage, "failed"),
            Report::StageStopped {
                stage: Some(stage), ..
            } => self.set(*stage, "stopped"),
            _ => {}
        }
    }

    /// A stage's slice arrived.
    pub fn fetched(&mut self, first_layer: u32, bytes: u64) {
        let layers = format!("{first_layer}..");
        if let Some(s) = self
            .stages
            .iter_mut()
            .find(|s| s.layers.starts_with(&layers))
        {
            s.fetched_bytes = bytes;
        }
    }

    /// Repair `repair` began.
    pub fn repairing(&mut self, repair: u32) {
        self.serving.repairs = repair;
        self.serving.repairing = true;
    }

    /// The repair ended: serving again.
    pub fn repaired(&mut self) {
        self.serving.repairing = false;
    }

    /// A request was accepted.
    pub fn submitted(&mut self) {
        self.submitted += 1;
        self.refresh_queue();
    }

    /// The run injected a request's prompt: its clock starts.
    pub fn started(&mut self, request: u64) {
        self.started = Some((request, Instant::now(), None, 0));
        self.serving.active = Some(request);
        self.refresh_queue();
    }

    /// A token of `request` arrived.
    pub fn token(&mut self, request: u64) {
        if let Some((r, start, first, count)) = &mut self.started
            && *r == request
        {
            *count += 1;
            if first.is_none() {
                *first = Some(Instant::now());
                self.serving.ttft_ms = Some(start.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }

    /// A request ended.
    pub fn ended(&mut self, request: u64, done: bool) {
        if done {
            self.serving.requests_done += 1;
        } else {
            self.serving.requests_faulted += 1;
        }
        if let Some((r, _, Some(first), count)) = self.started
            && r == request
            && count > 1
        {
            let secs = first.elapsed().as_secs_f64();
            if secs > 0.0 {
                self.serving.tokens_per_s = Some((count - 1) as f64 / secs);
            }
        }
        if self.serving.active == Some(request) {
            self.serving.active = None;
        }
        self.refresh_queue();
    }

    fn refresh_queue(&mut self) {
        let ended = self.serving.requests_done + self.serving.requests_faulted;
        let active = u64::from(self.serving.active.is_some());
        self.serving.queue = self.submitted.saturating_sub(ended + active);
    }
}
