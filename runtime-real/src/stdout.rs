//! What the `drover` commands print on stdout, without `println!`'s panic
//! when the reader has gone: `drover logs ... | head` ends quietly once
//! `head` has its lines, and `drover down | head -1` still destroys every
//! lease after its reader left.

use std::io::Write;

/// Writes `text` and a newline to stdout and flushes; false when that
/// failed (its reader closed the pipe, most likely), which the caller may
/// take as the end of a listing or ignore.
pub fn line(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .is_ok()
}

/// [`line`] without the newline (`text` carries its own).
pub fn text(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}
