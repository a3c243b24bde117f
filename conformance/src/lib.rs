//! drover's conformance kit: the input alphabet of faults, a seeded swarm
//! generator, the explicit plan a seed draws (a [`case::Case`]), its text
//! form (traces), the shrinker, the invariant oracle, coverage probes, and the
//! [`backend::Backend`] trait so the same battery runs against every world.
//!
//! The kit depends on `core-fsm` only. Worlds (the tier-1 property-trace
//! world in `sim`, the madsim world, the real runtime) implement
//! [`backend::Backend`]; the thing under test implements [`backend::System`].
//! `spec/simulation.md` documents the alphabet, profiles, invariants and
//! trace format.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod battery;
pub mod bench;
pub mod case;
pub mod coverage;
pub mod fault;
pub mod generate;
pub mod liveness;
pub mod oracle;
pub mod run;
pub mod shrink;
pub mod trace;

pub use backend::{Backend, NodeView, RunOptions, RunOutcome, Stats, System, Violation};
pub use case::{Case, Item, Profile};
pub use generate::{Scenario, generate};
