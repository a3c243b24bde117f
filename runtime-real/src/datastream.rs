//! The datastream: every [`LogRecord`] the machines emit, appended as one
//! NDJSON line to `<state>/datastream/<node>.ndjson`.
//!
//! Telemetry is observational: nothing here feeds a machine. Lines are
//! written whole (one `write` per line on an append-mode file), so a reader
//! following the file never sees half a record except at a crash.

use core_fsm::ids::LogicalNodeId;
use core_fsm::port::LogRecord;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// The datastream folder of a state dir.
pub fn dir_in(state_dir: &Path) -> PathBuf {
    crate::state_dir::StateDir::at(state_dir).datastream()
}

/// The NDJSON file of one node.
pub fn file_of(state_dir: &Path, node: &LogicalNodeId) -> PathBuf {
    dir_in(state_dir).join(format!("{}.ndjson", node.as_str()))
}

/// Appends records to per-node files, keeping each file open.
pub struct Writer {
    state_dir: PathBuf,
    files: BTreeMap<LogicalNodeId, File>,
}

impl Writer {
    /// A writer under `state_dir` (the folder is created on first use).
    pub fn new(state_dir: &Path) -> Writer {
        Writer {
            state_dir: state_dir.to_owned(),
            files: BTreeMap::new(),
        }
    }

    /// Appends `record` as one line of its node's file.
    pub fn append(&mut self, record: &LogRecord) -> io::Result<()> {
        // The plan admits only safe ids; a node restored from an edited
        // journal may not be: its line is refused, nothing else is lost.
        if !is_safe_file_stem(record.node.as_str()) {
            return Err(unsafe_id(&record.node));
        }
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        let file = match self.files.entry(record.node.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                std::fs::create_dir_all(dir_in(&self.state_dir))?;
                let path = file_of(&self.state_dir, &record.node);
                e.insert(OpenOptions::new().create(true).append(true).open(path)?)
            }
        };
        file.write_all(&line)
    }

    /// Syncs every open file (before a handoff is declared, at exit).
    pub fn flush(&mut self) -> io::Result<()> {
        for file in self.files.values_mut() {
            file.sync_data()?;
        }
        Ok(())
    }
}

/// Reads a node's records; a malformed line (a crash mid-write) is skipped
/// and counted.
pub fn read(state_dir: &Path, node: &LogicalNodeId) -> io::Result<(Vec<LogRecord>, u64)> {
    let file = match File::open(file_of(state_dir, node)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((vec![], 0)),
        Err(e) => return Err(e),
    };
    let mut records = Vec::new();
    let mut skipped = 0;
    for line in BufReader::new(file).lines() {
        match serde_json::from_str(&line?) {
            Ok(record) => records.push(record),
            Err(_) => skipped += 1,
        }
    }
    Ok((records, skipped))
}

/// Parses one NDJSON line (for `logs --follow`).
pub fn parse_line(line: &str) -> Option<LogRecord> {
    serde_json::from_str(line).ok()
}

/// One record as a person reads it: `workers-0 stdout #3 | the line`.
pub fn format(record: &LogRecord) -> String {
    let stream = match record.stream {
        core_fsm::port::LogStream::Stdout => "stdout",
        core_fsm::port::LogStream::Stderr => "stderr",
    };
    format!(
        "{} {} #{} {} | {}",
        record.node, stream, record.seq, record.at, record.line
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
mod tests {
    use super::*;
    use core_fsm::Instant;
    use core_fsm::ids::RunId;
    use core_fsm::port::LogStream;

    fn record(node: &str, seq: u64, line: &str) -> LogRecord {
        LogRecord {
            run_id: RunId(1),
            node: LogicalNodeId::from(node),
            lease_id: "local:0".into(),
            source: "ssh-bootstrap".into(),
            stream: LogStream::Stdout,
            seq,
            at: Instant(seq * 10),
            line: line.into(),
        }
    }

    #[test]
    fn records_go_to_their_node_file_one_line_each() {
        let dir = std::env::temp_dir().join(format!("drover-ds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut writer = Writer::new(&dir);
        writer.append(&record("w-0", 1, "hello")).unwrap();
        writer.append(&record("w-1", 1, "other")).unwrap();
        writer
            .append(&record("w-0", 2, "with \"quotes\" and\ttab"))
            .unwrap();
        writer.flush().unwrap();
        let (w0, skipped) = read(&dir, &LogicalNodeId::from("w-0")).unwrap();
        assert_eq!(skipped, 0);
        assert_eq!(
            w0,
            vec![
                record("w-0", 1, "hello"),
                record("w-0", 2, "with \"quotes\" and\ttab")
            ]
        );
        let text = std::fs::read_to_string(file_of(&dir, &LogicalNodeId::from("w-0"))).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert_eq!(format(&w0[0]), "w-0 stdout #1 t=10ms | hello");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_node_id_that_is_not_a_file_name_is_refused_and_others_go_on() {
        let dir = std::env::temp_dir().join(format!("drover-ds-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut writer = Writer::new(&dir);
        for bad in ["../escape", "a/b", "..", ""] {
            let err = writer.append(&record(bad, 1, "x")).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}: {err}");
            assert!(err.to_string().contains("not a safe file name"), "{err}");
        }
        writer.append(&record("w-0", 1, "still written")).unwrap();
        let (w0, _) = read(&dir, &LogicalNodeId::from("w-0")).unwrap();
        assert_eq!(w0, vec![record("w-0", 1, "still written")]);
        assert!(!dir.join("escape.ndjson").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
