//! The watcher: every [`TICK`] it looks at the state dir's files (their
//! lengths first, so a quiet run costs a few `stat`s) and hands what
//! changed to the hub. Pages are never polled: they get the events pushed.
//!
//! Sources: `plan.json` (groups, desired counts), `journal.bin` (folded as
//! `drover status` folds it), `live.json` while `up` runs (stages between
//! journaled ones), `pipeline.json`, and `datastream/<node>.ndjson` (whole
//! lines only, from the offset read last). A journal or datastream file
//! that shrank means the state dir now holds another run: the model starts
//! over under a new epoch.

use super::hub::Hub;
use super::model::{LogLine, Model, Reading, fleet};
use crate::cli::Ledger;
use crate::state_dir::StateDir;
use crate::up::control::LiveNode;
use core_fsm::plan::RunPlan;
use std::collections::BTreeMap;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the files are looked at.
pub const TICK: Duration = Duration::from_millis(100);
/// Most log lines read from one file per tick (the rest follow next tick).
const LINES_PER_TICK_MAX: usize = 2000;

/// What was read last, to tell what changed.
#[derive(Default)]
pub struct Sources {
    state_dir: PathBuf,
    plan_bytes: Option<Vec<u8>>,
    plan: Option<RunPlan>,
    journal_len: Option<u64>,
    journal_records: usize,
    ledger: Ledger,
    live_bytes: Option<Vec<u8>>,
    live: Vec<LiveNode>,
    pipeline_bytes: Option<Vec<u8>>,
    offsets: BTreeMap<String, u64>,
    up_running: Option<bool>,
}

impl Sources {
    /// Sources under `state_dir`, nothing read yet.
    pub fn new(state_dir: &Path) -> Sources {
        Sources {
            state_dir: state_dir.to_owned(),
            ..Sources::default()
        }
    }

    /// Reads what changed and applies it to `hub` (a new run: from scratch).
    pub fn tick(&mut self, hub: &Hub, read_only: bool) {
        let mut reading = self.read();
        let reset = if reading.is_none() {
            *self = Sources::new(&self.state_dir);
            reading = self.read();
            Some(Model::new(read_only))
        } else {
            None
        };
        let reading = reading.unwrap_or_default();
        hub.apply(reset, move |model| model.apply(reading));
    }

    /// What changed; `None` when a file shrank (another run).
    fn read(&mut self) -> Option<Reading> {
        let dir = StateDir::at(&self.state_dir);
        let mut reading = Reading::default();
        let running = crate::up::control::running_pid(&self.state_dir).is_some();
        let mut fleet_changed = false;
        if self.up_running != Some(running) {
            self.up_running = Some(running);
            reading.up_running = Some(running);
            fleet_changed = true;
        }
        if let Some(bytes) = changed(&dir.plan(), &mut self.plan_bytes) {
            self.plan = bytes.and_then(|b| serde_json::from_slice(&b).ok());
            fleet_changed = true;
        }
        let journal_len = std::fs::metadata(dir.journal()).map_or(0, |m| m.len());
        if self.journal_len != Some(journal_len) {
            if self.journal_len.is_some_and(|old| journal_len < old) {
                return None;
            }
            self.journal_len = Some(journal_len);
            let recovered =
                crate::journal::Journal::read(&self.state_dir).unwrap_or_else(|_| empty_journal());
            if recovered.records.len() < self.journal_records {
                return None;
            }
            self.journal_records = recovered.records.len();
            self.ledger = Ledger::from_records(&recovered.records);
            fleet_changed = true;
        }
        if let Some(bytes) = changed(&dir.live_view(), &mut self.live_bytes) {
            self.live = bytes
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            fleet_changed = true;
        }
        if fleet_changed {
            let live: &[LiveNode] = if running { &self.live } else { &[] };
            let (cards, groups) = fleet(self.plan.as_ref(), &self.ledger, live);
            reading.cards = Some(cards);
            reading.groups = Some(groups);
        }
        reading.run_id = self.ledger.run_id.map(|r| r.0);
        reading.journal_records = self.journal_records;
        if let Some(bytes) = changed(&dir.pipeline_status(), &mut self.pipeline_bytes) {
            let doc = bytes.map(|b| {
                serde_json::from_slice(&b).unwrap_or_else(
                    |e| serde_json::json!({ "error": format!("pipeline.json: {e}") }),
                )
            });
            reading.pipeline = Some(doc);
        }
        if !self.read_logs(&dir.datastream(), &mut reading.lines) {
            return None;
        }
        Some(reading)
    }

    /// New whole lines of every node's file; `false` when one shrank.
    fn read_logs(&mut self, folder: &Path, out: &mut Vec<LogLine>) -> bool {
        let Ok(entries) = std::fs::read_dir(folder) else {
            return self.offsets.is_empty();
        };
        let mut files: Vec<(String, u64)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let node = name.strip_suffix(".ndjson")?.to_owned();
                let len = e.metadata().ok()?.len();
                crate::datastream::is_safe_file_stem(&node).then_some((node, len))
            })
            .collect();
        files.sort();
        for (node, len) in files {
            let offset = self.offsets.get(&node).copied().unwrap_or(0);
            if len < offset {
                return false;
            }
            if len == offset {
                continue;
            }
            let path = folder.join(format!("{node}.ndjson"));
            if let Ok(next) = read_lines(&path, &node, offset, out) {
                self.offsets.insert(node, next);
            }
        }
        true
    }
}

/// A journal read that failed reads as empty (the next tick tries again).
fn empty_journal() -> crate::journal::Recovered {
    crate::journal::Recovered {
        records: vec![],
        tail: crate::journal::Tail::Clean,
        good_len: 0,
    }
}

/// The file's bytes when they differ from `last` (`Some(None)`: it went
/// away); `None` when unchanged.
fn changed(path: &Path, last: &mut Option<Vec<u8>>) -> Option<Option<Vec<u8>>> {
    let now = std::fs::read(path).ok();
    if now == *last {
        return None;
    }
    *last = now.clone();
    Some(now)
}

/// Appends the whole lines of `path` from `offset` as `drover logs` prints
/// them (a line that does not parse is skipped, as there); returns the
/// offset after the last whole line read.
pub fn read_lines(
    path: &Path,
    node: &str,
    offset: u64,
    out: &mut Vec<LogLine>,
) -> std::io::Result<u64> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut reader = std::io::BufReader::new(file);
    let mut next = offset;
    let mut line = String::new();
    for _ in 0..LINES_PER_TICK_MAX {
        line.clear();
        let n = reader.read_line(&mut line)?;
        // A line without its newline is still being written.
        if n == 0 || !line.ends_with('\n') {
            break;
        }
        next += n as u64;
        if let Some(record) = crate::datastream::parse_line(line.trim_end()) {
            out.push(LogLine {
                node: node.to_owned(),
                offset: next,
                line: crate::datastream::format(&record),
            });
        }
    }
    Ok(next)
}

/// Runs [`Sources::tick`] every [`TICK`] until `stop` fires, then once
/// more (so the run's last records reach the pages) and closes the hub.
pub async fn run(
    state_dir: PathBuf,
    hub: Arc<Hub>,
    read_only: bool,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut sources = Sources::new(&state_dir);
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            _ = every.tick() => {}
        }
        sources.tick(&hub, read_only);
    }
    sources.tick(&hub, read_only);
    hub.close();
}
