//! `up`'s own lines, on its stdout and stderr as ever, and copied into the
//! datastream while a run's datastream is open: the orchestrator's file,
//! channels `orchestrator.stdout` and `orchestrator.stderr`
//! (`spec/datastream.md`), so `drover logs --run` shows what `up` said even
//! when nobody watched its terminal.
//!
//! A copy never blocks the caller and never takes the datastream's lock on
//! the caller's thread (a line said while that lock is held cannot
//! deadlock): it goes through a bounded queue to one task that appends it.
//! What the queue could not take is counted, and the count is written as a
//! last line when the datastream closes. The terminal table's redraws are
//! not lines and are not copied; the dashboard's `token=` is masked in the
//! copy (the terminal shows it: the user needs it to open the page).

use crate::datastream::{Hub, channel};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// Most lines waiting for the datastream.
const QUEUE_MAX: usize = 4096;

type Copy = (&'static str, String);

static SINK: Mutex<Option<mpsc::Sender<Copy>>> = Mutex::new(None);
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Copies of `up`'s lines go to `hub` until [`Attached::detach`].
pub struct Attached {
    task: tokio::task::JoinHandle<()>,
}

/// Starts copying `up`'s lines into `hub`.
pub fn attach(hub: Hub) -> Attached {
    let (tx, mut rx) = mpsc::channel::<Copy>(QUEUE_MAX);
    DROPPED.store(0, Ordering::Relaxed);
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    let task = tokio::spawn(async move {
        while let Some((channel, line)) = rx.recv().await {
            hub.event(channel, None, line);
        }
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let line =
                format!("{dropped} line(s) of drover up were not copied here (the queue was full)");
            hub.event(channel::GAP, None, line);
        }
    });
    Attached { task }
}

impl Attached {
    /// Stops copying and waits until every queued line is written.
    pub async fn detach(self) {
        SINK.lock().unwrap_or_else(|e| e.into_inner()).take();
        let _ = self.task.await;
    }
}

fn copy(channel: &'static str, line: &str) {
    let sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = sink.as_ref()
        && tx.try_send((channel, mask(line))).is_err()
    {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// One line of `up`'s stdout (without its newline), copied.
pub fn stdout_line(line: &str) {
    copy(channel::ORCHESTRATOR_STDOUT, line);
}

/// Prints one line on stderr and copies it.
pub fn stderr_line(line: &str) {
    crate::stdout::err_line(line);
    copy(channel::ORCHESTRATOR_STDERR, line);
}

/// `eprintln!` that never panics (`crate::stdout::err_line`) and copies
/// the line into the datastream.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::say::stderr_line(&format!($($arg)*))
    };
}
pub(crate) use err;

/// `line` with every `token=VALUE` masked.
pub fn mask(line: &str) -> String {
    const KEY: &str = "token=";
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(KEY) {
        let (head, tail) = rest.split_at(at + KEY.len());
        out.push_str(head);
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(tail.len());
        if end > 0 {
            out.push_str("<masked>");
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::mask;

    #[test]
    fn tokens_are_masked_and_nothing_else_changes() {
        assert_eq!(
            mask(r#"{"url":"http://127.0.0.1:1/?token=ab12cd"}"#),
            r#"{"url":"http://127.0.0.1:1/?token=<masked>"}"#
        );
        assert_eq!(
            mask("a token= b token=x&token=y"),
            "a token= b token=<masked>&token=<masked>"
        );
        assert_eq!(mask("workers-0: Dormant"), "workers-0: Dormant");
    }
}
