//! How other `drover` commands find and talk to a running `drover up`:
//! `<state>/up.pid` names it (and is checked against `/proc`, so a stale
//! file of a killed `up` is recognised), SIGTERM asks it to tear down, and
//! `<state>/live.json` holds its live view of the nodes for `status`.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The pid file of a running `up`.
pub fn pid_file(state_dir: &Path) -> PathBuf {
    crate::state_dir::StateDir::at(state_dir).up_pid()
}

/// The live view file.
pub fn live_file(state_dir: &Path) -> PathBuf {
    crate::state_dir::StateDir::at(state_dir).live_view()
}

/// The pid of a `drover up` running on `state_dir`, if one is alive.
pub fn running_pid(state_dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file(state_dir))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if pid == std::process::id() {
        return Some(pid);
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let is_up = cmdline.split(|b| *b == 0).any(|a| a == b"up");
    (is_up && crate::provider::local::process::is_running(pid)).then_some(pid)
}

/// Asks the `up` at `pid` to tear down (as Ctrl-C would).
pub fn request_teardown(pid: u32) -> std::io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::other("bad pid"))?;
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).map_err(Into::into)
}

/// One node as the live view shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveNode {
    /// The node.
    pub id: core_fsm::ids::LogicalNodeId,
    /// Its stage.
    pub stage: core_fsm::node::Lifecycle,
    /// Ready.
    pub ready: bool,
    /// Why it failed.
    pub failed_reason: Option<String>,
    /// What membership says of its agent, once handed off.
    #[serde(default)]
    pub liveness: Option<core_fsm::membership::Liveness>,
    /// When its agent's last heartbeat arrived (ms since the Unix epoch).
    #[serde(default)]
    pub last_heartbeat_ms: Option<u64>,
}

/// Writes the live view (atomically).
pub fn write_live(state_dir: &Path, nodes: &[LiveNode]) {
    if let Ok(text) = serde_json::to_vec(nodes) {
        let _ = crate::provider::local::write_atomic(&live_file(state_dir), &text);
    }
}

/// Reads the live view (empty when absent or unreadable).
pub fn read_live(state_dir: &Path) -> Vec<LiveNode> {
    std::fs::read(live_file(state_dir))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}
