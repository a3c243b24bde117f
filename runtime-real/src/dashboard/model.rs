//! [`Model`]: what the page shows, as the server last read it: one card per
//! node, the group counters, the pipeline document, and each node's log
//! tail. [`Model::apply`] turns a [`Reading`] into the events that tell a
//! page what changed.

use crate::cli::{Ledger, NodeRow};
use crate::up::control::LiveNode;
use core_fsm::node::Lifecycle;
use core_fsm::plan::{ProviderKind, RunPlan};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// Log lines kept per node for the card's tail.
pub const LOG_TAIL: usize = 200;

/// Milliseconds since the Unix epoch (the page computes ages from it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One node's card.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Card {
    /// The logical node.
    pub id: String,
    /// Its group.
    pub group: String,
    /// Its lifecycle stage (`Dormant`, `Destroyed`, ...).
    pub stage: Lifecycle,
    /// Handed off and dormant.
    pub ready: bool,
    /// The provider of its lease (or of its group, before it has one).
    pub provider: Option<ProviderKind>,
    /// Its current lease.
    pub lease: Option<String>,
    /// Where its SSH endpoint is, when the lease says.
    pub endpoint: Option<String>,
    /// Its agent, once joined.
    pub agent: Option<String>,
    /// Why it failed.
    pub failed_reason: Option<String>,
    /// A destroy or replacement was asked.
    pub destroy_requested: bool,
    /// The GPU, when the lease or shape names one.
    pub gpu: Option<String>,
    /// Dollars per hour, as the offer said (local, static, docker: 0).
    pub usd_per_hour: Option<f64>,
    /// When this server first saw the current lease (Unix ms; a lease
    /// there when the server started: its start).
    pub lease_since_ms: Option<u64>,
    /// When this server saw the current stage begin (Unix ms).
    pub stage_since_ms: Option<u64>,
    /// What membership says of its agent while `up` runs.
    pub liveness: Option<core_fsm::membership::Liveness>,
    /// When its agent's last heartbeat arrived (Unix ms), while `up` runs.
    pub last_heartbeat_ms: Option<u64>,
}

/// A group's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupCount {
    /// The group.
    pub group: String,
    /// Nodes ready.
    pub ready: u32,
    /// Nodes the plan wants (or the operator's last +1 / -1).
    pub desired: u32,
}

/// One log line of a node: its datastream byte position and its text as
/// `drover logs` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// The node.
    pub node: String,
    /// The byte offset in `<state>/datastream/<node>.ndjson` after the line.
    pub offset: u64,
    /// The formatted line.
    pub line: String,
}

/// What the watcher read since the last tick (each part `None` when that
/// source did not change).
#[derive(Debug, Default)]
pub struct Reading {
    /// The cards, as the journal, the live view and the plan say now.
    pub cards: Option<Vec<Card>>,
    /// The group counters.
    pub groups: Option<Vec<GroupCount>>,
    /// The run id.
    pub run_id: Option<u64>,
    /// Journal records read so far.
    pub journal_records: usize,
    /// The pipeline document (`Some(None)`: the file is gone).
    pub pipeline: Option<Option<serde_json::Value>>,
    /// New log lines, in file order per node.
    pub lines: Vec<LogLine>,
    /// Whether a `drover up` runs on the state dir, when that changed.
    pub up_running: Option<bool>,
}

/// The page's state.
#[derive(Debug)]
pub struct Model {
    read_only: bool,
    run_id: Option<u64>,
    journal_records: usize,
    cards: BTreeMap<String, Card>,
    groups: Vec<GroupCount>,
    pipeline: Option<serde_json::Value>,
    logs: BTreeMap<String, VecDeque<LogLine>>,
    up_running: bool,
    /// A reading was applied: later leases and stages are timed.
    loaded: bool,
    /// What the leases that ended cost while this server saw them.
    usd_closed: f64,
}

impl Model {
    /// An empty model; `read_only`: no prompt box (a stopped run).
    pub fn new(read_only: bool) -> Model {
        Model {
            read_only,
            run_id: None,
            journal_records: 0,
            cards: BTreeMap::new(),
            groups: Vec::new(),
            pipeline: None,
            logs: BTreeMap::new(),
            up_running: false,
            loaded: false,
            usd_closed: 0.0,
        }
    }

    /// Everything, for a page that starts (or resyncs).
    pub fn snapshot(&self) -> serde_json::Value {
        self.snapshot_at(unix_ms())
    }

    /// [`Model::snapshot`] at `now` (Unix ms).
    pub fn snapshot_at(&self, now: u64) -> serde_json::Value {
        let logs: BTreeMap<&String, Vec<&LogLine>> = self
            .logs
            .iter()
            .map(|(n, l)| (n, l.iter().collect()))
            .collect();
        serde_json::json!({
            "read_only": self.read_only,
            "run_id": self.run_id,
            "journal_records": self.journal_records,
            "up_running": self.up_running,
            "groups": self.groups,
            "nodes": self.cards.values().collect::<Vec<_>>(),
            "pipeline": self.pipeline,
            "logs": logs,
            "fleet_usd_per_hour": self.fleet_usd_per_hour(),
            "usd_accrued": self.usd_accrued(now),
            "server_ms": now,
        })
    }

    /// What the run's leases cost so far, as far as this server saw them:
    /// each lease's $/h over the time from when it was first seen to its
    /// end, or to `now` while it stands. A lease already there when the
    /// server started is counted from then (the figure is a lower bound for
    /// `drover dashboard` on a run that is going).
    pub fn usd_accrued(&self, now: u64) -> f64 {
        let standing: f64 = (self.cards.values())
            .filter(|c| c.lease.is_some())
            .map(|c| cost(c, now))
            .sum();
        self.usd_closed + standing
    }

    /// What the fleet's standing leases cost per hour.
    fn fleet_usd_per_hour(&self) -> f64 {
        self.cards
            .values()
            .filter(|c| c.lease.is_some())
            .filter_map(|c| c.usd_per_hour)
            .sum()
    }

    /// Applies a reading; returns the events (name, data) for the pages.
    pub fn apply(&mut self, reading: Reading) -> Vec<(&'static str, serde_json::Value)> {
        self.apply_at(reading, unix_ms())
    }

    /// [`Model::apply`] at `now` (Unix ms).
    pub fn apply_at(
        &mut self,
        reading: Reading,
        now: u64,
    ) -> Vec<(&'static str, serde_json::Value)> {
        let mut out = Vec::new();
        if let Some(run_id) = reading.run_id {
            self.run_id = Some(run_id);
        }
        self.journal_records = reading.journal_records;
        if let Some(cards) = reading.cards {
            for mut card in cards {
                let old = self.cards.get(&card.id).cloned();
                let old = old.as_ref();
                card.lease_since_ms = match old {
                    Some(o) if o.lease == card.lease => o.lease_since_ms,
                    _ if card.lease.is_some() => Some(now),
                    _ => None,
                };
                // The lease it held ended (or was replaced): its cost is in.
                if let Some(o) = old
                    && o.lease.is_some()
                    && o.lease != card.lease
                {
                    self.usd_closed += cost(o, now);
                }
                card.stage_since_ms = match old {
                    Some(o) if o.stage == card.stage => o.stage_since_ms,
                    _ if self.loaded => Some(now),
                    _ => None,
                };
                if old != Some(&card) {
                    self.cards.insert(card.id.clone(), card.clone());
                    let data = serde_json::json!({
                        "node": card, "journal": self.journal_records, "server_ms": now,
                        "fleet_usd_per_hour": self.fleet_usd_per_hour(),
                        "usd_accrued": self.usd_accrued(now),
                    });
                    out.push(("node", data));
                }
            }
        }
        if let Some(groups) = reading.groups
            && groups != self.groups
        {
            self.groups = groups;
            let data = serde_json::json!({
                "groups": self.groups, "fleet_usd_per_hour": self.fleet_usd_per_hour(),
                "usd_accrued": self.usd_accrued(now), "server_ms": now,
            });
            out.push(("groups", data));
        }
        if let Some(pipeline) = reading.pipeline {
            self.pipeline = pipeline;
            let data = serde_json::json!({ "pipeline": self.pipeline, "server_ms": now });
            out.push(("pipeline", data));
        }
        for line in reading.lines {
            let tail = self.logs.entry(line.node.clone()).or_default();
            tail.push_back(line.clone());
            if tail.len() > LOG_TAIL {
                tail.pop_front();
            }
            let mut data = serde_json::to_value(&line).unwrap_or_default();
            data["server_ms"] = now.into();
            out.push(("log", data));
        }
        if let Some(running) = reading.up_running
            && (running != self.up_running || !self.loaded)
        {
            self.up_running = running;
            let data = serde_json::json!({ "up_running": running, "server_ms": now });
            out.push(("run", data));
        }
        self.loaded = true;
        out
    }
}

/// What `card`'s current lease cost from when it was first seen to `now`.
fn cost(card: &Card, now: u64) -> f64 {
    let (Some(price), Some(since)) = (card.usd_per_hour, card.lease_since_ms) else {
        return 0.0;
    };
    price * now.saturating_sub(since) as f64 / 3_600_000.0
}

/// The cards and group counters from the plan, the journal's ledger and
/// (while `up` runs) its live view.
pub fn fleet(
    plan: Option<&RunPlan>,
    ledger: &Ledger,
    live: &[LiveNode],
) -> (Vec<Card>, Vec<GroupCount>) {
    let mut cards: BTreeMap<String, Card> = BTreeMap::new();
    let mut groups = Vec::new();
    // The operator's +1 / -1 (journaled) replace the plan's counts.
    let plan = plan.map(|plan| {
        let mut plan = plan.clone();
        for group in &mut plan.groups {
            if let Some(count) = ledger.desired.get(&group.group_id) {
                group.count = *count;
            }
        }
        plan
    });
    let plan = plan.as_ref();
    if let Some(plan) = plan {
        for node in core_fsm::plan::expand(plan) {
            let shape_gpu = node.shape.gpu_name.clone().map(|g| g.to_string());
            let card = blank(
                node.node_id.as_str(),
                node.group_id.as_str(),
                Some(node.provider),
            );
            let card = Card {
                gpu: shape_gpu,
                ..card
            };
            cards.insert(card.id.clone(), card);
        }
    }
    for row in ledger.nodes.values() {
        let group = core_fsm::plan::parse_node_id(&row.id)
            .and_then(|(group, _)| std::str::from_utf8(group).ok())
            .filter(|g| plan.is_some_and(|p| p.groups.iter().any(|pg| pg.group_id.as_str() == *g)))
            .unwrap_or("");
        let card = cards
            .entry(row.id.to_string())
            .or_insert_with(|| blank(row.id.as_str(), group, None));
        from_row(card, row);
    }
    for node in live {
        if let Some(card) = cards.get_mut(node.id.as_str()) {
            card.stage = node.stage;
            card.ready = node.ready;
            card.liveness = node.liveness;
            card.last_heartbeat_ms = node.last_heartbeat_ms;
            if node.failed_reason.is_some() {
                card.failed_reason = node.failed_reason.clone();
            }
        }
    }
    if let Some(plan) = plan {
        for group in &plan.groups {
            let name = group.group_id.to_string();
            let ready = cards
                .values()
                .filter(|c| c.group == name && c.ready)
                .count() as u32;
            groups.push(GroupCount {
                group: name,
                ready,
                desired: group.count,
            });
        }
    }
    (cards.into_values().collect(), groups)
}

fn blank(id: &str, group: &str, provider: Option<ProviderKind>) -> Card {
    Card {
        id: id.to_owned(),
        group: group.to_owned(),
        stage: Lifecycle::New,
        ready: false,
        provider,
        lease: None,
        endpoint: None,
        agent: None,
        failed_reason: None,
        destroy_requested: false,
        gpu: None,
        usd_per_hour: None,
        lease_since_ms: None,
        stage_since_ms: None,
        liveness: None,
        last_heartbeat_ms: None,
    }
}

fn from_row(card: &mut Card, row: &NodeRow) {
    card.stage = row.stage;
    card.ready = row.ready;
    card.failed_reason = row.failed_reason.clone();
    card.agent = row.agent.as_ref().map(|a| a.to_string());
    card.destroy_requested = row.destroy_requested;
    let Some(lease) = &row.lease else {
        card.lease = None;
        card.endpoint = None;
        return;
    };
    card.provider = Some(lease.provider);
    card.lease = Some(lease.lease_id.to_string());
    card.endpoint = endpoint(lease);
    if let Some(gpu) = lease.metadata.get("gpu_name") {
        card.gpu = Some(gpu.clone());
    }
    card.usd_per_hour = match lease.provider {
        ProviderKind::Local | ProviderKind::Docker | ProviderKind::Static => Some(0.0),
        _ => ["dph_total", "usd_per_hour", "price"]
            .iter()
            .find_map(|k| lease.metadata.get(*k))
            .and_then(|p| p.parse().ok()),
    };
}

/// The SSH endpoint a lease names: `host:port` of a static machine, the
/// port a local node listens on.
fn endpoint(lease: &core_fsm::port::LeaseFacts) -> Option<String> {
    let meta = &lease.metadata;
    if let (Some(host), Some(port)) = (meta.get("host"), meta.get("port")) {
        return Some(format!("{host}:{port}"));
    }
    if lease.provider == ProviderKind::Local {
        let dir = meta.get("dir")?;
        let port = std::fs::read_to_string(std::path::Path::new(dir).join("port")).ok()?;
        return Some(format!("127.0.0.1:{}", port.trim()));
    }
    None
}

#[cfg(test)]
mod tests;
