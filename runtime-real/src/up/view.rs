//! What `drover up` shows: a line per node stage change, a summary table
//! once every node has settled, and the live view file `status` reads.
//! With `--json` every line is one JSON object (NDJSON).

use super::control::{LiveNode, write_live};
use core_fsm::ids::LogicalNodeId;
use core_fsm::node::Stage;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

/// The nodes as `up` last saw them.
pub struct LiveView {
    state_dir: PathBuf,
    json: bool,
    nodes: BTreeMap<LogicalNodeId, LiveNode>,
    /// Nodes that failed at some point of this run (a failed node that is
    /// destroyed later still makes the run a failure).
    pub failed: BTreeMap<LogicalNodeId, String>,
}

impl LiveView {
    /// An empty view writing under `state_dir`.
    pub fn new(state_dir: PathBuf, json: bool) -> LiveView {
        LiveView {
            state_dir,
            json,
            nodes: BTreeMap::new(),
            failed: BTreeMap::new(),
        }
    }

    /// A node's stage changed.
    pub fn changed(
        &mut self,
        id: LogicalNodeId,
        stage: Stage,
        ready: bool,
        failed_reason: Option<String>,
    ) {
        if stage == Stage::Failed {
            let reason = failed_reason.clone().unwrap_or_else(|| "failed".into());
            self.failed.insert(id.clone(), reason);
        }
        let node = LiveNode {
            id: id.clone(),
            stage,
            ready,
            failed_reason,
        };
        self.print_change(&node);
        self.nodes.insert(id, node);
        let nodes: Vec<LiveNode> = self.nodes.values().cloned().collect();
        write_live(&self.state_dir, &nodes);
    }

    fn print_change(&self, node: &LiveNode) {
        let line = if self.json {
            serde_json::json!({
                "event": "node", "id": node.id, "stage": node.stage,
                "ready": node.ready, "failed_reason": node.failed_reason,
            })
            .to_string()
        } else {
            let reason = node
                .failed_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            format!("{:<24} {:?}{}", node.id, node.stage, reason)
        };
        println_flush(&line);
    }

    /// Every node that is ready.
    pub fn all_ready(&self) -> bool {
        !self.nodes.is_empty() && self.nodes.values().all(|n| n.ready)
    }

    /// Prints the summary table (or one JSON object).
    pub fn print_summary(&self, wall_ms: u128) {
        if self.json {
            let nodes: Vec<_> = self.nodes.values().collect();
            let doc = serde_json::json!({ "event": "settled", "wall_ms": wall_ms, "nodes": nodes });
            println_flush(&doc.to_string());
            return;
        }
        let ready = self.nodes.values().filter(|n| n.ready).count();
        let mut out = format!(
            "all {} node(s) settled in {wall_ms} ms: {ready} ready\n",
            self.nodes.len()
        );
        out.push_str(&format!(
            "{:<24} {:<12} {:<6} reason\n",
            "node", "stage", "ready"
        ));
        for n in self.nodes.values() {
            let stage = format!("{:?}", n.stage);
            let reason = n.failed_reason.as_deref().unwrap_or("");
            out.push_str(&format!(
                "{:<24} {:<12} {:<6} {}\n",
                n.id, stage, n.ready, reason
            ));
        }
        out.push_str("running; stop with Ctrl-C, `stop` on stdin, or `drover down`\n");
        print!("{out}");
        let _ = std::io::stdout().flush();
    }

    /// The nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &LiveNode> {
        self.nodes.values()
    }
}

/// Prints a line and flushes (stdout may be a pipe a test reads).
pub fn println_flush(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
