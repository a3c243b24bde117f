//! The agent's `drover-worker stage` child: started once, without a model
//! (it says `Hello`), loaded with the stage's slice, then given one step at
//! a time. Its stderr lines go to the agent's stderr, prefixed; its exit is
//! reported once, unless the agent asked for it.

use super::wire::{EdgeFrame, Step, WorkerSettings};
use core_fsm::agent::Input;
use core_fsm::ids::OpId;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};

pub use super::lives::{Life, Lives};

mod actor;
use actor::{READ_BUFFER, actor};

/// What the agent asks of its worker.
pub enum Job {
    /// Load the stage; answered with `WeightsReady` or `LoadFailed`.
    Load {
        /// The slice file.
        model: PathBuf,
        /// The stage's blocks.
        layers: (u32, u32),
        /// How the worker runs it.
        settings: WorkerSettings,
        /// The stage life that asked.
        life: Life,
    },
    /// Run one step and send its output on `out`.
    Step {
        /// The step's input.
        step: Step,
        /// Whether this is the last stage (it returns a token).
        last: bool,
        /// The outbound edge.
        out: mpsc::Sender<EdgeFrame>,
        /// The stage life that asked.
        life: Life,
    },
    /// Stop the worker (it exits 0); answered on the channel.
    Stop(oneshot::Sender<()>),
}

/// A running worker.
pub struct WorkerHandle {
    /// Jobs, done in order.
    pub jobs: mpsc::Sender<Job>,
    kill: Option<oneshot::Sender<()>>,
    expected: Arc<AtomicBool>,
}

impl WorkerHandle {
    /// Kills the worker (an exit the agent asked for).
    pub fn kill(&mut self) {
        self.expected.store(true, Ordering::SeqCst);
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }
}

/// The worker binary: `DROVER_WORKER`, else `drover-worker` beside this
/// executable, else on PATH.
pub fn worker_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("DROVER_WORKER") {
        return PathBuf::from(path);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("drover-worker")));
    match beside {
        Some(path) if path.is_file() => path,
        _ => PathBuf::from("drover-worker"),
    }
}

/// Starts the worker; its readiness (`Hello`) and exit come back as inputs
/// of operation `op`.
pub fn spawn(
    op: OpId,
    stage: u32,
    label: &str,
    inputs: mpsc::Sender<Input>,
) -> Result<WorkerHandle, String> {
    spawn_binary(&worker_binary(), op, stage, label, inputs)
}

/// [`spawn`] of the worker `binary`.
fn spawn_binary(
    binary: &Path,
    op: OpId,
    stage: u32,
    label: &str,
    inputs: mpsc::Sender<Input>,
) -> Result<WorkerHandle, String> {
    let mut command = Command::new(binary);
    command.arg("stage");
    if let Some(pin) = super::pin::current() {
        command.arg("--serve-cpu").arg(pin.cpu.to_string());
        let allowed = pin.allowed.clone();
        // The child would inherit the agent thread's one processor: it
        // gets every processor back between fork and exec, where it can
        // (a refusal leaves it on the agent's, and it still starts).
        #[allow(unsafe_code)]
        // SAFETY: `restrict` makes one system call and neither allocates
        // nor locks, as the time between fork and exec demands.
        unsafe {
            command.pre_exec(move || {
                let _ = workers::affinity::restrict(&allowed);
                Ok(())
            });
        }
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    let stdin = child.stdin.take().expect("piped");
    // Buffered: a reply frame (length and body) is then one read.
    let stdout = BufReader::with_capacity(READ_BUFFER, child.stdout.take().expect("piped"));
    let stderr = child.stderr.take().expect("piped");
    let prefix = format!("drover-worker[{label}]");
    tokio::spawn(async move {
        let mut stderr = BufReader::new(stderr);
        let mut line = Vec::new();
        while let Ok(n) = stderr.read_until(b'\n', &mut line).await {
            if n == 0 {
                break;
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            crate::transport::agent_log::worker_line(&prefix, std::mem::take(&mut line));
        }
    });
    let expected = Arc::new(AtomicBool::new(false));
    let (kill, kill_rx) = oneshot::channel();
    let exits = inputs.clone();
    let quiet = expected.clone();
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status,
            _ = kill_rx => {
                let _ = child.kill().await;
                child.wait().await
            }
        };
        if !quiet.load(Ordering::SeqCst) {
            let reason = match status {
                Ok(status) => format!("the worker exited: {status}"),
                Err(e) => format!("the worker could not be waited for: {e}"),
            };
            let _ = exits.send(Input::WorkerExited { op, reason }).await;
        }
    });
    let (jobs, jobs_rx) = mpsc::channel(64);
    tokio::spawn(actor(
        op,
        stage,
        stdin,
        stdout,
        jobs_rx,
        inputs,
        expected.clone(),
    ));
    Ok(WorkerHandle {
        jobs,
        kill: Some(kill),
        expected,
    })
}

#[cfg(test)]
mod tests;
