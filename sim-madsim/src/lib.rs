//! drover's tier-2 simulation: the real effect loop ([`driver::Driver`])
//! under madsim, against a simulated Vast-like provider, one simulated
//! machine (SSH server and agent) per lease, and madsim's network with its
//! partitions, packet loss, latency and node kill/restart.
//!
//! The world has these madsim nodes (see `spec/madsim.md`):
//!
//! - `orchestrator` (10.0.0.1): `driver::Driver` over the orchestrator
//!   composite, with the simulated ports: a clock on madsim time, an inbox,
//!   a journal disk that loses its unsynced write when the node is killed,
//!   and a sink that speaks to the provider and the machines over the
//!   network. Killed and restarted from its journal (`Orchestrator::restore`).
//! - `provider` (10.0.0.2): the Vast-like provider API (create, lookup,
//!   destroy, list) with the kit's provider faults.
//! - one `machine-N` per created lease (10.1.x.y): an SSH server and, once
//!   the start command ran, an agent that joins the orchestrator's control
//!   plane with its token.
//!
//! Only the pure parts (the seeded network chaos, the wire types, the world's
//! shared state, the observing machine wrapper) build without `--cfg madsim`;
//! the world itself is compiled for the simulator build only:
//! `RUSTFLAGS="--cfg madsim" cargo test -p sim-madsim --release` in its own
//! target directory.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate madsim_tokio as tokio;

pub mod chaos;
pub mod mutants;
pub mod observed;
pub mod state;
pub mod wire;

#[cfg(madsim)]
pub mod backend;
#[cfg(madsim)]
pub mod compare;
#[cfg(madsim)]
mod machine;
#[cfg(madsim)]
mod orch;
#[cfg(madsim)]
mod provider;
#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
mod ssh;
#[cfg(madsim)]
pub mod world;

/// The one command that builds and runs the madsim tier with these
/// arguments (what a failure prints).
pub fn reproduce_line(scenario: &str, seed: u64) -> String {
    format!(
        "CARGO_TARGET_DIR=target/madsim RUSTFLAGS=\"--cfg madsim\" cargo run --release -p sim-madsim --bin drover-madsim -- --scenario {scenario} --seed {seed}"
    )
}
