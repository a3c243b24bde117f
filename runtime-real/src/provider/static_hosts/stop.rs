//! Stopping a static node's agent over SSH at destroy: its pid file and
//! the command that signals it.

use super::hosts::StaticHost;
use super::{Reservation, endpoint_of};
use crate::provider::error;
use crate::ssh;
use core_fsm::ids::RunId;
use core_fsm::port::{ProviderError, ProviderErrorKind::Transient};
use std::path::Path;
use std::time::Duration;

/// How long stopping the agent over SSH may take, connect included.
pub(super) const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Output lines of the stop command kept for an error message.
const STOP_OUTPUT_LINES: usize = 8;

/// Stops the node's agent over SSH: the pid in its pid file is signalled
/// only if that process is a `drover-agent`, and the pid file is removed.
pub(super) async fn stop_agent(
    state_dir: &Path,
    held: &Reservation,
    host: &StaticHost,
    node: &str,
) -> Result<(), ProviderError> {
    let ssh_failed = |e: core_fsm::port::SshError| {
        error(
            Transient,
            format!("stopping the agent on {host}: {}", e.message),
        )
    };
    let key = ssh::load_key(Path::new(&host.key_file)).map_err(ssh_failed)?;
    let connection = ssh::connect(state_dir, &endpoint_of(host), &held.lease.lease_id, key)
        .await
        .map_err(ssh_failed)?;
    let result = connection
        .exec_collect(&stop_command(held.run_id, node), STOP_OUTPUT_LINES)
        .await;
    connection.close().await;
    match result.map_err(ssh_failed)? {
        (0, _) => Ok(()),
        (code, output) => Err(error(
            Transient,
            format!(
                "stopping the agent on {host}: exit {code}: {}",
                output.join(" | ")
            ),
        )),
    }
}

/// The pid file a static node's start command passes to `drover-agent
/// --pid-file`, relative to the SSH login directory.
pub fn pid_file(run_id: RunId, node: &str) -> String {
    format!(".drover/run-{}/{node}.pid", run_id.0)
}

/// The shell command that stops the agent of `node` (names are checked
/// DNS-label-like by the plan rules, so they need no quoting).
fn stop_command(run_id: RunId, node: &str) -> String {
    let file = pid_file(run_id, node);
    format!(
        "f={file}; if [ -f \"$f\" ]; then p=$(cat \"$f\"); \
         if [ -n \"$p\" ] && grep -qa drover-agent \"/proc/$p/cmdline\" 2>/dev/null; \
         then kill \"$p\" 2>/dev/null; fi; rm -f \"$f\"; fi; exit 0"
    )
}
