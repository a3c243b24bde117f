//! The effect loop's step: one input into the composite, its effects
//! recorded, checked and queued, every node record checked, the tick
//! re-armed.

use super::{Event, World};
use conformance::System;
use conformance::oracle::Observation;
use core_fsm::port::{Effect, Input};
use std::panic::{AssertUnwindSafe, catch_unwind};

impl<S: System> World<'_, S> {
    /// Runs the effect loop until it blocks on a sync or has nothing to do.
    pub(super) fn pump(&mut self) {
        while self.violation.is_none() {
            let Some(orch) = self.orch.as_mut() else {
                return;
            };
            if orch.syncing {
                return;
            }
            if let Some(effect) = orch.pending.pop_front() {
                self.dispatch(effect);
            } else if let Some(input) = orch.inbox.pop_front() {
                self.step_input(input);
            } else {
                return;
            }
        }
    }

    /// Hands one input to the orchestrator and records the transition.
    fn step_input(&mut self, input: Input) {
        self.step += 1;
        self.oracle.at(self.step, self.now.as_millis());
        self.observe(Observation::Delivered(&input));
        let stage = conformance::coverage::stage_of_input(&input, &self.op_node, &self.stages);
        self.coverage.pairs.insert((stage, input.kind()));
        let line = self.transcript.as_ref().map(|_| input.to_string());
        self.fold(&(self.now, self.inc, &input));
        let now = self.now;
        let Some(orch) = self.orch.as_mut() else {
            return;
        };
        let handled = catch_unwind(AssertUnwindSafe(|| orch.sys.handle(now, input)));
        let effects = match handled {
            Ok(effects) => effects,
            Err(panic) => {
                return self.violate(
                    "W7",
                    format!(
                        "handle panicked: {}",
                        conformance::backend::panic_text(&*panic)
                    ),
                );
            }
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| orch.sys.check_invariants())) {
            return self.violate(
                "W8",
                format!(
                    "check_invariants: {}",
                    conformance::backend::panic_text(&*panic)
                ),
            );
        }
        self.fold(&effects);
        self.step_digests.push(self.digest.0);
        for effect in &effects {
            self.observe(Observation::Emitted(effect));
            self.track(effect);
        }
        if let (Some(t), Some(line)) = (self.transcript.as_mut(), line) {
            let out: Vec<String> = effects.iter().map(Effect::to_string).collect();
            t.push(format!(
                "t={} #{} <- {line}{}{}",
                now.as_millis(),
                self.inc,
                if out.is_empty() { "" } else { " => " },
                out.join(" | ")
            ));
        }
        if let Some(orch) = self.orch.as_mut() {
            orch.pending.extend(effects);
        }
        self.after_step();
    }

    /// Checks every node record and re-arms the tick.
    fn after_step(&mut self) {
        let Some(orch) = self.orch.as_mut() else {
            return;
        };
        let oracle = &mut self.oracle;
        let coverage = &mut self.coverage;
        let stages = &mut self.stages;
        let mut failed = None;
        orch.sys.visit_nodes(&mut |view| {
            coverage.stages.insert(view.stage);
            match stages.get_mut(view.node) {
                Some(stage) => *stage = view.stage,
                None => {
                    stages.insert(view.node.clone(), view.stage);
                }
            }
            if failed.is_none() {
                failed = oracle.node(view).err();
            }
        });
        orch.sys.probe_labels(&mut |label| {
            if !coverage.labels.contains(label) {
                coverage.labels.insert(label.to_owned());
            }
        });
        let deadline = orch.sys.next_deadline();
        let rearm = deadline.filter(|d| orch.armed != Some(*d));
        if let Some(d) = rearm {
            orch.armed = Some(d);
        }
        if let Some(v) = failed {
            self.violate(v.id, v.message);
        }
        if let Some(d) = rearm {
            let inc = self.inc;
            self.schedule(d, Event::Tick { inc });
        }
    }

    /// Folds a step's value into the digest: its serialized bytes, every
    /// field in a fixed layout. Formatting its text instead was a fifth of
    /// a tier-1 step (this took the standard scenario from about 2,290 to
    /// 2,620 seeds/s per core). Every port value serializes: they are
    /// journaled and traced.
    fn fold<T: serde::Serialize>(&mut self, value: &T) {
        let mut bytes = std::mem::take(&mut self.digest_bytes);
        bytes.clear();
        let bytes = postcard::to_extend(value, bytes).expect("a port value serializes");
        self.digest.update_words(&bytes);
        self.digest.update(b"\n");
        self.digest_bytes = bytes;
    }
}
