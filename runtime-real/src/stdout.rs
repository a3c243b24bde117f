//! What the `drover` commands print on stdout and stderr, without
//! `println!`'s and `eprintln!`'s panic when the reader has gone: `drover
//! logs ... | head` ends quietly once `head` has its lines, and `drover
//! down 2>&1 | head -1` still destroys every lease after its reader left.

use std::io::Write;

/// Writes `text` to stdout and flushes.
pub fn text(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}

/// [`text`] with a newline.
pub fn line(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
}

/// A line said in passing: whatever becomes of it, the work goes on.
pub fn say(text: &str) {
    let _ = line(text);
}

/// A line on stderr: whatever becomes of it (a closed pipe, a full disk
/// under a redirected `2>`), the work goes on.
pub fn err_line(text: &str) {
    // One write: a line is not split by another process's on a shared
    // stderr (the terminal `up` and its local nodes write to).
    let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
}

/// `eprintln!` through [`err_line`]: never panics.
macro_rules! eline {
    ($($arg:tt)*) => {
        $crate::stdout::err_line(&format!($($arg)*))
    };
}
pub(crate) use eline;

/// Whether a write failed because stdout's reader closed it (`| head`):
/// the reader has what it wanted, which is no error to report.
pub fn reader_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}
