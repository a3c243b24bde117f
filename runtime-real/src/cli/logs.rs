//! `drover logs NODE [--channel C] [--since SEQ] [--follow]` and `drover
//! logs --run`: a node's datastream lines (bootstrap, then its agent's and
//! worker's), or the orchestrator's own (lifecycle, membership, stage,
//! prompt), formatted, or as they are stored, one JSON object a line
//! (NDJSON), with `--json`. Following waits for the file to grow and stops
//! when `up` is gone and the file has no more lines.

use crate::datastream;
use crate::exit::{EXIT_CONFIG, EXIT_FAILURE, EXIT_OK};
use core_fsm::ids::LogicalNodeId;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

/// How often a follower looks for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

/// What `drover logs` shows.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// The node; `None` with `run`.
    pub node: Option<String>,
    /// The orchestrator's own channels instead of a node's.
    pub run: bool,
    /// Only lines of this channel.
    pub channel: Option<String>,
    /// Keep printing lines as they arrive.
    pub follow: bool,
    /// Only lines numbered above this (`seq` is per file and stream, so a
    /// reader that saw up to N on both streams asks for what came after).
    pub since: Option<u64>,
}

impl Query {
    /// Whether `line` is one this query shows.
    pub fn wants(&self, line: &datastream::Line) -> bool {
        self.channel.as_deref().is_none_or(|c| c == line.channel)
            && self.since.is_none_or(|since| line.record.seq > since)
    }
}

/// Runs `drover logs`; returns the exit code.
pub async fn run(state_dir: &Path, query: &Query, json: bool) -> i32 {
    let node = match (&query.node, query.run) {
        (Some(node), false) => LogicalNodeId::from(node.as_str()),
        (None, true) => LogicalNodeId::from(datastream::ORCHESTRATOR),
        (Some(_), true) => {
            crate::stdout::eline!("drover logs: name a node or give --run, not both");
            return EXIT_CONFIG;
        }
        (None, false) => {
            crate::stdout::eline!("drover logs: name a node (e.g. `workers-0`) or give --run");
            return EXIT_CONFIG;
        }
    };
    if !datastream::is_safe_file_stem(node.as_str()) {
        crate::stdout::eline!("drover logs: {}", datastream::unsafe_id(&node));
        return EXIT_FAILURE;
    }
    let path = datastream::file_of(state_dir, &node);
    let mut offset = 0u64;
    loop {
        match print_from(&path, offset, json, query) {
            Ok(Printed::Upto(next)) => offset = next,
            // Its reader closed stdout (`| head`): it has what it wanted.
            Ok(Printed::ReaderGone) => return EXIT_OK,
            Err(e) => {
                crate::stdout::eline!("drover: {}: {e}", path.display());
                return EXIT_FAILURE;
            }
        }
        if !query.follow || crate::up::control::running_pid(state_dir).is_none() {
            return EXIT_OK;
        }
        tokio::time::sleep(FOLLOW_INTERVAL).await;
    }
}

/// How far [`print_from`] went.
enum Printed {
    /// Every whole line before this offset.
    Upto(u64),
    /// Stdout's reader is gone.
    ReaderGone,
}

/// Prints every whole line from `offset` that `query` wants.
fn print_from(path: &Path, offset: u64, json: bool, query: &Query) -> std::io::Result<Printed> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Printed::Upto(offset)),
        Err(e) => return Err(e),
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut reader = std::io::BufReader::new(file);
    let mut next = offset;
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        // A line without its newline is still being written: read it later.
        if n == 0 || !line.ends_with('\n') {
            return Ok(Printed::Upto(next));
        }
        next += n as u64;
        let text = line.trim_end();
        let Some(record) = datastream::parse_line(text) else {
            continue;
        };
        if !query.wants(&record) {
            continue;
        }
        let written = if json {
            crate::stdout::line(text)
        } else {
            crate::stdout::line(&datastream::format(&record))
        };
        match written {
            Ok(()) => {}
            Err(e) if crate::stdout::reader_gone(&e) => return Ok(Printed::ReaderGone),
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("stdout: {e}"))),
        }
    }
}
