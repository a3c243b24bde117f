//! Serving a plan's pipeline beside the composite: the run begins once
//! every node settled, and a stop stops the run in order before any lease
//! is destroyed.

use super::Orchestrated;
use super::view::LiveView;
use core_fsm::port::{Input, JournalRecord};
use driver::Driver;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Whether every node of the pipeline's stages is ready.
pub(super) fn pipeline_ready(view: &Mutex<LiveView>, prepared: &crate::pipeline::Prepared) -> bool {
    let view = view.lock().expect("view");
    prepared.plan.iter().all(|a| view.is_ready(&a.node))
}

/// What serving a pipeline needs from `drive`.
pub(super) struct ServeParts<'a> {
    pub(super) prepared: &'a crate::pipeline::Prepared,
    pub(super) running: &'a crate::pipeline::Running,
    pub(super) stop_rx: mpsc::Receiver<()>,
    pub(super) run_id: core_fsm::ids::RunId,
    pub(super) stop: &'a Arc<AtomicBool>,
    pub(super) wake: &'a mpsc::Sender<Input>,
}

/// How long a stopping pipeline may take to stop its stages.
const RUN_STOP_BOUND: Duration = Duration::from_secs(60);

/// Runs the pipeline host beside the composite until the run ends (a
/// failure) or a stop arrives (then the run is stopped in order first).
pub(super) async fn serve_pipeline<D>(
    driver: &mut D,
    parts: ServeParts<'_>,
) -> anyhow::Result<Result<(), core_fsm::run::RunError>>
where
    D: CompositeLoop,
{
    let running = parts.running;
    running.begin(parts.prepared, parts.run_id).await;
    let mut stop_rx = parts.stop_rx;
    // A client's `Shutdown` is a stop like Ctrl-C.
    let (stop, wake) = (parts.stop.clone(), parts.wake.clone());
    tokio::spawn(async move {
        if stop_rx.recv().await.is_some() {
            stop.store(true, Ordering::SeqCst);
            let _ = wake.send(Input::Tick).await;
        }
    });
    let over = Arc::new(AtomicBool::new(false));
    let outcome = Arc::new(Mutex::new(None));
    let (over2, outcome2, wake) = (over.clone(), outcome.clone(), parts.wake.clone());
    let shared = running.shared.clone();
    tokio::spawn(async move {
        // The run's end is the host's `Finished`; its loop then ends.
        let result = shared.finished().await;
        *outcome2.lock().expect("outcome") = Some(result);
        over2.store(true, Ordering::SeqCst);
        let _ = wake.send(Input::Tick).await;
    });
    let stop = parts.stop.clone();
    driver
        .run_composite(&|| stop.load(Ordering::SeqCst) || over.load(Ordering::SeqCst))
        .await?;
    if !over.load(Ordering::SeqCst) {
        let shutdown = crate::pipeline::run_input(core_fsm::run::Input::Shutdown);
        let _ = running.tx.send(shutdown).await;
        let until = tokio::time::timeout(
            RUN_STOP_BOUND,
            driver.run_composite(&|| over.load(Ordering::SeqCst)),
        )
        .await;
        if until.is_err() {
            crate::say::err!(
                "drover: the pipeline did not stop in {RUN_STOP_BOUND:?}; tearing down"
            );
        }
    }
    let result = outcome.lock().expect("outcome").take();
    Ok(result.unwrap_or(Ok(())))
}

/// The composite's loop, as `serve_pipeline` runs it.
pub(super) trait CompositeLoop {
    /// Runs until `stop()` holds.
    async fn run_composite(&mut self, stop: &(dyn Fn() -> bool + Sync)) -> anyhow::Result<()>;
}

impl<M, C, S, D, E> CompositeLoop for Driver<M, C, S, D, E>
where
    M: Orchestrated,
    C: driver::Clock,
    S: driver::InputSource<Input>,
    D: driver::Disk<JournalRecord>,
    E: driver::EffectSink<core_fsm::port::Effect>,
{
    async fn run_composite(&mut self, stop: &(dyn Fn() -> bool + Sync)) -> anyhow::Result<()> {
        self.run_until(|_| stop()).await?;
        Ok(())
    }
}
