//! The system under test as the driver sees it, with the world's checkers
//! looking over its shoulder: every transition (time, incarnation, input,
//! effects) is folded into this tier's digest, fed to the kit's oracle and
//! coverage, and the system's own invariants and node records are checked
//! after it. A panic in the system is a violation, not a crash of the world.

use crate::state::{STEP_MAX, World, WorldState};
use conformance::System;
use conformance::liveness::Settle;
use conformance::oracle::Observation;
use core_fsm::Machine;
use core_fsm::port::{Effect, Input};
use core_fsm::time::Instant;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// `S` wrapped for the driver of incarnation `inc`.
pub struct Observed<S> {
    sys: S,
    world: Arc<World>,
    inc: u32,
}

impl<S: System> Observed<S> {
    /// Wraps incarnation `inc`'s system.
    pub fn new(sys: S, world: Arc<World>, inc: u32) -> Observed<S> {
        Observed { sys, world, inc }
    }

    /// The system.
    pub fn system(&self) -> &S {
        &self.sys
    }
}

impl<S: System> Machine for Observed<S> {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let world = Arc::clone(&self.world);
        let mut w = world.lock();
        if w.violation.is_some() {
            // The run is over; the supervisor stops it.
            return Vec::new();
        }
        w.step += 1;
        w.now_ms = now.as_millis();
        let (step, inc) = (w.step, self.inc);
        w.oracle.at(step, now.as_millis());
        w.observe(now, Observation::Delivered(&input));
        let pair = (
            conformance::coverage::stage_of_input(&input, &w.op_node, &w.stages),
            input.kind(),
        );
        w.coverage.pairs.insert(pair);
        let line = w.transcript.as_ref().map(|_| input.to_string());
        w.digest.update_debug(&(now, inc, &input));
        let sys = &mut self.sys;
        let effects = match catch_unwind(AssertUnwindSafe(|| sys.handle(now, input))) {
            Ok(effects) => effects,
            Err(panic) => {
                w.violate(
                    now,
                    "W7",
                    format!(
                        "handle panicked: {}",
                        conformance::backend::panic_text(&*panic)
                    ),
                );
                world.wake.notify_one();
                return Vec::new();
            }
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| sys.check_invariants())) {
            w.violate(
                now,
                "W8",
                format!(
                    "check_invariants: {}",
                    conformance::backend::panic_text(&*panic)
                ),
            );
            world.wake.notify_one();
            return Vec::new();
        }
        w.digest.update_debug(&effects);
        let digest = w.digest.0;
        w.step_digests.push(digest);
        for effect in &effects {
            w.observe(now, Observation::Emitted(effect));
            track(&mut w, effect);
        }
        if let (Some(t), Some(line)) = (w.transcript.as_mut(), line) {
            let out: Vec<String> = effects.iter().map(Effect::to_string).collect();
            let arrow = if out.is_empty() { "" } else { " => " };
            t.push(format!(
                "t={} #{inc} <- {line}{arrow}{}",
                now.as_millis(),
                out.join(" | ")
            ));
        }
        after_step(&mut w, &self.sys, now);
        if w.step > STEP_MAX {
            w.violate(now, "L3", format!("runaway: more than {STEP_MAX} steps"));
        }
        world.wake.notify_one();
        effects
    }

    fn next_deadline(&self) -> Option<Instant> {
        // Once the run has its verdict the system is not asked again; a
        // deadline it can no longer clear would spin the loop forever.
        if self.world.lock().violation.is_some() {
            return None;
        }
        self.sys.next_deadline()
    }

    fn check_invariants(&self) {
        // Checked inside `handle`, where a panic becomes a violation.
    }
}

/// Checks every node record, refreshes the settled flags and probes.
fn after_step<S: System>(w: &mut WorldState, sys: &S, now: Instant) {
    let mut failed = None;
    let WorldState {
        oracle,
        coverage,
        stages,
        ..
    } = w;
    sys.visit_nodes(&mut |view| {
        coverage.stages.insert(view.stage);
        stages.insert(view.node.clone(), view.stage);
        if failed.is_none() {
            failed = oracle.node(view).err();
        }
    });
    sys.probe_labels(&mut |label| {
        if !coverage.labels.contains(label) {
            coverage.labels.insert(label.to_owned());
        }
    });
    w.settle = Settle::of(sys);
    if let Some(v) = failed {
        w.violate(now, v.id, v.message);
    }
}

/// Remembers which node an operation concerns (for coverage pairs).
fn track(w: &mut WorldState, effect: &Effect) {
    w.coverage.effects.insert(effect.kind());
    match effect {
        Effect::CreateLease { op, request } => {
            w.op_node.insert(*op, request.node.clone());
        }
        Effect::LookupEndpoint { op, lease } | Effect::DestroyLease { op, lease } => {
            if let Some(l) = w.provider.get(&lease.lease_id) {
                let node = l.node.clone();
                w.op_node.insert(*op, node);
            }
        }
        Effect::SshConnect {
            op,
            session,
            lease_id,
            ..
        } => {
            if let Some(l) = w.provider.get(lease_id) {
                let node = l.node.clone();
                w.session_node
                    .insert(*session, (node.clone(), lease_id.clone()));
                w.op_node.insert(*op, node);
            }
        }
        Effect::SshExec { op, session, .. } | Effect::SshClose { op, session } => {
            if let Some((node, _)) = w.session_node.get(session) {
                let node = node.clone();
                w.op_node.insert(*op, node);
            }
        }
        Effect::NodeChanged { stage, .. } => {
            w.coverage.stages.insert(*stage);
        }
        _ => {}
    }
}
