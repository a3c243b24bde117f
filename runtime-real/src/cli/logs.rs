//! `drover logs NODE [--follow]`: a node's datastream lines, formatted (or
//! as they are, NDJSON, with `--json`). Following waits for the file to grow
//! and stops when `up` is gone and the file has no more lines.

use crate::datastream;
use crate::exit::{EXIT_FAILURE, EXIT_OK};
use core_fsm::ids::LogicalNodeId;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

/// How often a follower looks for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

/// Runs `drover logs`; returns the exit code.
pub async fn run(state_dir: &Path, node: &str, follow: bool, json: bool) -> i32 {
    let node = LogicalNodeId::from(node);
    if !datastream::is_safe_file_stem(node.as_str()) {
        eprintln!("drover logs: {}", datastream::unsafe_id(&node));
        return EXIT_FAILURE;
    }
    let path = datastream::file_of(state_dir, &node);
    let mut offset = 0u64;
    loop {
        match print_from(&path, offset, json) {
            Ok(next) => offset = next,
            Err(e) => {
                eprintln!("drover: {}: {e}", path.display());
                return EXIT_FAILURE;
            }
        }
        if !follow || crate::up::control::running_pid(state_dir).is_none() {
            return EXIT_OK;
        }
        tokio::time::sleep(FOLLOW_INTERVAL).await;
    }
}

/// Prints every whole line from `offset`; returns the offset after them.
fn print_from(path: &Path, offset: u64, json: bool) -> std::io::Result<u64> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(offset),
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
            return Ok(next);
        }
        next += n as u64;
        let text = line.trim_end();
        if json {
            println!("{text}");
        } else if let Some(record) = datastream::parse_line(text) {
            println!("{}", datastream::format(&record));
        }
    }
}
