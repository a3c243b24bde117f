//! What the `drover` commands print on stdout, without `println!`'s panic
//! when the reader has gone: `drover logs ... | head` ends quietly once
//! `head` has its lines, and `drover down | head -1` still destroys every
//! lease after its reader left.

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

/// Whether a write failed because stdout's reader closed it (`| head`):
/// the reader has what it wanted, which is no error to report.
pub fn reader_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}
