//! The provider label drover writes on every instance:
//! `drover:run-<run>:<logical node>:nonce-<nonce>`.
//!
//! The label carries the lease intent's nonce, so a create whose answer was
//! lost is found (and adopted) by listing instances, never created twice.

use core_fsm::ids::{LogicalNodeId, Nonce, RunId};

/// Every drover label starts with this.
pub const LABEL_PREFIX: &str = "drover:";

/// Vast.ai accepts labels up to this many characters at create time.
pub const LABEL_LEN_MAX: usize = 256;

/// What a drover label says.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseLabel {
    /// The run.
    pub run_id: RunId,
    /// The logical node.
    pub node: LogicalNodeId,
    /// The lease intent's nonce.
    pub nonce: Nonce,
}

impl LeaseLabel {
    /// The label text: `drover:run-7:workers-0:nonce-42`.
    pub fn render(&self) -> String {
        format!(
            "{LABEL_PREFIX}run-{}:{}:nonce-{}",
            self.run_id.0, self.node.0, self.nonce.0
        )
    }

    /// Parses a label; `None` for anything that is not a well-formed drover label.
    pub fn parse(text: &str) -> Option<LeaseLabel> {
        let rest = text.strip_prefix(LABEL_PREFIX)?;
        let mut parts = rest.split(':');
        let run = parts.next()?.strip_prefix("run-")?.parse::<u64>().ok()?;
        let node = parts.next()?;
        let nonce = parts.next()?.strip_prefix("nonce-")?.parse::<u64>().ok()?;
        if parts.next().is_some() || node.is_empty() {
            return None;
        }
        Some(LeaseLabel {
            run_id: RunId(run),
            node: LogicalNodeId::from(node),
            nonce: Nonce(nonce),
        })
    }

    /// The prefix shared by every label of `run`.
    pub fn run_prefix(run_id: RunId) -> String {
        format!("{LABEL_PREFIX}run-{}:", run_id.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parse_round_trip() {
        let label = LeaseLabel {
            run_id: RunId(7),
            node: LogicalNodeId::from("workers-0"),
            nonce: Nonce(42),
        };
        assert_eq!(label.render(), "drover:run-7:workers-0:nonce-42");
        assert_eq!(LeaseLabel::parse(&label.render()), Some(label));
        assert!(label_is_prefixed());
    }

    fn label_is_prefixed() -> bool {
        LeaseLabel::run_prefix(RunId(7)) == "drover:run-7:"
    }

    #[test]
    fn parse_rejects_foreign_labels() {
        for text in [
            "",
            "prov:clusterA:node-3:lease-01",
            "drover:run-x:workers-0:nonce-1",
            "drover:run-1::nonce-1",
            "drover:run-1:workers-0:nonce-1:extra",
            "drover:run-1:workers-0:1",
        ] {
            assert_eq!(LeaseLabel::parse(text), None, "{text}");
        }
    }
}
