//! Waiting for a stop request (SIGINT, SIGTERM, `stop` on stdin, the
//! dashboard's stop) and what a first and a second one do.

use super::view::LiveView;
use crate::exit::EXIT_FAILURE;
use core_fsm::port::Input;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Waits for the first stop request, delivers `Teardown`; a second one
/// leaves at once (the journal keeps the leases for `drover down`).
pub(super) async fn stop_requests(
    tx: mpsc::Sender<Input>,
    stop: Arc<AtomicBool>,
    view: Arc<Mutex<LiveView>>,
    mut dashboard: mpsc::Receiver<()>,
) {
    use tokio::io::AsyncBufReadExt;
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        crate::say::err!("drover: cannot install signal handlers; stop with `stop` on stdin");
        return;
    };
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    // A terminal echoes what is typed, a line under the live table.
    let echoed = std::io::IsTerminal::is_terminal(&std::io::stdin());
    loop {
        tokio::select! {
            biased;
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            Some(()) = dashboard.recv() => break,
            line = stdin.next_line(), if stdin_open => match line {
                Ok(Some(word)) => {
                    if echoed {
                        view.lock().expect("view").typed_line();
                    }
                    if matches!(word.trim(), "stop" | "shutdown" | "quit") {
                        break;
                    }
                }
                Ok(None) | Err(_) => stdin_open = false,
            },
        }
    }
    stop.store(true, Ordering::SeqCst);
    view.lock()
        .expect("view")
        .message("drover: stopping: tearing down every lease");
    // Wakes the loop, which sees the stop and begins the ordered shutdown.
    let _ = tx.send(Input::Tick).await;
    tokio::select! {
        biased;
        _ = interrupt.recv() => {},
        _ = terminate.recv() => {},
    }
    crate::say::err!("drover: second stop: leaving now; `drover down` destroys what is left");
    std::process::exit(EXIT_FAILURE);
}
