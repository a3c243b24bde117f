//! The agent's one logging sink: every line the agent prints (`say` to
//! stdout, `warn` to stderr) and every stderr line of its worker goes to
//! the process's own stdout/stderr as before (`agent.log` on the node) and
//! into a bounded buffer, from which [`forward`] sends it to the
//! orchestrator on the log stream (`super::logs`).
//!
//! The buffer keeps the newest [`LINES_MAX`] lines and at most
//! [`BYTES_MAX`] bytes; what it drops while the orchestrator is unreachable
//! is sent as one `Gap`, so a reader of the datastream sees that lines are
//! missing and how many. Lines are numbered per process from 1.

use super::logs::{LINE_BYTES_MAX, LOG_ALPN, LOG_WIRE_VERSION, LogChannel, LogFrame};
use super::logs::{encode_log_frame, read_log_frame, write_log_frame};
use core_fsm::ids::LogicalNodeId;
use iroh::EndpointAddr;
use iroh::endpoint::Endpoint;
use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

/// Most lines buffered.
pub const LINES_MAX: usize = 4096;
/// Most bytes buffered.
pub const BYTES_MAX: usize = 1024 * 1024;
/// Lines sent per wake-up (in one write) before the buffer is looked at
/// again.
const BATCH_MAX: usize = 256;
/// How long telemetry lines wait to go out together: a busy stage writes
/// one per token, and a packet per token would cost the node, the
/// orchestrator and every stage sharing their cores. Any other line, or a
/// full batch, sends what is waiting at once.
const TELEMETRY_LINGER: Duration = Duration::from_millis(100);
/// How long one log dial may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// First pause after a failed log connection; doubles up to the ceiling.
const RETRY_BASE: Duration = Duration::from_millis(200);
/// Ceiling of that pause.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// One buffered line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    position: u64,
    channel: LogChannel,
    bytes: Vec<u8>,
}

/// The buffer.
#[derive(Default)]
struct Ring {
    entries: VecDeque<Entry>,
    bytes: usize,
    /// The last position given out.
    last: u64,
    /// The last position written to a log stream.
    written: u64,
}

impl Ring {
    fn push(&mut self, channel: LogChannel, mut bytes: Vec<u8>) {
        if bytes.len() > LINE_BYTES_MAX {
            let cut = bytes.len() - LINE_BYTES_MAX;
            bytes.truncate(LINE_BYTES_MAX);
            bytes.extend_from_slice(format!(" [{cut} more bytes cut]").as_bytes());
        }
        self.last += 1;
        self.bytes += bytes.len();
        self.entries.push_back(Entry {
            position: self.last,
            channel,
            bytes,
        });
        while self.entries.len() > LINES_MAX || self.bytes > BYTES_MAX {
            match self.entries.pop_front() {
                Some(old) => self.bytes -= old.bytes.len(),
                None => break,
            }
        }
    }

    /// What to send after `cursor`: the lost range, if any, then up to
    /// `max` lines.
    fn after(&self, cursor: u64, max: usize) -> (Option<(u64, u64)>, Vec<Entry>) {
        let oldest = self.entries.front().map_or(self.last + 1, |e| e.position);
        let gap = (oldest > cursor + 1).then(|| (cursor + 1, oldest - 1));
        let lines = self
            .entries
            .iter()
            .filter(|e| e.position > cursor)
            .take(max)
            .cloned()
            .collect();
        (gap, lines)
    }
}

struct Sink {
    ring: Mutex<Ring>,
    /// A line was pushed.
    wake: Notify,
    /// A line other than telemetry was pushed: a lingering batch goes now.
    urgent: Notify,
    /// Lines were written to a log stream.
    progress: Notify,
}

fn sink() -> &'static Sink {
    static SINK: OnceLock<Sink> = OnceLock::new();
    SINK.get_or_init(|| Sink {
        ring: Mutex::new(Ring::default()),
        wake: Notify::new(),
        urgent: Notify::new(),
        progress: Notify::new(),
    })
}

fn push(channel: LogChannel, bytes: Vec<u8>) {
    let sink = sink();
    sink.ring
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(channel, bytes);
    sink.wake.notify_one();
    if channel != LogChannel::WorkerTelemetry {
        sink.urgent.notify_one();
    }
}

/// A progress line of the agent: stdout, and the `agent.stdout` channel.
pub fn say(node: &LogicalNodeId, line: &str) {
    crate::stdout::say(&format!("drover-agent[{node}]: {line}"));
    push(LogChannel::AgentStdout, line.as_bytes().to_vec());
}

/// A problem line of the agent: stderr, and the `agent.stderr` channel.
pub fn warn(node: &LogicalNodeId, line: &str) {
    crate::stdout::eline!("drover-agent[{node}]: {line}");
    push(LogChannel::AgentStderr, line.as_bytes().to_vec());
}

/// A problem line of the agent that names no node (before one is known).
pub fn warn_plain(line: &str) {
    crate::stdout::eline!("drover-agent: {line}");
    push(LogChannel::AgentStderr, line.as_bytes().to_vec());
}

/// A stderr line of the worker (any bytes): the agent's stderr with
/// `prefix`, and the `worker.stderr` channel as it is.
pub fn worker_line(prefix: &str, bytes: Vec<u8>) {
    crate::stdout::eline!("{prefix}: {}", String::from_utf8_lossy(&bytes));
    push(LogChannel::WorkerStderr, bytes);
}

/// A telemetry line of the worker (one per step): the `worker.telemetry`
/// channel only. It is not printed: `agent.log` keeps the text people
/// read, and a busy stage writes one of these per token.
pub fn worker_telemetry(line: &str) {
    push(LogChannel::WorkerTelemetry, line.as_bytes().to_vec());
}

/// Sends the buffered and future lines to the orchestrator, reconnecting
/// the log stream (with a bounded backoff) whenever it fails. Never
/// returns: it ends when its caller drops it (the control connection ended).
pub async fn forward(endpoint: &Endpoint, orchestrator: &EndpointAddr, node: &LogicalNodeId) {
    let mut failures = 0;
    loop {
        let sent_any = stream_once(endpoint, orchestrator, node).await;
        failures = if sent_any { 1 } else { failures + 1 };
        let pause = crate::retry::pause(failures, RETRY_BASE, RETRY_MAX);
        // Not `warn`: a line about the log stream would feed the log stream.
        crate::stdout::eline!("drover-agent[{node}]: log stream lost; retrying in {pause:?}");
        tokio::time::sleep(pause).await;
    }
}

/// One log connection, until it fails; whether it was resumed.
async fn stream_once(
    endpoint: &Endpoint,
    orchestrator: &EndpointAddr,
    node: &LogicalNodeId,
) -> bool {
    let dial = endpoint.connect(orchestrator.clone(), LOG_ALPN);
    let Ok(Ok(conn)) = tokio::time::timeout(DIAL_TIMEOUT, dial).await else {
        return false;
    };
    let Ok((mut send, mut recv)) = conn.open_bi().await else {
        return false;
    };
    let hello = LogFrame::Hello {
        version: LOG_WIRE_VERSION,
        node: node.clone(),
    };
    if write_log_frame(&mut send, &hello).await.is_err() {
        return false;
    }
    let mut cursor = match tokio::time::timeout(DIAL_TIMEOUT, read_log_frame(&mut recv)).await {
        Ok(Ok(Some(LogFrame::Resume { after }))) => after,
        _ => return false,
    };
    let sink = sink();
    {
        let mut ring = sink.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.written = ring.written.max(cursor);
    }
    let mut lingered = false;
    loop {
        let (gap, lines) = sink
            .ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .after(cursor, BATCH_MAX);
        if gap.is_none() && lines.is_empty() {
            // `notify_one` keeps a permit for a line pushed meanwhile.
            sink.wake.notified().await;
            continue;
        }
        if !lingered && gap.is_none() && lingers(&lines) {
            tokio::select! {
                () = tokio::time::sleep(TELEMETRY_LINGER) => {}
                () = sink.urgent.notified() => {}
            }
            lingered = true;
            continue;
        }
        lingered = false;
        let mut out = Vec::new();
        if let Some((first, last)) = gap {
            if encode_log_frame(&LogFrame::Gap { first, last }, &mut out).is_err() {
                return true;
            }
            cursor = last;
        }
        for entry in lines {
            let frame = LogFrame::Line {
                position: entry.position,
                channel: entry.channel,
                bytes: entry.bytes,
            };
            if encode_log_frame(&frame, &mut out).is_err() {
                return true;
            }
            cursor = entry.position;
        }
        if send.write_all(&out).await.is_err() || send.flush().await.is_err() {
            return true;
        }
        sink.ring.lock().unwrap_or_else(|e| e.into_inner()).written = cursor;
        sink.progress.notify_waiters();
    }
}

/// Sends what is buffered now, lingering telemetry too, and waits (at most
/// `bound`) until a log stream has taken it: the last lines of an agent
/// that exits in order are not lost with it.
pub async fn drain(bound: Duration) {
    let sink = sink();
    let wait = async {
        loop {
            let progressed = sink.progress.notified();
            tokio::pin!(progressed);
            progressed.as_mut().enable();
            let done = {
                let ring = sink.ring.lock().unwrap_or_else(|e| e.into_inner());
                ring.written >= ring.last
            };
            if done {
                return;
            }
            sink.urgent.notify_one();
            progressed.await;
        }
    };
    let _ = tokio::time::timeout(bound, wait).await;
}

/// Whether `lines` may wait for more: telemetry only, short of a batch.
fn lingers(lines: &[Entry]) -> bool {
    lines.len() < BATCH_MAX
        && lines
            .iter()
            .all(|e| e.channel == LogChannel::WorkerTelemetry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_lines_and_names_what_it_dropped() {
        let mut ring = Ring::default();
        for n in 0..LINES_MAX + 10 {
            ring.push(LogChannel::AgentStdout, format!("line {n}").into_bytes());
        }
        let (gap, lines) = ring.after(0, 3);
        assert_eq!(gap, Some((1, 10)));
        let positions: Vec<u64> = lines.iter().map(|e| e.position).collect();
        assert_eq!(positions, vec![11, 12, 13]);
        // Nothing lost above a cursor inside the buffer.
        let (gap, lines) = ring.after(4000, BATCH_MAX);
        assert_eq!(gap, None);
        assert_eq!(lines[0].position, 4001);
        let (gap, lines) = ring.after(ring.last, BATCH_MAX);
        assert_eq!((gap, lines.len()), (None, 0));
    }

    #[test]
    fn bytes_are_bounded_too_and_a_long_line_is_cut() {
        let mut ring = Ring::default();
        ring.push(LogChannel::WorkerStderr, vec![b'x'; LINE_BYTES_MAX * 2]);
        let (_, lines) = ring.after(0, 1);
        assert!(lines[0].bytes.len() < LINE_BYTES_MAX + 64);
        assert!(lines[0].bytes.ends_with(b"more bytes cut]"));
        for _ in 0..BYTES_MAX / LINE_BYTES_MAX + 8 {
            ring.push(LogChannel::WorkerStderr, vec![b'y'; LINE_BYTES_MAX]);
        }
        assert!(ring.bytes <= BYTES_MAX);
        let (gap, _) = ring.after(0, 1);
        assert!(gap.is_some());
    }

    #[test]
    fn telemetry_alone_waits_for_company_and_anything_else_goes_at_once() {
        let line = |channel| Entry {
            position: 1,
            channel,
            bytes: b"x".to_vec(),
        };
        let telemetry = vec![line(LogChannel::WorkerTelemetry); 3];
        assert!(lingers(&telemetry));
        let mut mixed = telemetry.clone();
        mixed.push(line(LogChannel::WorkerStderr));
        assert!(!lingers(&mixed));
        assert!(!lingers(&vec![
            line(LogChannel::WorkerTelemetry);
            BATCH_MAX
        ]));
    }
}
