//! One datastream line: a [`LogRecord`]'s fields (so readers of bootstrap
//! records read every line) plus the channel it belongs to and, for lines
//! an agent forwarded, the agent and its own number for the line.

use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::port::LogRecord;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// The file (and `node` field) of the orchestrator's own events. Node ids
/// are `{group}-{index}`, so no node is called this.
pub const ORCHESTRATOR: &str = "orchestrator";

/// The channels, in drover's words (`spec/datastream.md`, "Channels").
pub mod channel {
    /// A bootstrap command's stdout, forwarded by the SSH session.
    pub const BOOTSTRAP_STDOUT: &str = "bootstrap.stdout";
    /// A bootstrap command's stderr, forwarded by the SSH session.
    pub const BOOTSTRAP_STDERR: &str = "bootstrap.stderr";
    /// The agent's progress lines, forwarded over iroh after it joined.
    pub const AGENT_STDOUT: &str = "agent.stdout";
    /// The agent's problem lines, forwarded over iroh after it joined.
    pub const AGENT_STDERR: &str = "agent.stderr";
    /// The stage worker's stderr, forwarded by its agent.
    pub const WORKER_STDERR: &str = "worker.stderr";
    /// Lines of an agent that were lost (never hidden: one line says how
    /// many and which).
    pub const GAP: &str = "gap";
    /// A node's lifecycle progress as the orchestrator sees it.
    pub const LIFECYCLE: &str = "lifecycle";
    /// Agents joining, rejoining and disconnecting.
    pub const MEMBERSHIP: &str = "membership";
    /// Stage runtimes ready, acknowledged, reporting; weights fetched.
    pub const STAGE: &str = "stage";
    /// Prompt serving: a request accepted, dispatched into the pipeline,
    /// completed (tokens and why it stopped) or faulted (why). Never the
    /// prompt's text.
    pub const PROMPT: &str = "prompt";
    /// The stage worker's telemetry, one line per step: its time and the
    /// bytes it took in and sent on its outbound edge.
    pub const WORKER_TELEMETRY: &str = "worker.telemetry";
    /// Provider calls (create, destroy, list leases) and their outcomes,
    /// errors with the provider's message.
    pub const PROVIDER: &str = "provider";
    /// What the provider itself printed for a node's lease: a Docker
    /// container's stdout (its main process, the node's sshd).
    pub const PROVIDER_STDOUT: &str = "provider.stdout";
    /// A Docker container's stderr.
    pub const PROVIDER_STDERR: &str = "provider.stderr";
    /// `drover up`'s own stdout lines (its JSON or plain lines, the
    /// messages above a terminal's table; a dashboard token masked).
    pub const ORCHESTRATOR_STDOUT: &str = "orchestrator.stdout";
    /// `drover up`'s own stderr lines (warnings and errors).
    pub const ORCHESTRATOR_STDERR: &str = "orchestrator.stderr";
}

/// One NDJSON line of a datastream file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// The record: node (the file's subject), lease, source, stream, seq
    /// (per file and stream), time, text.
    #[serde(flatten)]
    pub record: LogRecord,
    /// The channel (see [`channel`]); lines written before channels
    /// existed have none and are read by their stream.
    #[serde(default)]
    pub channel: String,
    /// The agent that forwarded the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    /// The agent's own number for the line (per agent process, from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// The node an orchestrator event concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<LogicalNodeId>,
}

impl Line {
    /// `record` on `channel`.
    pub fn of(record: LogRecord, channel: &str) -> Line {
        Line {
            record,
            channel: channel.to_owned(),
            agent: None,
            position: None,
            about: None,
        }
    }
}

/// The largest tail read when looking for an agent's last position; an
/// agent whose last line lies further back is resent from its start (the
/// lines then appear twice, with the same positions).
const POSITION_WINDOW: u64 = 4 * 1024 * 1024;

/// The highest position of `agent`'s lines in the tail of `path`.
pub(super) fn last_position_in(path: &Path, agent: &AgentId) -> io::Result<u64> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let start = len.saturating_sub(POSITION_WINDOW);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.take(len - start).read_to_end(&mut tail)?;
    let mut last = 0;
    for text in tail.split(|b| *b == b'\n') {
        let Ok(line) = serde_json::from_slice::<Line>(text) else {
            continue;
        };
        if line.agent.as_ref() == Some(agent) {
            last = last.max(line.position.unwrap_or(0));
        }
    }
    Ok(last)
}
