//! The harness of `stage_process.rs`: a `drover-worker stage` process
//! spoken to over the stage protocol, every wait bounded.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use workers::wire::{FrameError, FrameReader, Input, OutputKind, Reply, Request, write_frame};

/// The bound on every wait for a worker: a reply, a stderr line, its exit.
pub const BOUND: Duration = Duration::from_secs(60);

pub struct Worker {
    pub child: Child,
    pub stdin: ChildStdin,
    /// Its replies as they come, read on a thread of their own; the channel
    /// closes when its stdout does.
    pub replies: Receiver<Result<Reply, String>>,
    /// Its stderr lines as they come.
    pub stderr: Receiver<String>,
}

impl Worker {
    /// `drover-worker stage ARGS..` and its first reply.
    pub fn spawn(args: &[&std::ffi::OsStr]) -> (Worker, Reply) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
            .arg("stage")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn drover-worker");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = FrameReader::new(child.stdout.take().expect("stdout"));
        let replies = fed_by(move || match stdout.read::<Reply>() {
            Err(FrameError::Closed) => None,
            read => Some(read.map_err(|e| e.to_string())),
        });
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let stderr = fed_by(move || lines.next()?.ok());
        let mut worker = Worker {
            child,
            stdin,
            replies,
            stderr,
        };
        let first = worker.reply();
        (worker, first)
    }

    /// A stage of TinyStories 260K, one thread, and its `Ready`.
    pub fn start(layers: &str) -> (Worker, Reply) {
        let model = super::common::stories();
        let args = [
            "--ctx",
            "64",
            "--threads",
            "1",
            "--layers",
            layers,
            "--model",
        ];
        let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        args.push(model.as_os_str());
        Worker::spawn(&args)
    }

    /// A worker started as an agent starts it: no model, `Hello` first.
    pub fn bare() -> (Worker, Reply) {
        Worker::spawn(&[])
    }

    pub fn ask(&mut self, r: &Request) -> Reply {
        write_frame(&mut self.stdin, r).expect("send");
        self.reply()
    }

    /// Its next reply, waited for at most [`BOUND`].
    pub fn reply(&mut self) -> Reply {
        match self.replies.recv_timeout(BOUND) {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => panic!("its stdout: {e}"),
            Err(e) => {
                let _ = self.child.kill();
                let said: Vec<String> = self.stderr.try_iter().collect();
                panic!("no reply within {BOUND:?} ({e}); its stderr: {said:#?}");
            }
        }
    }

    /// Its first stderr line that holds `part`, waited for at most
    /// [`BOUND`]; the lines before it are skipped.
    pub fn stderr_line(&mut self, part: &str) -> String {
        let deadline = Instant::now() + BOUND;
        let mut said = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(part) => return line,
                Ok(line) => said.push(line),
                Err(e) => {
                    let _ = self.child.kill();
                    panic!("no stderr line with {part:?} within {BOUND:?} ({e}): {said:#?}");
                }
            }
        }
    }

    /// Closes its stdin (a clean stop) and waits, at most [`BOUND`], for
    /// it to exit: its stdout closes when it does, which is the event
    /// waited on. A reply meanwhile is a failure.
    pub fn exit(self) -> ExitStatus {
        let Worker {
            mut child,
            stdin,
            replies,
            ..
        } = self;
        drop(stdin);
        match replies.recv_timeout(BOUND) {
            Err(RecvTimeoutError::Disconnected) => child.wait().expect("wait"),
            other => {
                let _ = child.kill();
                panic!("no exit within {BOUND:?}: {other:?}");
            }
        }
    }
}

/// A channel fed, on a thread of its own, with what `next` gives until it
/// gives `None` or nobody listens.
fn fed_by<T: Send + 'static>(mut next: impl FnMut() -> Option<T> + Send + 'static) -> Receiver<T> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        while let Some(item) = next() {
            if sender.send(item).is_err() {
                return;
            }
        }
    });
    receiver
}

pub fn forward(seq: u64, pos: u32, input: Input, output: OutputKind) -> Request {
    Request::Forward {
        seq,
        pos,
        input,
        output,
    }
}
