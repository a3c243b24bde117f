//! What an instance's machine "printed", for the fake's `request_logs`: the
//! lines the fake writes as it plays the host (the machine starting, its
//! SSH server listening, a key added), then the local node's own stderr
//! (`nodes/<n>/server.log`: sessions that failed). Kept in memory per
//! instance, bounded, and dropped when the machine is stopped.

use std::collections::BTreeMap;
use std::path::Path;

/// Lines kept per instance (the oldest go first).
const LINES_MAX: usize = 1000;

/// The fake's own lines, per instance.
#[derive(Default)]
pub struct MachineLogs {
    lines: BTreeMap<u64, Vec<String>>,
}

impl MachineLogs {
    /// Appends one line to instance `id`'s log.
    pub fn push(&mut self, id: u64, line: String) {
        let lines = self.lines.entry(id).or_default();
        if lines.len() == LINES_MAX {
            lines.remove(0);
        }
        lines.push(line);
    }

    /// Forgets instance `id` (its machine is stopped).
    pub fn forget(&mut self, id: u64) {
        self.lines.remove(&id);
    }

    /// Instance `id`'s lines so far.
    pub fn of(&self, id: u64) -> Vec<String> {
        self.lines.get(&id).cloned().unwrap_or_default()
    }
}

/// The log text: the fake's lines, then the node's stderr if it has a folder.
pub fn text(own: &[String], node_dir: Option<&Path>) -> String {
    let mut text: String = own.iter().map(|l| format!("{l}\n")).collect();
    if let Some(dir) = node_dir
        && let Ok(stderr) = std::fs::read_to_string(dir.join("server.log"))
        && !stderr.is_empty()
    {
        text.push_str(&stderr);
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_bounded_and_the_node_stderr_follows_them() {
        let mut logs = MachineLogs::default();
        for n in 0..LINES_MAX + 2 {
            logs.push(7, format!("line {n}"));
        }
        let kept = logs.of(7);
        assert_eq!(kept.len(), LINES_MAX);
        assert_eq!(kept[0], "line 2");
        logs.forget(7);
        assert!(logs.of(7).is_empty());

        let dir = std::env::temp_dir().join(format!("drover-machine-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("server.log"), "local-node: session ended").unwrap();
        let own = ["starting".to_owned()];
        assert_eq!(
            text(&own, Some(&dir)),
            "starting\nlocal-node: session ended\n"
        );
        assert_eq!(text(&own, None), "starting\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
