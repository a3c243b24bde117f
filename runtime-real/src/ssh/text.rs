//! The text that goes to a node and comes back: the start command's
//! placeholders, output split into bounded lines, the join token redacted.

/// Longest output line forwarded; longer lines are cut (and say so).
pub(super) const LINE_MAX_BYTES: usize = 16 * 1024;

/// What replaces the join token in any output line that echoes it.
pub const REDACTED: &str = "[redacted]";

/// `line` with every occurrence of `secret` replaced.
pub fn redact(line: String, secret: Option<&str>) -> String {
    match secret {
        Some(secret) if !secret.is_empty() && line.contains(secret) => {
            line.replace(secret, REDACTED)
        }
        _ => line,
    }
}

/// Splits a byte stream into lines (without their newline), bounding the
/// length of a line that never ends.
#[derive(Default)]
pub(super) struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    pub(super) fn push(&mut self, data: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        for &byte in data {
            if byte == b'\n' {
                lines.push(take_line(&mut self.partial));
            } else if self.partial.len() < LINE_MAX_BYTES {
                self.partial.push(byte);
            }
        }
        lines
    }

    pub(super) fn finish(&mut self) -> Option<String> {
        (!self.partial.is_empty()).then(|| take_line(&mut self.partial))
    }
}

fn take_line(partial: &mut Vec<u8>) -> String {
    let mut line = String::from_utf8_lossy(partial).into_owned();
    partial.clear();
    if line.ends_with('\r') {
        line.pop();
    }
    line
}

/// The values the start command's placeholders take.
pub struct Placeholders<'a> {
    /// `${ORCH_ADDR}`: the control plane's address.
    pub orch_addr: &'a str,
    /// `${LOGICAL_NODE_ID}`.
    pub node: &'a str,
    /// `${RUN_ID}`.
    pub run_id: &'a str,
    /// `${LEASE_ID}`.
    pub lease_id: &'a str,
    /// `${JOIN_TOKEN}`: the secret, only for the start command.
    pub join_token: Option<&'a str>,
}

/// `command` with its placeholders substituted.
pub fn substitute(command: &str, values: &Placeholders<'_>) -> String {
    let mut out = command
        .replace("${ORCH_ADDR}", values.orch_addr)
        .replace("${LOGICAL_NODE_ID}", values.node)
        .replace("${RUN_ID}", values.run_id)
        .replace("${LEASE_ID}", values.lease_id);
    if let Some(token) = values.join_token {
        out = out.replace("${JOIN_TOKEN}", token);
    }
    out
}
