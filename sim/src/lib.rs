//! drover's simulation worlds.
//!
//! Tier 1 ([`world`]): a discrete-event world (one queue of timed events, no
//! async, no threads inside a run) that drives the real orchestrator
//! composite against a simulated Vast-like provider, SSH hosts, agents and a
//! journal disk that loses unsynced writes on a crash. The conformance kit
//! draws the cases, judges every step and shrinks failures; [`cli`] runs
//! batteries on every core, replays and shrinks traces, and benches.
//! `spec/simulation.md` documents the whole.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod cli;
pub mod plan;
pub mod run_world;
pub mod system;
pub mod world;
