//! The machines as the effect loops see them, with the world's checkers
//! looking over their shoulder: every transition is folded into the digest
//! and the transcript, judged by tier 1's oracle, and followed by the
//! machine's own invariants. A panic is a violation, not a crash of the
//! world.

use super::shared::{Control, STEP_MAX, Shared, State};
use conformance::run::RunFault;
use core_fsm::Machine;
use core_fsm::agent;
use core_fsm::orchestrator::Orchestrator;
use core_fsm::pipeline;
use core_fsm::port::{self, JournalRecord};
use core_fsm::run;
use core_fsm::time::Instant;
use sim::run_world::kit::{debug_head, phase_label};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// The orchestrator composite (with its pipeline host) of incarnation
/// `inc`.
pub struct HostSeen {
    /// The machine.
    pub machine: Orchestrator,
    /// The world.
    pub shared: Arc<Shared>,
    /// The incarnation.
    pub inc: u32,
    /// Whether this incarnation began the run.
    pub begun: bool,
}

/// Stage `stage`'s agent of generation `generation`, pipeline side
/// `incarnation`.
pub struct AgentSeen {
    /// The machine.
    pub machine: agent::Machine,
    /// The world.
    pub shared: Arc<Shared>,
    /// The stage.
    pub stage: u32,
    /// The agent's generation.
    pub generation: u32,
    /// Its pipeline side's incarnation.
    pub incarnation: u32,
}

/// Runs one transition of `m` under the checkers; `None` after a panic.
fn guarded<M: Machine>(
    w: &mut State,
    m: &mut M,
    now: Instant,
    input: M::Input,
) -> Option<Vec<M::Effect>> {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let effects = m.handle(now, input);
        m.check_invariants();
        effects
    }));
    match result {
        Ok(effects) => Some(effects),
        Err(panic) => {
            w.violate("RW0", conformance::backend::panic_text(&*panic));
            None
        }
    }
}

impl Machine for HostSeen {
    type Input = port::Input;
    type Effect = port::Effect;

    fn handle(&mut self, now: Instant, input: port::Input) -> Vec<port::Effect> {
        let shared = Arc::clone(&self.shared);
        let mut w = shared.lock();
        if w.violation.is_some() || w.inc != self.inc {
            return Vec::new();
        }
        w.now_ms = now.as_millis();
        if let port::Input::Pipeline(input) = &input {
            w.oracle.host_input(input);
        }
        let who = format!("host#{} <-", self.inc);
        w.record(now.as_millis(), &who, &input);
        let Some(effects) = guarded(&mut w, &mut self.machine, now, input) else {
            return Vec::new();
        };
        for effect in &effects {
            w.record(now.as_millis(), "host ->", effect);
            match effect {
                port::Effect::Pipeline(effect) => {
                    if let Err((id, what)) = w.oracle.host_effect(effect) {
                        w.violate(id, what);
                        return Vec::new();
                    }
                }
                // The composite replaces a failed node (Bounded policy).
                port::Effect::Persist(JournalRecord::ReplaceRequested { .. }) => {
                    w.coverage.labels.insert("composite:replaced".to_owned());
                }
                _ => {}
            }
        }
        w.host = self.machine.pipeline().cloned();
        after_step(&mut w);
        host_after(&mut w);
        self.begin_when_ready(&mut w);
        drop(w);
        shared.wake.notify_one();
        effects
    }

    fn next_deadline(&self) -> Option<Instant> {
        let w = self.shared.lock();
        if w.violation.is_some() || w.inc != self.inc {
            return None;
        }
        self.machine.next_deadline()
    }

    fn check_invariants(&self) {
        self.machine.check_invariants();
    }
}

impl HostSeen {
    /// The run begins as `drover up` begins it: once, when the composite
    /// is settled and every planned node is ready.
    fn begin_when_ready(&mut self, w: &mut State) {
        let stages = w.slots.len();
        let ready = self.machine.is_settled()
            && self.machine.nodes().filter(|m| m.is_ready()).count() == stages;
        if ready && !std::mem::replace(&mut self.begun, true) {
            let config = sim::run_world::kit::run_config(&w.case.profile);
            w.to_host(pipeline::Input::Begin(Box::new(config)));
        }
    }
}

impl Machine for AgentSeen {
    type Input = agent::Input;
    type Effect = agent::Effect;

    fn handle(&mut self, now: Instant, input: agent::Input) -> Vec<agent::Effect> {
        let shared = Arc::clone(&self.shared);
        let mut w = shared.lock();
        let s = self.stage as usize;
        let current = w.slots[s].alive
            && w.slots[s].generation == self.generation
            && w.slots[s].incarnation == self.incarnation;
        if w.violation.is_some() || !current {
            return Vec::new();
        }
        w.now_ms = now.as_millis();
        let who = format!(
            "agent {}.{}.{} <-",
            self.stage, self.generation, self.incarnation
        );
        w.record(now.as_millis(), &who, &input);
        let Some(effects) = guarded(&mut w, &mut self.machine, now, input) else {
            return Vec::new();
        };
        let life = (
            self.stage,
            self.generation,
            self.incarnation,
            self.machine.reprovisions(),
        );
        for effect in &effects {
            w.record(now.as_millis(), "agent ->", effect);
            if let Err((id, what)) = w.oracle.agent_effect(life, effect) {
                w.violate(id, what);
                return Vec::new();
            }
        }
        let label = format!("agent:{}", debug_head(self.machine.phase()));
        w.coverage.labels.insert(label);
        if self.machine.respawns() > 0 {
            w.coverage.labels.insert("agent:respawned".to_owned());
        }
        for stage in self.machine.stages().values() {
            let label = format!("stage:{}", debug_head(stage.phase()));
            w.coverage.labels.insert(label);
        }
        w.slots[s].agent = Some(self.machine.clone());
        after_step(&mut w);
        drop(w);
        shared.wake.notify_one();
        effects
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.shared.lock().violation.is_some() {
            return None;
        }
        self.machine.next_deadline()
    }

    fn check_invariants(&self) {
        self.machine.check_invariants();
    }
}

fn after_step(w: &mut State) {
    w.step += 1;
    let digest = w.digest.0;
    w.step_digests.push(digest);
    if w.step > STEP_MAX {
        w.violate("RW8", format!("runaway: more than {STEP_MAX} steps"));
    }
}

/// After a host step: the run's phase label, its end, a planned crash of
/// the orchestrator, and the operator's stop once every client has its
/// answer.
fn host_after(w: &mut State) {
    let Some(phase) = w
        .host
        .as_ref()
        .and_then(|h| h.run())
        .map(|r| r.phase().clone())
    else {
        return;
    };
    w.coverage
        .labels
        .insert(format!("run:{}", phase_label(&phase)));
    if w.ended_at.is_none() && phase.is_terminal() {
        w.ended_at = Some(w.now_ms);
    }
    // The orchestrator crashes when the run first reaches a planned phase.
    let at = conformance::run::crash_point(&phase);
    let fault = RunFault::OrchestratorCrash;
    if let Some(at) = at
        && !w.fired.contains(&fault)
        && w.planned(fault, at).is_some()
    {
        w.fired.insert(fault);
        w.inject(fault);
        w.ask(Control::CrashOrchestrator);
        return;
    }
    let serving = matches!(phase, run::Phase::Serving(_));
    if serving
        && w.submitted == w.case.profile.requests
        && !w.shutdown_sent
        && w.oracle.all_answered()
        && w.ended_at.is_none()
    {
        w.shutdown_sent = true;
        let at = w.now_ms;
        w.note(
            at,
            "world: every client has its answer; the operator stops the run",
        );
        w.to_host(pipeline::Input::Run(run::Input::Shutdown));
    }
}
