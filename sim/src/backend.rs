//! The tier-1 world as a conformance [`Backend`].

use crate::world::World;
use conformance::{Backend, Case, RunOptions, RunOutcome, System};
use std::marker::PhantomData;

/// Runs cases in the tier-1 world against the system `S`.
pub struct TierOne<S> {
    system: PhantomData<fn() -> S>,
}

impl<S> Default for TierOne<S> {
    fn default() -> Self {
        TierOne {
            system: PhantomData,
        }
    }
}

impl<S: System> Backend for TierOne<S> {
    fn name(&self) -> &'static str {
        "tier-1"
    }

    fn run(&self, case: &Case, options: RunOptions) -> RunOutcome {
        World::<S>::new(case, options).run()
    }
}

/// The backend the battery runs: the real orchestrator composite.
pub type Real = TierOne<crate::system::Composite>;
