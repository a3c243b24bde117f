//! Commands run with a bound: a hung pipeline fails the test, naming the
//! command and the bound, instead of hanging the whole run. A command's
//! stdout and stderr are read on threads of their own, and the event waited
//! on is their end, which comes when the command exits.

use super::DROVER;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// The bound on a command run to its end (a prompt, `status`, `logs`):
/// generous, so that a slow machine does not fail a test.
pub const COMMAND_BOUND: Duration = Duration::from_secs(120);

/// Everything `pipe` gives until its end, read on a thread of its own.
fn read_all(mut pipe: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        let _ = sender.send(bytes);
    });
    receiver
}

/// What `Command::output` gives of `child`, waited for at most `bound`;
/// past it the child is killed and the test fails naming `what`. An output
/// that is not piped comes back empty.
pub fn finish_within(mut child: Child, what: &str, bound: Duration) -> Output {
    let stdout = child.stdout.take().map(read_all);
    let stderr = child.stderr.take().map(read_all);
    let deadline = Instant::now() + bound;
    let mut end = |pipe: Option<Receiver<Vec<u8>>>| {
        let Some(pipe) = pipe else {
            return Vec::new();
        };
        let left = deadline.saturating_duration_since(Instant::now());
        pipe.recv_timeout(left).unwrap_or_else(|e| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{what}` did not finish within {bound:?} ({e})")
        })
    };
    let (stdout, stderr) = (end(stdout), end(stderr));
    let status = child.wait().expect("its exit status");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Runs a `drover` command to completion, at most [`COMMAND_BOUND`].
pub fn drover(state: &Path, args: &[&str]) -> Output {
    let child = Command::new(DROVER)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting drover");
    let what = format!("drover {}", args.join(" "));
    finish_within(child, &what, COMMAND_BOUND)
}

/// A `drover prompt` whose text has begun to arrive.
pub struct Streaming {
    child: Child,
    /// The command, for messages.
    what: String,
    /// The first byte of its text.
    pub first: u8,
    /// The rest of its stdout, once it ends.
    rest: Receiver<Vec<u8>>,
}

/// `drover prompt TEXT --max-tokens N` in the background, once the first
/// byte of its text arrived (at most [`COMMAND_BOUND`]).
pub fn streaming_prompt(state: &Path, text: &str, max_tokens: u32) -> Streaming {
    let max_tokens = max_tokens.to_string();
    let mut child = Command::new(DROVER)
        .arg("--state-dir")
        .arg(state)
        .args(["prompt", text, "--max-tokens", &max_tokens])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting drover prompt");
    let what = format!("drover prompt {text:?} --max-tokens {max_tokens}");
    let mut stdout = child.stdout.take().expect("its stdout");
    // Two messages: the first byte, then the rest at the end.
    let (sender, parts) = mpsc::channel();
    std::thread::spawn(move || {
        let mut first = vec![0u8];
        if stdout.read_exact(&mut first).is_ok() && sender.send(first).is_ok() {
            let mut rest = Vec::new();
            let _ = stdout.read_to_end(&mut rest);
            let _ = sender.send(rest);
        }
    });
    let first = match parts.recv_timeout(COMMAND_BOUND) {
        Ok(first) => first[0],
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{what}`: no text within {COMMAND_BOUND:?} ({e})");
        }
    };
    Streaming {
        child,
        what,
        first,
        rest: parts,
    }
}

impl Streaming {
    /// Its output once it has exited, waited for at most `bound`: its
    /// stdout is the whole text, the first byte included.
    pub fn finish(self, bound: Duration) -> Output {
        let deadline = Instant::now() + bound;
        let mut output = finish_within(self.child, &self.what, bound);
        let left = deadline.saturating_duration_since(Instant::now());
        let rest = self.rest.recv_timeout(left).unwrap_or_else(|e| {
            panic!(
                "`{}`: its stdout did not end within {bound:?} ({e})",
                self.what
            )
        });
        output.stdout = [vec![self.first], rest].concat();
        output
    }
}
