//! The text of the live view: the terminal table that fits the window,
//! the plain and the JSON line per stage change.

use super::{LiveNode, Row, is_settled};
use core_fsm::ids::LeaseId;
use core_fsm::node::Lifecycle;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How much of the terminal the table may use.
#[derive(Clone, Copy)]
pub(super) struct Fit {
    /// Columns: each line is cut to one less.
    pub(super) width: usize,
    /// Node rows at most.
    pub(super) rows: usize,
}

/// The terminal's columns and lines (80x24 when it does not say).
pub(super) fn terminal_size() -> (usize, usize) {
    match rustix::termios::tcgetwinsize(std::io::stdout()) {
        Ok(size) if size.ws_col > 0 && size.ws_row > 0 => {
            (usize::from(size.ws_col), usize::from(size.ws_row))
        }
        _ => (80, 24),
    }
}

/// The terminal table: a header of stage counts, then the rows (failed and
/// moving nodes before settled ones), as many as fit.
pub(super) fn tty_table<'a>(rows: impl Iterator<Item = &'a Row>, now_ms: u128, fit: Fit) -> String {
    let mut rows: Vec<&Row> = rows.collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        *counts.entry(format!("{:?}", row.live.stage)).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut lines = vec![format!(
        "drover up: {} node(s) at {}: {}",
        rows.len(),
        seconds(now_ms),
        counts.join(", ")
    )];
    // Failed first, then those still moving, then settled; by name within.
    let rank = |r: &Row| match r.live.stage {
        Lifecycle::Failed => 0,
        s if is_settled(s) => 2,
        _ => 1,
    };
    rows.sort_by_key(|r| rank(r));
    let shown = if rows.len() > fit.rows {
        fit.rows.saturating_sub(1).max(1)
    } else {
        rows.len()
    };
    for row in rows.iter().take(shown) {
        let n = &row.live;
        let elapsed = row.settled_ms.unwrap_or(now_ms);
        let mark = match (n.stage, n.ready) {
            (Lifecycle::Failed, _) => "x",
            (_, true) => "+",
            _ => " ",
        };
        let mut out = String::new();
        let _ = write!(
            out,
            "{mark} {:<24} {:<16} {:<22} {:>8}",
            n.id.as_str(),
            format!("{:?}", n.stage),
            row.lease.as_ref().map_or("-", |l| l.as_str()),
            seconds(elapsed)
        );
        if let Some(reason) = &n.failed_reason {
            let _ = write!(out, "  {reason}");
        }
        lines.push(out);
    }
    if rows.len() > shown {
        lines.push(format!("  ... and {} more", rows.len() - shown));
    }
    let mut out = String::new();
    for line in lines {
        out.push_str(&cut(&line, fit.width.saturating_sub(1).max(1)));
        out.push('\n');
    }
    out
}

pub(super) fn json_line(node: &LiveNode, lease: Option<&LeaseId>) -> String {
    serde_json::json!({
        "event": "node", "id": node.id, "stage": node.stage,
        "ready": node.ready, "failed_reason": node.failed_reason,
        "lease": lease,
    })
    .to_string()
}

pub(super) fn plain_line(node: &LiveNode, lease: Option<&LeaseId>, elapsed_ms: u128) -> String {
    let reason = node
        .failed_reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    format!(
        "{:>8} {:<24} {:<16} {}{}",
        seconds(elapsed_ms),
        node.id.as_str(),
        format!("{:?}", node.stage),
        lease.map_or("-", |l| l.as_str()),
        reason
    )
}

/// `1.234s`.
fn seconds(ms: u128) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

/// `text` cut to at most `max` characters (control characters, which
/// would move the cursor, become spaces).
fn cut(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
