//! The last log sequence numbers the datastream already holds, so that a
//! restarted `up` continues numbering above them.
//!
//! The journal names a node's seqs only at handoff-like points; lines a
//! crash interrupted are in `<state>/datastream/<node>.ndjson` above them,
//! and without this their numbers would be used again
//! (`spec/provisioning.md`, "Log sequence numbers"). The read is bounded: the
//! file's tail is read in growing windows from the end until both streams
//! are seen, the file is covered or [`WINDOW_MAX`] is reached. A torn last
//! line (a crash mid-write) is ignored, as is any line that does not parse.

use crate::datastream;
use core_fsm::ids::LogicalNodeId;
use core_fsm::orchestrator::Orchestrator;
use core_fsm::port::{LogRecord, LogSeqs, LogStream};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// The first window read from a file's end.
const WINDOW_MIN: u64 = 64 * 1024;
/// The largest window read; a stream whose last line lies further back is
/// reported as 0 (the journal's number then stands).
pub const WINDOW_MAX: u64 = 4 * 1024 * 1024;

/// The largest seq of each stream found in the tail of `path`
/// (0 for a stream not found; a missing file is all zeros).
pub fn last_seqs(path: &Path) -> io::Result<LogSeqs> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LogSeqs::default()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let mut window = WINDOW_MIN;
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))?;
        let mut tail = Vec::new();
        file.by_ref().take(len - start).read_to_end(&mut tail)?;
        let (seqs, both) = scan(&tail, start > 0);
        if both || start == 0 || window >= WINDOW_MAX {
            return Ok(seqs);
        }
        window = (window * 4).min(WINDOW_MAX);
    }
}

/// Scans whole lines of `tail`: the first is skipped when the window began
/// mid-file (it may be cut), the last when no newline ends it (torn).
/// Returns the seqs and whether both streams were seen.
fn scan(tail: &[u8], cut_first: bool) -> (LogSeqs, bool) {
    let mut lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
    // What follows the last newline is empty or a torn line.
    lines.pop();
    let skip = usize::from(cut_first);
    let mut seqs = LogSeqs::default();
    let (mut out, mut err) = (false, false);
    for line in lines.into_iter().skip(skip) {
        let Ok(record) = serde_json::from_slice::<LogRecord>(line) else {
            continue;
        };
        match record.stream {
            LogStream::Stdout => {
                out = true;
                seqs.stdout = seqs.stdout.max(record.seq);
            }
            LogStream::Stderr => {
                err = true;
                seqs.stderr = seqs.stderr.max(record.seq);
            }
        }
    }
    (seqs, out && err)
}

/// Raises every node's seqs in `machine` to what its datastream file holds
/// (called between `Orchestrator::restore` and `Start`). Nodes are found
/// from the files present; a node the ledger lacks is ignored by the
/// machine. A file that cannot be read is reported and skipped.
pub fn raise_from_datastream(state_dir: &Path, machine: &mut Orchestrator) {
    let Ok(entries) = std::fs::read_dir(datastream::dir_in(state_dir)) else {
        return;
    };
    let mut nodes: Vec<LogicalNodeId> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".ndjson")?;
            Some(LogicalNodeId::from(stem))
        })
        .collect();
    nodes.sort();
    for node in nodes {
        match last_seqs(&datastream::file_of(state_dir, &node)) {
            Ok(seqs) if seqs != LogSeqs::default() => machine.raise_log_seqs(&node, seqs),
            Ok(_) => {}
            Err(e) => crate::say::err!("drover: datastream of {node}: reading its last seqs: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_fsm::ids::{LeaseId, RunId};
    use core_fsm::time::Instant;
    use std::io::Write;

    fn line(stream: LogStream, seq: u64) -> String {
        let record = LogRecord {
            run_id: RunId(1),
            node: LogicalNodeId::from("workers-0"),
            lease_id: LeaseId::from("lease-1"),
            source: "ssh-bootstrap".to_owned(),
            stream,
            seq,
            at: Instant(seq),
            line: format!("line {seq}"),
        };
        let mut text = serde_json::to_string(&record).unwrap();
        text.push('\n');
        text
    }

    /// A fresh folder of this test process.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("drover-seqs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn file_with(name: &str, text: &str) -> std::path::PathBuf {
        let path = scratch(name).join("workers-0.ndjson");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        path
    }

    #[test]
    fn last_seq_of_each_stream_and_a_torn_line_ignored() {
        let mut text = String::new();
        for seq in 1..=5 {
            text.push_str(&line(LogStream::Stdout, seq));
        }
        text.push_str(&line(LogStream::Stderr, 1));
        text.push_str(&line(LogStream::Stderr, 2));
        // A crash mid-write: half of stdout line 6, no newline.
        let torn = line(LogStream::Stdout, 6);
        text.push_str(&torn[..torn.len() / 2]);
        let path = file_with("torn", &text);
        let seqs = last_seqs(&path).unwrap();
        assert_eq!(
            seqs,
            LogSeqs {
                stdout: 5,
                stderr: 2
            }
        );
    }

    #[test]
    fn missing_file_is_zero() {
        let seqs = last_seqs(&scratch("missing").join("nope.ndjson")).unwrap();
        assert_eq!(seqs, LogSeqs::default());
    }

    #[test]
    fn a_stream_far_back_is_found_by_growing_the_window() {
        // stderr's only line is more than the first window from the end.
        let mut text = line(LogStream::Stderr, 7);
        let mut seq = 0;
        while text.len() < 3 * WINDOW_MIN as usize {
            seq += 1;
            text.push_str(&line(LogStream::Stdout, seq));
        }
        let path = file_with("far", &text);
        let seqs = last_seqs(&path).unwrap();
        assert_eq!(
            seqs,
            LogSeqs {
                stdout: seq,
                stderr: 7
            }
        );
    }

    #[test]
    fn a_window_cut_mid_line_skips_the_cut_line() {
        let (seqs, both) = scan(b"ut\",\"seq\":99}\n", true);
        assert_eq!(seqs, LogSeqs::default());
        assert!(!both);
    }
}
