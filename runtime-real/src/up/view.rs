//! What `drover up` shows while it runs:
//!
//! - on a terminal, a compact table redrawn in place: one row per node with
//!   its stage, lease and elapsed time (frozen once the node settles), under
//!   a header counting nodes per stage; at most [`TTY_ROWS`] rows, the
//!   failed and moving nodes first;
//! - otherwise (a pipe, a file), one plain line per stage change;
//! - with `--json`, one JSON object per line (NDJSON).
//!
//! Then a summary table once every node settled, and the live view file
//! `status` reads.

mod render;

use super::control::{LiveNode, write_live};
use core_fsm::ids::{LeaseId, LogicalNodeId};
use core_fsm::node::Lifecycle;
use render::{Fit, json_line, plain_line, terminal_size, tty_table};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

/// Most node rows the terminal table shows (so a redraw never scrolls).
pub const TTY_ROWS: usize = 20;

/// How the view writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// NDJSON lines.
    Json,
    /// One line per change.
    Plain,
    /// A table redrawn in place (stdout is a terminal).
    Tty,
}

impl Mode {
    /// JSON when asked, else a table on a terminal, plain lines elsewhere.
    pub fn detect(json: bool) -> Mode {
        if json {
            Mode::Json
        } else if std::io::stdout().is_terminal() {
            Mode::Tty
        } else {
            Mode::Plain
        }
    }
}

/// One node as the view keeps it.
struct Row {
    live: LiveNode,
    lease: Option<LeaseId>,
    /// Milliseconds from the start of `up` to the node's settling.
    settled_ms: Option<u128>,
}

/// The nodes as `up` last saw them.
pub struct LiveView {
    state_dir: PathBuf,
    mode: Mode,
    started: Instant,
    nodes: BTreeMap<LogicalNodeId, Row>,
    /// Nodes that failed at some point of this run (a failed node that is
    /// destroyed later still makes the run a failure).
    pub failed: BTreeMap<LogicalNodeId, String>,
    /// Lines of the table currently on the terminal (erased on redraw).
    drawn: usize,
}

impl LiveView {
    /// An empty view writing under `state_dir`.
    pub fn new(state_dir: PathBuf, mode: Mode) -> LiveView {
        LiveView {
            state_dir,
            mode,
            started: Instant::now(),
            nodes: BTreeMap::new(),
            failed: BTreeMap::new(),
            drawn: 0,
        }
    }

    /// A node's stage changed; `lease` is its lease, when it has one.
    pub fn changed(&mut self, mut node: LiveNode, lease: Option<LeaseId>) {
        if let Some(old) = self.nodes.get(&node.id) {
            node.liveness = node.liveness.or(old.live.liveness);
            node.last_heartbeat_ms = node.last_heartbeat_ms.or(old.live.last_heartbeat_ms);
        }
        if node.liveness == Some(core_fsm::membership::Liveness::Dead) {
            node.ready = false;
        }
        if node.stage == Lifecycle::Failed {
            let reason = node
                .failed_reason
                .clone()
                .unwrap_or_else(|| "failed".into());
            self.failed.insert(node.id.clone(), reason);
        }
        let elapsed = self.started.elapsed().as_millis();
        let settled_ms = is_settled(node.stage).then_some(elapsed);
        match self.mode {
            Mode::Json => println_flush(&json_line(&node, lease.as_ref())),
            Mode::Plain => println_flush(&plain_line(&node, lease.as_ref(), elapsed)),
            Mode::Tty => {}
        }
        let row = Row {
            live: node,
            lease,
            settled_ms,
        };
        self.nodes.insert(row.live.id.clone(), row);
        self.redraw();
        let nodes: Vec<LiveNode> = self.nodes.values().map(|r| r.live.clone()).collect();
        write_live(&self.state_dir, &nodes);
    }

    /// Membership's word on a node's agent: a Dead node is never ready and
    /// stays failed (nothing repairs it).
    pub fn liveness(&mut self, node: &LogicalNodeId, liveness: core_fsm::membership::Liveness) {
        use core_fsm::membership::Liveness;
        let Some(row) = self.nodes.get_mut(node) else {
            return;
        };
        let before = row.live.liveness.replace(liveness);
        // A node being torn down loses its agent on purpose.
        if matches!(row.live.stage, Lifecycle::Destroying | Lifecycle::Destroyed) {
            self.save();
            return;
        }
        // A node whose Dormant came before its new agent's first heartbeat
        // (a replacement keeps the Dead of the agent it replaced until
        // then) is ready once that agent is Alive.
        if liveness == Liveness::Alive && row.live.stage == Lifecycle::Dormant {
            row.live.ready = true;
        }
        if liveness == Liveness::Dead {
            row.live.ready = false;
            let reason = "its agent stopped heartbeating (Dead)".to_owned();
            row.live.failed_reason = Some(reason.clone());
            self.failed.insert(node.clone(), reason);
        }
        if before.is_some_and(|b| b != liveness) || liveness != Liveness::Alive {
            let line = match self.mode {
                Mode::Json => {
                    serde_json::json!({"event": "liveness", "id": node, "liveness": liveness})
                        .to_string()
                }
                _ => format!("{node}: agent {liveness:?}"),
            };
            self.message(&line);
        }
        self.save();
    }

    /// A heartbeat of a node's agent arrived now (the file is rewritten at
    /// most once a second for it).
    pub fn heartbeat(&mut self, node: &LogicalNodeId) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let Some(row) = self.nodes.get_mut(node) else {
            return;
        };
        let stale = row
            .live
            .last_heartbeat_ms
            .is_none_or(|t| now.saturating_sub(t) >= 1000);
        if stale {
            row.live.last_heartbeat_ms = Some(now);
            self.save();
        }
    }

    fn save(&self) {
        let nodes: Vec<LiveNode> = self.nodes.values().map(|r| r.live.clone()).collect();
        write_live(&self.state_dir, &nodes);
    }

    /// Redraws the terminal table (elapsed times move); nothing otherwise.
    pub fn tick(&mut self) {
        self.redraw();
    }

    /// A line typed on the terminal was echoed below the table: the next
    /// erase takes it too, so the table is redrawn where it stands (else
    /// the redraw would start a line low and leave the old header behind).
    pub fn typed_line(&mut self) {
        if self.mode == Mode::Tty && self.drawn > 0 {
            self.drawn += 1;
        }
    }

    /// Whether a terminal table is shown (and wants ticks).
    pub fn is_tty(&self) -> bool {
        self.mode == Mode::Tty
    }

    /// A line of `up`'s own (not JSON): above the table on a terminal.
    pub fn message(&mut self, line: &str) {
        if self.mode == Mode::Json {
            return println_flush(line);
        }
        let mut out = self.erase();
        out.push_str(line);
        out.push('\n');
        self.drawn = 0;
        let _ = crate::stdout::text(&out);
        crate::say::stdout_line(line);
        self.redraw();
    }

    /// Whether `node` is ready.
    pub fn is_ready(&self, node: &LogicalNodeId) -> bool {
        self.nodes.get(node).is_some_and(|n| n.live.ready)
    }

    /// Every node that is ready.
    pub fn all_ready(&self) -> bool {
        !self.nodes.is_empty() && self.nodes.values().all(|n| n.live.ready)
    }

    /// Prints the summary table (or one JSON object); on a terminal it
    /// replaces the live table, which starts again below it.
    pub fn print_summary(&mut self, wall_ms: u128) {
        if self.mode == Mode::Json {
            let nodes: Vec<_> = self.nodes.values().map(|r| &r.live).collect();
            let doc = serde_json::json!({ "event": "settled", "wall_ms": wall_ms, "nodes": nodes });
            return println_flush(&doc.to_string());
        }
        let ready = self.nodes.values().filter(|n| n.live.ready).count();
        let erase = self.erase();
        let mut out = String::new();
        self.drawn = 0;
        let _ = writeln!(
            out,
            "all {} node(s) settled in {wall_ms} ms: {ready} ready",
            self.nodes.len()
        );
        let _ = writeln!(
            out,
            "{:<24} {:<16} {:<22} {:<6} reason",
            "node", "stage", "lease", "ready"
        );
        for row in self.nodes.values() {
            let n = &row.live;
            let _ = writeln!(
                out,
                "{:<24} {:<16} {:<22} {:<6} {}",
                n.id.as_str(),
                format!("{:?}", n.stage),
                row.lease.as_ref().map_or("-", |l| l.as_str()),
                n.ready,
                n.failed_reason.as_deref().unwrap_or("")
            );
        }
        out.push_str("running; stop with Ctrl-C, `stop` on stdin, or `drover down`\n");
        let _ = crate::stdout::text(&format!("{erase}{out}"));
        for line in out.lines() {
            crate::say::stdout_line(line);
        }
    }

    /// The nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &LiveNode> {
        self.nodes.values().map(|r| &r.live)
    }

    /// The escape sequence that erases the table drawn last.
    fn erase(&self) -> String {
        if self.mode != Mode::Tty || self.drawn == 0 {
            return String::new();
        }
        // Up to the table's first line, then clear to the end of the screen.
        format!("\x1b[{}F\x1b[J", self.drawn)
    }

    fn redraw(&mut self) {
        if self.mode != Mode::Tty || self.nodes.is_empty() {
            return;
        }
        let now = self.started.elapsed().as_millis();
        let (width, height) = terminal_size();
        // Rows that fit, so the table never scrolls (which would break the
        // erase) and never wraps (each line is cut to the width).
        let fit = Fit {
            width,
            rows: TTY_ROWS.min(height.saturating_sub(4)).max(1),
        };
        let table = tty_table(self.nodes.values(), now, fit);
        let mut out = self.erase();
        out.push_str(&table);
        self.drawn = table.lines().count();
        let _ = crate::stdout::text(&out);
    }
}

/// Dormant, Failed and Destroyed nodes have settled: their clock stops.
fn is_settled(stage: Lifecycle) -> bool {
    matches!(
        stage,
        Lifecycle::Dormant | Lifecycle::Failed | Lifecycle::Destroyed
    )
}

/// Prints a line and flushes (stdout may be a pipe a test reads).
pub fn println_flush(line: &str) {
    crate::stdout::say(line);
    crate::say::stdout_line(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, stage: Lifecycle, lease: Option<&str>, settled_ms: Option<u128>) -> Row {
        Row {
            live: LiveNode {
                id: LogicalNodeId::from(id),
                stage,
                ready: stage == Lifecycle::Dormant,
                failed_reason: (stage == Lifecycle::Failed).then(|| "bootstrap JoinTimeout".into()),
                liveness: None,
                last_heartbeat_ms: None,
            },
            lease: lease.map(LeaseId::from),
            settled_ms,
        }
    }

    /// A replacement's Dormant that comes before its new agent's first
    /// heartbeat is not ready until that agent is Alive, then it is.
    #[test]
    fn a_replacement_dormant_before_its_agent_is_alive_becomes_ready_when_it_is() {
        use core_fsm::membership::Liveness;
        let dir = std::env::temp_dir().join(format!("drover-view-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut view = LiveView::new(dir.clone(), Mode::Json);
        let id = LogicalNodeId::from("workers-1");
        let old = row("workers-1", Lifecycle::Dormant, Some("local:1"), None);
        view.changed(old.live, old.lease);
        view.liveness(&id, Liveness::Alive);
        assert!(view.is_ready(&id));
        view.liveness(&id, Liveness::Dead);
        assert!(!view.is_ready(&id), "a Dead node is never ready");
        let new = row("workers-1", Lifecycle::Dormant, Some("local:3"), None);
        view.changed(new.live, new.lease);
        assert!(!view.is_ready(&id), "the Dead of the agent it replaced");
        view.liveness(&id, Liveness::Alive);
        assert!(view.is_ready(&id), "its new agent is Alive");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A typed line echoed under a drawn table is erased with it; with no
    /// table on the terminal, or no terminal, nothing is erased.
    #[test]
    fn a_typed_line_under_the_table_is_erased_with_it() {
        let dir = std::env::temp_dir();
        let mut tty = LiveView::new(dir.clone(), Mode::Tty);
        tty.typed_line();
        assert_eq!(tty.erase(), "", "no table drawn yet");
        tty.drawn = 3;
        assert_eq!(tty.erase(), "\x1b[3F\x1b[J");
        tty.typed_line();
        assert_eq!(tty.erase(), "\x1b[4F\x1b[J", "the echoed line too");
        let mut plain = LiveView::new(dir, Mode::Plain);
        plain.drawn = 3;
        plain.typed_line();
        assert_eq!(plain.erase(), "");
    }

    #[test]
    fn the_terminal_table_puts_failed_and_moving_nodes_first_and_is_bounded() {
        let mut rows = vec![
            row("w-0", Lifecycle::Dormant, Some("local:0"), Some(1_200)),
            row("w-1", Lifecycle::BootstrapRunning, Some("local:1"), None),
            row("w-2", Lifecycle::Failed, Some("local:2"), Some(900)),
        ];
        let snapshots = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots");
        let wide = Fit {
            width: 120,
            rows: TTY_ROWS,
        };
        insta::with_settings!({ snapshot_path => snapshots, prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("up_view_tty_table", tty_table(rows.iter(), 2_500, wide));
        });
        for i in 3..30 {
            rows.push(row(
                &format!("w-{i}"),
                Lifecycle::LeaseRequested,
                None,
                None,
            ));
        }
        let table = tty_table(rows.iter(), 2_500, wide);
        assert_eq!(table.lines().count(), 1 + TTY_ROWS, "{table}");
        assert!(table.ends_with("  ... and 11 more\n"), "{table}");
        // A narrow terminal: every line is cut, none wraps.
        let narrow = Fit { width: 40, rows: 5 };
        let table = tty_table(rows.iter(), 2_500, narrow);
        assert_eq!(table.lines().count(), 1 + 5, "{table}");
        assert!(table.lines().all(|l| l.chars().count() <= 39), "{table}");
    }

    #[test]
    fn plain_lines_name_stage_lease_and_time() {
        let r = row("w-2", Lifecycle::Failed, Some("local:2"), Some(900));
        assert_eq!(
            plain_line(&r.live, r.lease.as_ref(), 900),
            "  0.900s w-2                      Failed           local:2 (bootstrap JoinTimeout)"
        );
    }
}
