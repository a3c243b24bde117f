//! drover's thin real runtime: binds the machines of `core-fsm`, through the
//! shared effect loop of `driver`, to real I/O: processes, russh, iroh, disk.

pub mod cli;
pub mod dashboard;
pub mod datastream;
pub mod exit;
pub mod journal;
pub mod pipeline;
pub mod plan_toml;
pub mod prompt;
pub mod provider;
pub mod retry;
pub mod say;
pub mod ssh;
pub mod state_dir;
pub mod stdout;
pub mod transport;
pub mod up;
