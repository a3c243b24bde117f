//! A node's worker child, as `runtime-real/src/pipeline/worker.rs` runs
//! it: a task of its own that says hello, then runs its jobs one at a
//! time, in order (the load, the steps), over a cache of the
//! stand-in model's rows. Its crash ends the task and is reported once.

use super::agent::Side;
use super::net::send;
use conformance::run::RunFault;
use core_fsm::agent::Input;
use core_fsm::ids::OpId;
use core_fsm::stage;
use madsim::task::JoinHandle;
use sim::run_world::kit::{Frame, forward};
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// What the worker is asked to do.
pub(super) enum Job {
    /// Load the stage's slice.
    Load,
    /// Run one step.
    Step(Step),
}

/// One step, as the agent hands it over.
pub(super) struct Step {
    seq: u64,
    frame: Frame,
    layers: stage::LayerRange,
    last: bool,
    ms: u64,
    crash: bool,
    fail: bool,
}

/// The agent's handle on its worker child.
pub(super) struct WorkerHandle {
    op: OpId,
    jobs: UnboundedSender<Job>,
    pub(super) task: JoinHandle<()>,
}

/// Starts a worker child (a new one replaces any before it).
pub(super) fn spawn(side: &Rc<Side>, op: OpId) {
    let (jobs, rx) = unbounded_channel();
    let task = madsim::task::spawn_local(run(Rc::clone(side), op, rx));
    let old = side
        .st
        .borrow_mut()
        .worker
        .replace(WorkerHandle { op, jobs, task });
    if let Some(old) = old {
        old.task.abort();
    }
    let _ = side.tx.send(Input::WorkerSpawned { op, result: Ok(()) });
}

/// Hands `job` to the worker; a load without one fails.
pub(super) fn submit(side: &Rc<Side>, job: Job) {
    let st = side.st.borrow();
    let queued = st.worker.as_ref().is_some_and(|w| w.jobs.send(job).is_ok());
    drop(st);
    if !queued {
        let reason = "the worker is gone".to_owned();
        side.answer(stage::Input::LoadFailed { reason });
    }
}

/// The stage executes step `seq`: the faults keyed on steps strike here.
pub(super) fn execute(side: &Rc<Side>, seq: u64) {
    let s = side.stage;
    let mut w = side.shared.lock();
    let nth = w.steps_executed;
    w.steps_executed += 1;
    let kth = w.slots[s as usize].stage_steps;
    w.slots[s as usize].stage_steps += 1;
    let once = |w: &super::shared::State, f: RunFault| {
        !w.fired.contains(&f) && w.planned(f, s) == Some(kth)
    };
    if once(&w, RunFault::AgentDiesMidRequest) {
        w.fired.insert(RunFault::AgentDiesMidRequest);
        drop(w);
        return side.die(RunFault::AgentDiesMidRequest);
    }
    if once(&w, RunFault::OperatorKill) {
        // The drill goes through the host, which kills the agent it
        // tracks; the step never runs.
        w.fired.insert(RunFault::OperatorKill);
        w.inject(RunFault::OperatorKill);
        w.to_host(core_fsm::pipeline::Input::Kill {
            node: sim::run_world::node_id(s),
        });
        return;
    }
    let p = &w.case.profile;
    let (stages, mut ms) = (p.stages.max(1), p.step_ms);
    if let Some(slow) = w.planned(RunFault::SlowStage, s) {
        w.inject(RunFault::SlowStage);
        ms += slow;
    }
    let mut st = side.st.borrow_mut();
    let frame = st.pending.remove(&seq);
    let layers = st.order.as_ref().map(|o| o.layers);
    let ready = st.outbound.is_some() && st.worker.is_some();
    drop(st);
    let (Some(frame), Some(layers), true) = (frame, layers, ready) else {
        let reason = format!("step {seq}: no input, outbound edge or worker");
        return side.answer(stage::Input::StepFailed { seq, reason });
    };
    let crash = w.due_once(RunFault::WorkerCrashStep, nth);
    let fail = !crash && w.due_once(RunFault::StepFails, nth);
    if crash {
        w.inject(RunFault::WorkerCrashStep);
    } else if fail {
        w.inject(RunFault::StepFails);
    }
    drop(w);
    let step = Step {
        seq,
        frame,
        layers,
        last: s + 1 == stages,
        ms,
        crash,
        fail,
    };
    submit(side, Job::Step(step));
}

async fn run(side: Rc<Side>, op: OpId, mut jobs: UnboundedReceiver<Job>) {
    let (spawn_ms, load_ms, context, crash_load) = {
        let w = side.shared.lock();
        let p = &w.case.profile;
        let crash = w.planned(RunFault::WorkerCrashLoad, side.stage).is_some();
        (p.spawn_ms, p.load_ms, p.context, crash)
    };
    madsim::time::sleep(Duration::from_millis(spawn_ms)).await;
    let _ = side.tx.send(Input::WorkerReady { op });
    let mut cache = Vec::new();
    let mut loaded = false;
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Load if loaded => side.answer(stage::Input::WeightsReady),
            Job::Load => {
                // The fetch began with the provision; the load follows it.
                let fetched = side.st.borrow().fetched_at;
                if let Some(at) = fetched {
                    madsim::time::sleep_until(side.clock.at(at)).await;
                }
                if crash_load {
                    side.shared.lock().inject(RunFault::WorkerCrashLoad);
                    madsim::time::sleep(Duration::from_millis(load_ms / 2)).await;
                    return exited(&side, op);
                }
                madsim::time::sleep(Duration::from_millis(load_ms)).await;
                loaded = true;
                side.answer(stage::Input::WeightsReady);
            }
            Job::Step(step) => {
                if step.crash {
                    madsim::time::sleep(Duration::from_millis(step.ms / 2)).await;
                    return exited(&side, op);
                }
                let mut result = forward(&mut cache, &step.frame, step.layers, step.last, context);
                if step.fail {
                    result = Err(format!("step {}: the worker faulted (injected)", step.seq));
                }
                madsim::time::sleep(Duration::from_millis(step.ms)).await;
                let seq = step.seq;
                match result {
                    Ok(None) => side.answer(stage::Input::StepCompleted { seq }),
                    Ok(Some(frame)) => {
                        // Completed first: the next step this output causes
                        // arrives only after the machine heard it.
                        side.answer(stage::Input::StepCompleted { seq });
                        let sent = side
                            .st
                            .borrow()
                            .outbound
                            .as_ref()
                            .is_some_and(|o| send(o, frame));
                        if !sent {
                            let reason = "the outbound edge is closed".to_owned();
                            side.answer(stage::Input::EdgeFault { reason });
                        }
                    }
                    Err(reason) => side.answer(stage::Input::StepFailed { seq, reason }),
                }
            }
        }
    }
}

/// The worker died: the agent's supervision reports it once.
fn exited(side: &Rc<Side>, op: OpId) {
    let mut st = side.st.borrow_mut();
    if st.worker.as_ref().is_some_and(|w| w.op == op) {
        st.worker = None;
    }
    drop(st);
    let reason = "the worker exited: signal 9 (injected)".to_owned();
    let _ = side.tx.send(Input::WorkerExited { op, reason });
}
