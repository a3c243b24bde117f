//! The datastream: every line drover keeps about a run, appended as one
//! NDJSON line to `<state>/datastream/<node>.ndjson` (a node's output:
//! bootstrap, then its agent and worker after the handoff) or to
//! `<state>/datastream/orchestrator.ndjson` (the orchestrator's own
//! events: lifecycle, membership, stage readiness). The contract is
//! `spec/datastream.md`.
//!
//! Telemetry is observational: nothing here feeds a machine. Lines are
//! written whole (one `write` per line on an append-mode file), so a reader
//! following the file never sees half a record except at a crash.
//!
//! Sequence numbers are per (file, stream), from 1, and strictly increase:
//! the [`Writer`] is the one place that numbers a line. Bootstrap records
//! keep the machine's number unless a line forwarded after a handoff
//! already took it (a node bootstrapped again later), then they continue
//! above it. A restarted `up` continues above what the files hold.

pub mod archive;
mod line;

pub use line::{Line, ORCHESTRATOR, channel};

use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, RunId};
use core_fsm::port::{LogRecord, LogSeqs, LogStream};
use core_fsm::time::Instant;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The datastream folder of a state dir.
pub fn dir_in(state_dir: &Path) -> PathBuf {
    crate::state_dir::StateDir::at(state_dir).datastream()
}

/// The NDJSON file of one node (or of [`ORCHESTRATOR`]).
pub fn file_of(state_dir: &Path, node: &LogicalNodeId) -> PathBuf {
    dir_in(state_dir).join(format!("{}.ndjson", node.as_str()))
}

/// A line a node's agent forwarded after the handoff.
#[derive(Clone, Debug)]
pub struct Forwarded {
    /// The node.
    pub node: LogicalNodeId,
    /// Its lease, when known.
    pub lease: Option<LeaseId>,
    /// The agent process that sent it.
    pub agent: AgentId,
    /// One of [`channel::AGENT_STDOUT`], [`channel::AGENT_STDERR`],
    /// [`channel::WORKER_STDERR`], [`channel::WORKER_TELEMETRY`].
    pub channel: &'static str,
    /// The agent's own number for the line (per agent process, from 1).
    pub position: u64,
    /// The line as the agent saw it, without its newline (any bytes).
    pub bytes: Vec<u8>,
}

/// Appends lines to the datastream files, numbering them, keeping each
/// file open, and copying every line to the frame archive when there is
/// one.
pub struct Writer {
    state_dir: PathBuf,
    run_id: RunId,
    files: BTreeMap<LogicalNodeId, File>,
    /// The last seqs written per file (read from the file's tail first).
    last: BTreeMap<LogicalNodeId, LogSeqs>,
    /// The last position written per agent process.
    positions: BTreeMap<AgentId, u64>,
    archive: Option<archive::Archive>,
    epoch: std::time::Instant,
    /// Lines that could not be written (reported at exit).
    failed: u64,
}

impl Writer {
    /// A writer under `state_dir` (the folder is created on first use).
    pub fn new(state_dir: &Path) -> Writer {
        Writer::with(state_dir, RunId(0), None)
    }

    /// A writer for `run_id` that also archives every line in `archive`.
    pub fn with(state_dir: &Path, run_id: RunId, archive: Option<archive::Archive>) -> Writer {
        Writer {
            state_dir: state_dir.to_owned(),
            run_id,
            files: BTreeMap::new(),
            last: BTreeMap::new(),
            positions: BTreeMap::new(),
            archive,
            epoch: std::time::Instant::now(),
            failed: 0,
        }
    }

    /// Appends a bootstrap `record` as one line of its node's file.
    pub fn append(&mut self, record: &LogRecord) -> io::Result<()> {
        let channel = match record.stream {
            LogStream::Stdout => channel::BOOTSTRAP_STDOUT,
            LogStream::Stderr => channel::BOOTSTRAP_STDERR,
        };
        let line = Line::of(record.clone(), channel);
        let bytes = record.line.clone().into_bytes();
        self.write(line, &bytes)
    }

    /// Appends a line the provider itself printed for `node`'s lease (a
    /// Docker container's output), on `provider.stdout` / `provider.stderr`.
    pub fn provider_output(
        &mut self,
        node: &LogicalNodeId,
        lease: LeaseId,
        stream: LogStream,
        bytes: &[u8],
    ) -> io::Result<()> {
        let channel = match stream {
            LogStream::Stdout => channel::PROVIDER_STDOUT,
            LogStream::Stderr => channel::PROVIDER_STDERR,
        };
        let text = String::from_utf8_lossy(bytes).into_owned();
        let out = self.line(node, Some(lease), "provider", stream, channel, text);
        self.write(out, bytes)
    }

    /// Appends a line an agent forwarded; one it already sent (a resend
    /// after a rejoin) is dropped. Returns whether it was written.
    pub fn forwarded(&mut self, line: Forwarded) -> io::Result<bool> {
        if line.position <= self.last_position(&line.node, &line.agent) {
            return Ok(false);
        }
        let stream = match line.channel {
            channel::AGENT_STDOUT | channel::WORKER_TELEMETRY => LogStream::Stdout,
            _ => LogStream::Stderr,
        };
        let source = match line.channel {
            channel::WORKER_STDERR | channel::WORKER_TELEMETRY => "worker",
            _ => "agent",
        };
        let text = String::from_utf8_lossy(&line.bytes).into_owned();
        let mut out = self.line(&line.node, line.lease, source, stream, line.channel, text);
        out.agent = Some(line.agent.clone());
        out.position = Some(line.position);
        self.positions.insert(line.agent, line.position);
        self.write(out, &line.bytes).map(|()| true)
    }

    /// Records that the agent's lines `first..=last` are lost (its buffer
    /// overflowed while the orchestrator was unreachable): a gap line.
    pub fn gap(
        &mut self,
        node: &LogicalNodeId,
        lease: Option<LeaseId>,
        agent: &AgentId,
        first: u64,
        last: u64,
    ) -> io::Result<()> {
        let text = format!(
            "{} line(s) lost (agent positions {first}..={last}): the agent's buffer \
             overflowed while the orchestrator was unreachable",
            last.saturating_sub(first).saturating_add(1)
        );
        let mut out = self.line(node, lease, "agent", LogStream::Stderr, channel::GAP, text);
        out.agent = Some(agent.clone());
        out.position = Some(last);
        let previous = self.last_position(node, agent);
        self.positions.insert(agent.clone(), previous.max(last));
        let bytes = out.record.line.clone().into_bytes();
        self.write(out, &bytes)
    }

    /// Appends one of the orchestrator's own events (`channel` one of
    /// [`channel::LIFECYCLE`], [`channel::MEMBERSHIP`], [`channel::STAGE`],
    /// [`channel::PROMPT`])
    /// to `orchestrator.ndjson`; `about` names the node it concerns.
    pub fn event(&mut self, channel: &'static str, about: Option<&LogicalNodeId>, text: String) {
        let file = LogicalNodeId::from(ORCHESTRATOR);
        let stream = match channel {
            channel::ORCHESTRATOR_STDERR => LogStream::Stderr,
            _ => LogStream::Stdout,
        };
        let mut out = self.line(&file, None, ORCHESTRATOR, stream, channel, text);
        out.about = about.cloned();
        let bytes = out.record.line.clone().into_bytes();
        if let Err(e) = self.write(out, &bytes) {
            self.failed += 1;
            if self.failed == 1 {
                crate::stdout::eline!("drover: datastream: orchestrator events: {e}");
            }
        }
    }

    /// The highest position of `agent`'s lines in `node`'s file (0: none),
    /// where a resend after a rejoin starts.
    pub fn last_position(&mut self, node: &LogicalNodeId, agent: &AgentId) -> u64 {
        if let Some(position) = self.positions.get(agent) {
            return *position;
        }
        let found = line::last_position_in(&file_of(&self.state_dir, node), agent).unwrap_or(0);
        self.positions.insert(agent.clone(), found);
        found
    }

    /// Syncs every open file (before a handoff is declared, at exit) and
    /// reports lines the archive could not take.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(archive) = &self.archive
            && archive.failed() > 0
        {
            crate::stdout::eline!(
                "drover: frame log {}: {} record(s) could not be written",
                archive.path().display(),
                archive.failed()
            );
        }
        for file in self.files.values_mut() {
            file.sync_data()?;
        }
        Ok(())
    }

    /// A line of `node`'s file, not yet numbered.
    fn line(
        &self,
        node: &LogicalNodeId,
        lease: Option<LeaseId>,
        source: &str,
        stream: LogStream,
        channel: &'static str,
        text: String,
    ) -> Line {
        let at = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let record = LogRecord {
            run_id: self.run_id,
            node: node.clone(),
            lease_id: lease.unwrap_or_else(|| LeaseId::from("")),
            source: source.to_owned(),
            stream,
            seq: 0,
            at: Instant(at),
            line: text,
        };
        Line::of(record, channel)
    }

    /// Numbers `line` in its file and stream, writes it, archives it.
    fn write(&mut self, mut line: Line, bytes: &[u8]) -> io::Result<()> {
        let node = line.record.node.clone();
        // The plan admits only safe ids; a node restored from an edited
        // journal may not be: its line is refused, nothing else is lost.
        if !is_safe_file_stem(node.as_str()) {
            return Err(unsafe_id(&node));
        }
        let last = self.last_seqs(&node);
        let stream = line.record.stream;
        let seq = line.record.seq.max(last.get(stream).saturating_add(1));
        line.record.seq = seq;
        let mut text = serde_json::to_vec(&line).map_err(io::Error::other)?;
        text.push(b'\n');
        let file = match self.files.entry(node.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                std::fs::create_dir_all(dir_in(&self.state_dir))?;
                let path = file_of(&self.state_dir, &node);
                e.insert(OpenOptions::new().create(true).append(true).open(path)?)
            }
        };
        file.write_all(&text)?;
        let seqs = self.last.entry(node).or_default();
        match stream {
            LogStream::Stdout => seqs.stdout = seq,
            LogStream::Stderr => seqs.stderr = seq,
        }
        if let Some(archive) = &mut self.archive {
            archive.record(&line, bytes);
        }
        Ok(())
    }

    fn last_seqs(&mut self, node: &LogicalNodeId) -> LogSeqs {
        if let Some(seqs) = self.last.get(node) {
            return *seqs;
        }
        let path = file_of(&self.state_dir, node);
        let seqs = crate::up::seqs::last_seqs(&path).unwrap_or_default();
        self.last.insert(node.clone(), seqs);
        seqs
    }
}

/// A [`Writer`] shared by the effect sink and the control plane's log
/// streams.
#[derive(Clone)]
pub struct Hub(Arc<Mutex<Writer>>);

impl Hub {
    /// Shares `writer`.
    pub fn new(writer: Writer) -> Hub {
        Hub(Arc::new(Mutex::new(writer)))
    }

    /// Runs `f` on the writer (never across an await).
    pub fn with<T>(&self, f: impl FnOnce(&mut Writer) -> T) -> T {
        let mut writer = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut writer)
    }

    /// [`Writer::event`].
    pub fn event(&self, channel: &'static str, about: Option<&LogicalNodeId>, text: String) {
        self.with(|w| w.event(channel, about, text));
    }
}

/// Reads a file's lines; a malformed line (a crash mid-write) is skipped
/// and counted.
pub fn read(state_dir: &Path, node: &LogicalNodeId) -> io::Result<(Vec<Line>, u64)> {
    let file = match File::open(file_of(state_dir, node)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((vec![], 0)),
        Err(e) => return Err(e),
    };
    let mut lines = Vec::new();
    let mut skipped = 0;
    for text in BufReader::new(file).lines() {
        match parse_line(&text?) {
            Some(line) => lines.push(line),
            None => skipped += 1,
        }
    }
    Ok((lines, skipped))
}

/// Parses one NDJSON line (for `logs --follow`); lines written before
/// channels existed get theirs from their stream.
pub fn parse_line(text: &str) -> Option<Line> {
    let mut line: Line = serde_json::from_str(text).ok()?;
    if line.channel.is_empty() {
        line.channel = match line.record.stream {
            LogStream::Stdout => channel::BOOTSTRAP_STDOUT.to_owned(),
            LogStream::Stderr => channel::BOOTSTRAP_STDERR.to_owned(),
        };
    }
    Some(line)
}

/// One line as a person reads it: `workers-0 agent.stdout #3 t=10ms | the line`.
pub fn format(line: &Line) -> String {
    let r = &line.record;
    let subject = line.about.as_ref().unwrap_or(&r.node);
    format!(
        "{subject} {} #{} {} | {}",
        line.channel, r.seq, r.at, r.line
    )
}

/// The error for a node id that cannot name a file.
pub fn unsafe_id(node: &LogicalNodeId) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "logical node id {:?} is not a safe file name (letters, digits, `-`, `_`, `.`)",
            node.as_str()
        ),
    )
}

/// Whether `s` names a file in the datastream folder and nothing else.
pub fn is_safe_file_stem(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s != "."
        && s != ".."
}

#[cfg(test)]
mod tests;
