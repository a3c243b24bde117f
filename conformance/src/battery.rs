//! The battery every backend must pass: each case runs twice (the digests
//! must match, step by step), the oracle must stay silent, and the heal
//! phase must converge. A failure carries the one command that reproduces it.

use crate::backend::{Backend, RunOptions, RunOutcome, Violation};
use crate::case::Case;
use std::fmt;

/// Why a case failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A safety or liveness invariant broke.
    Violation(Violation),
    /// Two runs of the same case diverged (determinism, `D1`).
    Diverged {
        /// The first step whose digest differs.
        step: usize,
        /// The steps of the first and second run.
        steps: (usize, usize),
    },
}

impl Failure {
    /// The invariant id (`D1` for a divergence).
    pub fn id(&self) -> &'static str {
        match self {
            Failure::Violation(v) => v.id,
            Failure::Diverged { .. } => "D1",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Violation(v) => write!(f, "{v}"),
            Failure::Diverged { step, steps } => write!(
                f,
                "D1: two runs diverged at step {step} (runs had {} and {} steps)",
                steps.0, steps.1
            ),
        }
    }
}

/// The command line that reproduces a seed.
pub fn reproduce_line(scenario: &str, seed: u64) -> String {
    format!("cargo xtask sim --scenario {scenario} --seed {seed}")
}

/// Runs `case` twice and judges it.
pub fn check_case(backend: &dyn Backend, case: &Case) -> (RunOutcome, Option<Failure>) {
    let first = backend.run(case, RunOptions::default());
    if let Some(v) = &first.violation {
        let failure = Failure::Violation(v.clone());
        return (first, Some(failure));
    }
    let second = backend.run(case, RunOptions::default());
    let diverged = first_divergence(&first.step_digests, &second.step_digests);
    let failure = diverged.map(|step| Failure::Diverged {
        step,
        steps: (first.step_digests.len(), second.step_digests.len()),
    });
    (first, failure)
}

/// The first index where two digest sequences differ, if any.
pub fn first_divergence(a: &[u64], b: &[u64]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// Shrinks a failing case to a small one that fails with the same invariant.
pub fn shrink_failure(backend: &dyn Backend, case: &Case, failure: &Failure, budget: u32) -> Case {
    let id = failure.id();
    crate::shrink::shrink(case, budget, &mut |candidate: &Case| {
        check_case(backend, candidate)
            .1
            .is_some_and(|f| f.id() == id)
    })
}
