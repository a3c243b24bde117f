//! A container's own output (its main process: the node's sshd), followed
//! from the container's start for as long as it lives, cut into lines per
//! stream for the datastream's `provider.stdout` / `provider.stderr`.

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use core_fsm::port::LogStream;
use futures_util::StreamExt;
use tokio::sync::mpsc;

/// The longest line kept; the rest of a longer one is cut (and says so).
const LINE_MAX: usize = 16 * 1024;

/// Lines of container `id`'s output, in order per stream, from its start
/// (or from `since`, Unix seconds), until the container is gone or the
/// receiver is dropped. A container not running yet (adopted between its
/// create and its start) is waited for, and one whose stream ended while
/// it still runs is followed again.
pub fn follow(
    docker: Docker,
    id: String,
    since: Option<i32>,
) -> mpsc::Receiver<(LogStream, Vec<u8>)> {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let mut since = since;
        let mut lines = Lines::default();
        // Polls of a container not running yet, in a row.
        let mut polls = 0;
        loop {
            if !stream_into(&docker, &id, since, &mut lines, &tx).await {
                return;
            }
            match state(&docker, &id).await {
                None => break,
                Some(Running::Yes) => {
                    // The stream ended under a live container: on from now.
                    since = Some(now_unix());
                    polls = 0;
                }
                Some(Running::NotYet) => {
                    polls += 1;
                    tokio::time::sleep(crate::retry::pause(polls, RETRY_MIN, RETRY_MAX)).await;
                }
                Some(Running::Ended) => break,
            }
        }
        for (stream, line) in lines.rest() {
            let _ = tx.send((stream, line)).await;
        }
    });
    rx
}

/// First and longest pause before a container that does not run yet is
/// looked at again.
const RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(100);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a container runs.
enum Running {
    Yes,
    /// Created, not started.
    NotYet,
    /// Exited, dead or being removed.
    Ended,
}

async fn state(docker: &Docker, id: &str) -> Option<Running> {
    use bollard::models::ContainerStateStatusEnum as S;
    let inspected = docker.inspect_container(id, None).await.ok()?;
    Some(match inspected.state.and_then(|s| s.status) {
        Some(S::RUNNING | S::RESTARTING | S::PAUSED) => Running::Yes,
        Some(S::CREATED) => Running::NotYet,
        _ => Running::Ended,
    })
}

/// Streams the container's output into `tx` until the engine ends the
/// stream; false when the receiver is gone.
async fn stream_into(
    docker: &Docker,
    id: &str,
    since: Option<i32>,
    lines: &mut Lines,
    tx: &mpsc::Sender<(LogStream, Vec<u8>)>,
) -> bool {
    let mut options = LogsOptionsBuilder::new()
        .follow(true)
        .stdout(true)
        .stderr(true);
    if let Some(since) = since {
        options = options.since(since);
    }
    let mut chunks = docker.logs(id, Some(options.build()));
    while let Some(Ok(chunk)) = chunks.next().await {
        let (stream, bytes) = match chunk {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (LogStream::Stdout, message)
            }
            LogOutput::StdErr { message } => (LogStream::Stderr, message),
            LogOutput::StdIn { .. } => continue,
        };
        for line in lines.push(stream, &bytes) {
            if tx.send((stream, line)).await.is_err() {
                return false;
            }
        }
    }
    true
}

/// Now, in Unix seconds (the engine's `since`).
pub fn now_unix() -> i32 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// The partial line of each stream.
#[derive(Default)]
struct Lines {
    out: Vec<u8>,
    err: Vec<u8>,
}

impl Lines {
    fn buffer(&mut self, stream: LogStream) -> &mut Vec<u8> {
        match stream {
            LogStream::Stdout => &mut self.out,
            LogStream::Stderr => &mut self.err,
        }
    }

    /// The whole lines `bytes` completes, without their line ends.
    fn push(&mut self, stream: LogStream, bytes: &[u8]) -> Vec<Vec<u8>> {
        let buffer = self.buffer(stream);
        let mut done = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(buffer);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                done.push(line);
            } else if buffer.len() < LINE_MAX {
                buffer.push(b);
            } else if buffer.len() == LINE_MAX {
                buffer.extend_from_slice(b" [cut]");
            }
        }
        done
    }

    /// What is left without a line end, when the output ends.
    fn rest(self) -> Vec<(LogStream, Vec<u8>)> {
        [(LogStream::Stdout, self.out), (LogStream::Stderr, self.err)]
            .into_iter()
            .filter(|(_, b)| !b.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_become_lines_per_stream() {
        let mut lines = Lines::default();
        assert!(lines.push(LogStream::Stdout, b"Server listen").is_empty());
        assert_eq!(
            lines.push(LogStream::Stderr, b"warn\r\nx"),
            [b"warn".to_vec()]
        );
        assert_eq!(
            lines.push(LogStream::Stdout, b"ing on 22\nAccepted\n"),
            [b"Server listening on 22".to_vec(), b"Accepted".to_vec()]
        );
        assert_eq!(lines.rest(), [(LogStream::Stderr, b"x".to_vec())]);
        let mut long = Lines::default();
        let line = long.push(LogStream::Stdout, &[b'a'; LINE_MAX + 10]);
        assert!(line.is_empty());
        let line = long.push(LogStream::Stdout, b"\n");
        assert_eq!(line[0].len(), LINE_MAX + 6);
        assert!(line[0].ends_with(b" [cut]"));
    }
}
