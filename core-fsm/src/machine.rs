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
    /// Like [`Machine::handle`], but appends the effects to `out`, so that
    /// a loop can reuse one buffer for every step. The effects are the
    /// same, in the same order.
    fn handle_into(&mut self, now: Instant, input: Self::Input, out: &mut Vec<Self::Effect>) {
        out.extend(self.handle(now, input));
    }
    /// The earliest armed timer, if any; the loop delivers a tick then.
    fn next_deadline(&self) -> Option<Instant>;
    /// Panics if an invariant of the machine does not hold.
    fn check_invariants(&self);
}

/// Where a step puts its effects, in order: a vector (what
/// [`Machine::handle`] returns), or a composite that routes each effect the
/// moment it is made instead of collecting and re-wrapping it.
pub trait Emit<E> {
    /// Takes the next effect.
    fn push(&mut self, effect: E);
}

impl<E> Emit<E> for Vec<E> {
    #[inline]
    fn push(&mut self, effect: E) {
        Vec::push(self, effect);
    }
}
