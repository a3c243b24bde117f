//! Planted bugs: the real composite with one guarantee broken on purpose.
//! Both tiers must fail them, with the same invariant, seed by seed; that is
//! how the tiers' verdicts are compared beyond "everything passes".

use conformance::{NodeView, System};
use core_fsm::Machine;
use core_fsm::ids::OpId;
use core_fsm::plan::RunPlan;
use core_fsm::port::{Effect, Input, JournalRecord};
use core_fsm::time::Instant;
use sim::system::Composite;
use std::marker::PhantomData;

/// One planted bug: how it bends inputs and effects.
pub trait Bug: 'static {
    /// Its name in reports.
    const NAME: &'static str;
    /// The invariant it breaks.
    const EXPECTED: &'static str;
    /// Bends an input before the composite sees it.
    fn input(input: Input) -> Input {
        input
    }
    /// Bends the composite's effects.
    fn effects(effects: Vec<Effect>) -> Vec<Effect> {
        effects
    }
}

/// The composite with bug `B`.
pub struct Planted<B> {
    inner: Composite,
    bug: PhantomData<fn() -> B>,
}

impl<B: Bug> Machine for Planted<B> {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        B::effects(self.inner.handle(now, B::input(input)))
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.inner.next_deadline()
    }

    fn check_invariants(&self) {
        self.inner.check_invariants();
    }
}

impl<B: Bug> System for Planted<B> {
    fn boot(plan: &RunPlan, seed: u64) -> Self {
        Planted {
            inner: Composite::boot(plan, seed),
            bug: PhantomData,
        }
    }

    fn restore(plan: &RunPlan, seed: u64, journal: &[JournalRecord]) -> Self {
        Planted {
            inner: Composite::restore(plan, seed, journal),
            bug: PhantomData,
        }
    }

    fn visit_nodes(&self, visit: &mut dyn FnMut(NodeView<'_>)) {
        self.inner.visit_nodes(visit);
    }

    fn is_settled(&self) -> bool {
        self.inner.is_settled()
    }

    fn is_torn_down(&self) -> bool {
        self.inner.is_torn_down()
    }

    fn probe_labels(&self, visit: &mut dyn FnMut(&str)) {
        self.inner.probe_labels(visit);
    }
}

/// Creates a lease without making its intent durable first.
pub struct NoIntent;

impl Bug for NoIntent {
    const NAME: &'static str = "no-intent";
    const EXPECTED: &'static str = "W4";

    fn effects(effects: Vec<Effect>) -> Vec<Effect> {
        effects
            .into_iter()
            .filter(|e| !matches!(e, Effect::Persist(JournalRecord::LeaseIntent { .. })))
            .collect()
    }
}

/// Sends every create twice (the second under an operation id nobody
/// routes), so one intent can rent two leases.
pub struct DoubleCreate;

impl Bug for DoubleCreate {
    const NAME: &'static str = "double-create";
    const EXPECTED: &'static str = "W1";

    fn effects(effects: Vec<Effect>) -> Vec<Effect> {
        let mut out = Vec::with_capacity(effects.len());
        for effect in effects {
            if let Effect::CreateLease { op, request } = &effect {
                let again = Effect::CreateLease {
                    op: OpId(op.0 + 1_000_000),
                    request: request.clone(),
                };
                out.push(effect);
                out.push(again);
            } else {
                out.push(effect);
            }
        }
        out
    }
}

/// Never tears down: the operator's `Teardown` is lost.
pub struct NoTeardown;

impl Bug for NoTeardown {
    const NAME: &'static str = "no-teardown";
    const EXPECTED: &'static str = "L2";

    fn input(input: Input) -> Input {
        match input {
            Input::Teardown => Input::Tick,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conformance::Scenario;
    use conformance::battery::check_case;
    use sim::backend::TierOne;

    fn tier_one_fails<B: Bug>() {
        let backend = TierOne::<Planted<B>>::default();
        for seed in 0..5 {
            let case = conformance::generate(Scenario::SmallPool, seed);
            let failure = check_case(&backend, &case).1;
            let id = failure.as_ref().map(conformance::battery::Failure::id);
            assert_eq!(
                id,
                Some(B::EXPECTED),
                "{} seed {seed}: {failure:?}",
                B::NAME
            );
        }
    }

    #[test]
    fn tier_one_catches_every_planted_bug_with_its_invariant() {
        tier_one_fails::<NoIntent>();
        tier_one_fails::<DoubleCreate>();
        tier_one_fails::<NoTeardown>();
    }
}
