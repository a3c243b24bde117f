//! The run loop of `up`: drives the composite from `Start` until settled,
//! serves the pipeline until a stop, then `Teardown` until torn down, and
//! turns the outcome into the exit code.

use super::sink::{Joins, RealSink, SinkParts};
use super::stop::stop_requests;
use super::view::{self, LiveView};
use super::{Orchestrated, Runtime, control, ports, serve};
use crate::exit::{EXIT_FAILURE, EXIT_OK};
use crate::journal::Journal;
use core_fsm::node::Lifecycle;
use core_fsm::port::Input;
use driver::Driver;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Inputs that may wait in the channel before senders are slowed down.
const INPUT_QUEUE_MAX: usize = 1024;
/// How long teardown may take before `up` gives up (leases then stay in the
/// journal for `drover down`).
const TEARDOWN_BOUND: Duration = Duration::from_secs(300);
/// How often the terminal table is redrawn for its clocks.
const VIEW_TICK: Duration = Duration::from_millis(250);

/// Drives `machine` until it is torn down; returns the exit code.
pub async fn drive<M: Orchestrated, J: Joins + 'static>(
    runtime: Runtime<J>,
    machine: M,
    journal: Journal,
) -> anyhow::Result<i32> {
    let Runtime {
        state_dir,
        plan,
        key,
        json,
        joins,
        leases,
        mut control_inputs,
        host,
        datastream,
        controls,
    } = runtime;
    let (tx, rx) = mpsc::channel(INPUT_QUEUE_MAX);
    // The dashboard's controls: its inputs join the loop's, its stop is
    // the stop of Ctrl-C.
    let (dashboard_stop, dashboard_stops) = mpsc::channel(1);
    controls.connect(tx.clone(), dashboard_stop, host.tap.clone());
    let forward = tx.clone();
    tokio::spawn(async move {
        while let Some(input) = control_inputs.recv().await {
            if forward.send(input).await.is_err() {
                return;
            }
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let view = Arc::new(Mutex::new(LiveView::new(
        state_dir.clone(),
        view::Mode::detect(json),
    )));
    tokio::spawn(stop_requests(
        tx.clone(),
        stop.clone(),
        view.clone(),
        dashboard_stops,
    ));
    let wake = tx.clone();
    // The host watches every handed-off node from its join on.
    let (stop_tx, stop_rx) = mpsc::channel(4);
    let hooks = {
        let (a, b) = (view.clone(), view.clone());
        let control = host.control.clone();
        crate::pipeline::ViewHooks {
            json,
            stop: stop_tx,
            // Membership's Dead already failed the node in the composite
            // (which replaces it when the policy says); here it is shown,
            // and the dead agent's connection, which would linger until it
            // timed out, is closed.
            liveness: Box::new(move |node, agent, l| {
                a.lock().expect("view").liveness(node, l);
                if l == core_fsm::membership::Liveness::Dead {
                    control.close_dead(agent);
                }
            }),
            heartbeat: Box::new(move |node| b.lock().expect("view").heartbeat(node)),
            datastream: Some(datastream.clone()),
        }
    };
    let spec = host
        .prepared
        .as_ref()
        .map(|p| (p.model.clone(), p.spec.clone()));
    let (running, host_sink) = crate::pipeline::start(
        plan.run_id,
        host.control.clone(),
        &state_dir,
        &host.tap,
        hooks,
        spec,
        tx.clone(),
    );
    if view.lock().expect("view").is_tty() {
        tokio::spawn(tick_view(view.clone()));
    }
    // A restarted `up` shows the nodes it restored (and adopts) at once:
    // their ledger says where they are before any of them changes.
    for row in machine.node_rows() {
        let lease = leases.lease_of(&row.id);
        view.lock().expect("view").changed(row, lease);
    }
    let sink = RealSink::new(SinkParts {
        state_dir: state_dir.clone(),
        run_id: plan.run_id,
        key,
        providers: crate::provider::for_plan(&state_dir, Some(&plan))
            .map_err(anyhow::Error::msg)?,
        joins,
        tx,
        view: view.clone(),
        leases: leases.clone(),
        datastream,
        host: host_sink,
    });
    let ports = ports::orchestrator_ports(journal, leases, rx, sink);
    let mut driver = Driver::new(machine, ports);
    let started = std::time::Instant::now();
    driver.step(Input::Start).await?;
    driver
        .run_until(|m| m.is_settled() || stop.load(Ordering::SeqCst))
        .await?;
    let mut run_outcome: Option<Result<(), core_fsm::run::RunError>> = None;
    let mut pipeline_unready = false;
    if !stop.load(Ordering::SeqCst) {
        view.lock()
            .expect("view")
            .print_summary(started.elapsed().as_millis());
        let open = driver.ports().sink.open_sessions();
        if open > 0 {
            crate::say::err!("drover: {open} SSH session(s) still open after settling");
        }
        match &host.prepared {
            None => {
                driver.run_until(|_| stop.load(Ordering::SeqCst)).await?;
            }
            Some(prepared) if !serve::pipeline_ready(&view, prepared) => {
                // A stage without its node cannot run: say so, then tear down.
                let unready: Vec<String> = prepared
                    .plan
                    .iter()
                    .filter(|a| !view.lock().expect("view").is_ready(&a.node))
                    .map(|a| a.node.to_string())
                    .collect();
                let error = format!(
                    "the pipeline's nodes are not all ready: {}",
                    unready.join(", ")
                );
                if json {
                    let line = serde_json::json!({"event": "pipeline_failed", "error": error});
                    view::println_flush(&line.to_string());
                }
                crate::say::err!("drover: {error}");
                pipeline_unready = true;
            }
            Some(prepared) => {
                let serve = serve::ServeParts {
                    prepared,
                    running: &running,
                    stop_rx,
                    run_id: plan.run_id,
                    stop: &stop,
                    wake: &wake,
                };
                run_outcome = Some(serve::serve_pipeline(&mut driver, serve).await?);
            }
        }
    }
    // Stages are stopped and workers gone before any lease goes.
    driver.step(Input::Teardown).await?;
    let torn = tokio::time::timeout(TEARDOWN_BOUND, driver.run_until(|m| m.is_torn_down())).await;
    let (_, mut ports) = driver.into_parts();
    ports.sink.flush();
    let _ = std::fs::remove_file(control::pid_file(&state_dir));
    let _ = std::fs::remove_file(control::live_file(&state_dir));
    let view = view.lock().expect("view");
    let all_destroyed = view.nodes().all(|n| n.stage == Lifecycle::Destroyed);
    if let Some(Err(error)) = &run_outcome {
        if json {
            let line = serde_json::json!({"event": "pipeline_failed", "error": error.to_string()});
            view::println_flush(&line.to_string());
        }
        crate::say::err!("drover: the pipeline failed: {error}");
    }
    let run_ok = !matches!(run_outcome, Some(Err(_))) && !pipeline_unready;
    let code = match torn {
        Ok(Ok(_)) if view.failed.is_empty() && all_destroyed && run_ok => EXIT_OK,
        Ok(Ok(_)) if view.failed.is_empty() && all_destroyed => EXIT_FAILURE,
        Ok(Ok(_)) => {
            for (node, reason) in &view.failed {
                crate::say::err!("drover: {node} failed: {reason}");
            }
            EXIT_FAILURE
        }
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            crate::say::err!(
                "drover: teardown did not finish in {TEARDOWN_BOUND:?}; run `drover down`"
            );
            EXIT_FAILURE
        }
    };
    controls.disconnect();
    Ok(code)
}

/// Redraws the terminal table so its clocks move (a display refresh, not
/// a wait on anything: nothing is decided by it).
async fn tick_view(view: Arc<Mutex<LiveView>>) {
    let mut every = tokio::time::interval(VIEW_TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        every.tick().await;
        view.lock().expect("view").tick();
    }
}
