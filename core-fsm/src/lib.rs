//! drover's decisions, as pure deterministic state machines.
//!
//! Every machine has the shape of [`machine::Machine`]: inputs in, effects
//! out, time as a parameter, timers as data. Nothing here reads a clock, draws
//! OS randomness, spawns a thread, does I/O or iterates an unordered map
//! (`cargo xtask tidy` enforces it), so the same machines run under the
//! seeded simulator, under madsim and in the real runtime.
//!
//! See `SPEC.md` at the workspace root for each machine's states, inputs,
//! effects, timers and numbered invariants.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod digest;
pub mod ids;
pub mod machine;
pub mod rng;
pub mod time;
pub mod timer;

pub mod plan;
pub mod port;

pub mod boot;
pub mod bootstrap;
pub mod node;
pub mod orchestrator;
pub mod reconcile;

pub mod agent;
pub mod link;
pub mod membership;
pub mod pipeline;
pub mod run;
pub mod stage;

pub use machine::Machine;
pub use time::{Duration, Instant};
