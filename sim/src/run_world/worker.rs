//! A node's worker child, as `runtime-real/src/pipeline/worker.rs` runs
//! it: one job at a time, in order (hello, load, steps), over a cache of
//! the stand-in model's rows; its crash is reported once by the agent's
//! supervision.

use super::edges::Frame;
use super::{Ev, RunWorld, model};
use conformance::run::RunFault;
use core_fsm::agent::Input;
use core_fsm::ids::OpId;
use core_fsm::stage;
use core_fsm::time::{Duration, Instant};

/// The worker child of one agent life.
#[derive(Clone, Debug)]
pub struct Worker {
    pub(super) op: OpId,
    pub(super) free_at: Instant,
    pub(super) cache: Vec<u64>,
    /// Whether its stage's slice is loaded.
    pub(super) loaded: bool,
}

/// A worker job's end.
#[derive(Clone, Debug)]
pub enum Job {
    /// The worker said hello.
    Hello,
    /// The load finished.
    Loaded,
    /// A step finished.
    Step {
        /// The step.
        seq: u64,
        /// Its output (none from the last stage for a chunk before a
        /// batch's last), or why it failed.
        result: Result<Option<Frame>, String>,
    },
    /// The worker crashed.
    Crash,
    /// The worker stopped on request.
    Reset,
}

impl RunWorld<'_> {
    /// Schedules a job on node `s`'s worker after the jobs before it.
    pub(super) fn job(&mut self, s: u32, start: Instant, ms: u64, job: Job) {
        let life = self.nodes[s as usize].life;
        let Some(w) = self.nodes[s as usize].worker.as_mut() else {
            return;
        };
        let done = start.max(w.free_at).max(self.now) + Duration::from_millis(ms);
        w.free_at = done;
        self.at_instant(done, Ev::Worker { node: s, life, job });
    }

    pub(super) fn execute(&mut self, s: u32, seq: u64, step_ms: u64) {
        let nth = self.steps_executed;
        self.steps_executed += 1;
        let kth = self.nodes[s as usize].stage_steps;
        self.nodes[s as usize].stage_steps += 1;
        // A death keyed on a stage's steps strikes once (a replacement
        // counts its steps from 0).
        let once = |w: &Self, f: RunFault| !w.fired.contains(&f) && w.planned(f, s) == Some(kth);
        if once(self, RunFault::AgentDiesMidRequest) {
            self.fired.insert(RunFault::AgentDiesMidRequest);
            self.inject(RunFault::AgentDiesMidRequest);
            self.die(s);
            return;
        }
        if once(self, RunFault::OperatorKill) {
            self.fired.insert(RunFault::OperatorKill);
            // The drill goes through the host, which kills the agent it
            // tracks (`host_effect`, `KillAgent`); the step never runs.
            self.inject(RunFault::OperatorKill);
            let kill = core_fsm::pipeline::Input::Kill {
                node: super::config::node_id(s),
            };
            self.at(Duration::ZERO, Ev::Host(kill));
            return;
        }
        let stages = self.case.profile.stages.max(1);
        let context = self.case.profile.context;
        let layers = self.nodes[s as usize].order.as_ref().map(|o| o.layers);
        let node = &mut self.nodes[s as usize];
        let step = node.pending.remove(&seq);
        let (Some(step), Some(_), Some(layers), true) =
            (step, node.outbound, layers, node.worker.is_some())
        else {
            let reason = format!("step {seq}: no input, outbound edge or worker");
            self.stage_answer(s, Duration::ZERO, stage::Input::StepFailed { seq, reason });
            return;
        };
        let Some(worker) = node.worker.as_mut() else {
            return;
        };
        let last = s + 1 == stages;
        let mut result = forward(&mut worker.cache, &step, layers, last, context);
        let mut ms = step_ms;
        if let Some(slow) = self.planned(RunFault::SlowStage, s) {
            self.inject(RunFault::SlowStage);
            ms += slow;
        }
        if self.due_once(RunFault::WorkerCrashStep, nth) {
            self.inject(RunFault::WorkerCrashStep);
            self.job(s, self.now, ms / 2, Job::Crash);
            return;
        }
        if self.due_once(RunFault::StepFails, nth) {
            self.inject(RunFault::StepFails);
            result = Err(format!("step {seq}: the worker faulted (injected)"));
        }
        self.job(s, self.now, ms, Job::Step { seq, result });
    }

    fn due_once(&mut self, fault: RunFault, nth: u32) -> bool {
        super::config::due_once(&self.faults, &mut self.fired, fault, nth)
    }

    /// A worker job of node `s` ended.
    pub(super) fn worker_done(&mut self, s: u32, life: u32, job: Job) {
        let node = &self.nodes[s as usize];
        if !node.alive || (node.life != life && !matches!(job, Job::Reset)) {
            return;
        }
        let op = node.worker.as_ref().map(|w| w.op);
        match job {
            Job::Hello => {
                if let Some(op) = op {
                    self.feed_agent(s, Input::WorkerReady { op });
                }
            }
            Job::Loaded => {
                if let Some(w) = self.nodes[s as usize].worker.as_mut() {
                    w.loaded = true;
                }
                self.feed_agent(
                    s,
                    Input::Stage {
                        stage: s,
                        input: stage::Input::WeightsReady,
                    },
                )
            }
            Job::Step { seq, result } => match result {
                Ok(None) => {
                    self.stage_answer(s, Duration::ZERO, stage::Input::StepCompleted { seq });
                }
                Ok(Some(frame)) => {
                    // Completed first: the next step this output causes can
                    // only arrive after the machine heard it (`worker.rs`).
                    self.stage_answer(s, Duration::ZERO, stage::Input::StepCompleted { seq });
                    let sent = match self.nodes[s as usize].outbound {
                        Some(conn) => self.send_frame(conn, frame),
                        None => false,
                    };
                    if !sent {
                        let reason = "the outbound edge is closed".to_owned();
                        self.stage_answer(s, Duration::ZERO, stage::Input::EdgeFault { reason });
                    }
                }
                Err(reason) => {
                    self.stage_answer(s, Duration::ZERO, stage::Input::StepFailed { seq, reason })
                }
            },
            Job::Crash => {
                let node = &mut self.nodes[s as usize];
                node.worker = None;
                node.life += 1;
                if let Some(op) = op {
                    let reason = "the worker exited: signal 9 (injected)".to_owned();
                    self.feed_agent(s, Input::WorkerExited { op, reason });
                }
            }
            Job::Reset => self.stage_answer(s, Duration::ZERO, stage::Input::WorkerRoleReset),
        }
    }
}

/// One forward step of a stage over its cache (`worker.rs` `run_step`):
/// truncate to the step's position, extend by its rows, and hand on rows
/// or, on the last stage, the token sampled after a batch's last chunk.
pub fn forward(
    cache: &mut Vec<u64>,
    step: &Frame,
    layers: stage::LayerRange,
    last: bool,
    context: u32,
) -> Result<Option<Frame>, String> {
    let Frame::Step {
        step: id,
        request,
        seq,
        pos,
        rows,
        last: last_chunk,
    } = step
    else {
        return Err("a token record on an activation edge".to_owned());
    };
    if *pos as usize > cache.len() {
        return Err(format!("position {pos} is past the cache"));
    }
    cache.truncate(*pos as usize);
    if context > 0 && *pos as usize + rows.len() > context as usize {
        return Err(format!("positions past the context of {context}"));
    }
    let out: Vec<u64> = rows
        .iter()
        .map(|r| model::layers(*r, layers.start, layers.end_exclusive))
        .collect();
    cache.extend(&out);
    Ok(match (last, *last_chunk) {
        (true, true) => Some(Frame::Token {
            step: *id,
            request: *request,
            seq: *seq,
            token: model::sample(cache),
        }),
        (true, false) => None,
        (false, last_chunk) => Some(Frame::Step {
            step: *id,
            request: *request,
            seq: *seq,
            pos: *pos,
            rows: out,
            last: last_chunk,
        }),
    })
}
