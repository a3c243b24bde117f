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

/// Lines of container `id`'s output, in order per stream, until the
/// container is gone or the receiver is dropped.
pub fn follow(docker: Docker, id: String) -> mpsc::Receiver<(LogStream, Vec<u8>)> {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let options = LogsOptionsBuilder::new()
            .follow(true)
            .stdout(true)
            .stderr(true)
            .build();
        let mut chunks = docker.logs(&id, Some(options));
        let mut lines = Lines::default();
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
                    return;
                }
            }
        }
        for (stream, line) in lines.rest() {
            let _ = tx.send((stream, line)).await;
        }
    });
    rx
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
