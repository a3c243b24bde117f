//! The shape every machine has.

use crate::time::Instant;

/// A pure, deterministic state machine.
///
/// `handle` never blocks, never does I/O and never reads a clock: time is a
/// parameter. An operational failure arrives as an input carrying an error;
/// a programmer error is an `assert!`. Late, duplicate or unknown answers to
/// operations are ignored (and counted), never a panic.
pub trait Machine {
    /// What the machine is told.
    type Input;
    /// What the machine asks for.
    type Effect;
    /// Applies one input at `now` and returns the effects to perform, in order.
    fn handle(&mut self, now: Instant, input: Self::Input) -> Vec<Self::Effect>;
    /// The earliest armed timer, if any; the loop delivers a tick then.
    fn next_deadline(&self) -> Option<Instant>;
    /// Panics if an invariant of the machine does not hold.
    fn check_invariants(&self);
}
