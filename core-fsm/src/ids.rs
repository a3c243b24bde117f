//! Identifiers. Counters or values that come in as inputs; never random UUIDs.

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;
use std::fmt;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// The text is a [`SmolStr`]: short ids are kept inline, and a clone
        /// of a long one copies a pointer.
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub SmolStr);

        impl $name {
            /// An id with this text.
            pub fn new(text: impl Into<SmolStr>) -> Self {
                $name(text.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // `pad`, not `write_str`: tables align ids with `{:<24}`.
                f.pad(self.0.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.into())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s.into())
            }
        }
    };
}

macro_rules! number_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

string_id!(
    /// A logical node, stable for the run: `workers-0`.
    LogicalNodeId
);
string_id!(
    /// A node group of the plan: `workers`.
    GroupId
);
string_id!(
    /// The role a node plays: `worker`.
    RoleId
);
string_id!(
    /// A provider's lease (billing resource): `vastai:123456`, `local:7`.
    LeaseId
);
string_id!(
    /// A node agent's identity on the control plane (its iroh endpoint id).
    AgentId
);

number_id!(
    /// One run of a plan.
    RunId,
    "run-"
);
number_id!(
    /// One SSH bootstrap session; unique within an orchestrator's life.
    SessionId,
    "session-"
);
number_id!(
    /// Correlates an effect that starts I/O with the input that answers it.
    OpId,
    "op-"
);
number_id!(
    /// The nonce of a lease intent; it also goes into the provider label, so a
    /// create whose answer was lost can be found and adopted after a restart.
    Nonce,
    "nonce-"
);

/// Every drover lease label starts with this.
pub const LABEL_PREFIX: &str = "drover:";

/// The label every provider writes on a lease, and reads back to find a
/// run's leases: `drover:run-<run>:<logical node>:nonce-<nonce>`. It
/// carries the intent's nonce, so a create whose answer was lost is found
/// (and adopted) by listing, never created twice.
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
        let (run, node, nonce) = (self.run_id.0, &self.node.0, self.nonce.0);
        format!("{LABEL_PREFIX}run-{run}:{node}:nonce-{nonce}")
    }

    /// Parses a label; `None` for anything that is not a well-formed drover
    /// label.
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

/// Hands out fresh, increasing ids from a counter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    next: u64,
}

impl Counter {
    /// A counter whose first id is `first`.
    pub fn starting_at(first: u64) -> Counter {
        Counter { next: first }
    }

    /// The next id. (Not `Iterator::next`: a counter never ends, and an
    /// overflow is a programmer error, not the end of a sequence.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let id = self.next;
        self.next = self.next.checked_add(1).expect("id counter overflow");
        id
    }

    /// The id the next call to `next` returns.
    pub fn peek(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_display_and_count() {
        assert_eq!(OpId(3).to_string(), "op-3");
        assert_eq!(LogicalNodeId::from("workers-0").to_string(), "workers-0");
        assert_eq!(
            format!("{:<11}|", LogicalNodeId::from("workers-0")),
            "workers-0  |"
        );
        let mut c = Counter::starting_at(5);
        assert_eq!(c.next(), 5);
        assert_eq!(c.next(), 6);
        assert_eq!(c.peek(), 7);
    }

    #[test]
    fn lease_labels_round_trip() {
        let label = LeaseLabel {
            run_id: RunId(7),
            node: LogicalNodeId::from("workers-0"),
            nonce: Nonce(42),
        };
        assert_eq!(label.render(), "drover:run-7:workers-0:nonce-42");
        assert_eq!(LeaseLabel::parse(&label.render()), Some(label));
        assert_eq!(LeaseLabel::run_prefix(RunId(7)), "drover:run-7:");
    }

    #[test]
    fn foreign_labels_do_not_parse() {
        for text in [
            "",
            "prov:clusterA:node-3:lease-01",
            "drover:run-x:workers-0:nonce-1",
            "drover:run-1::nonce-1",
            "drover:run-1:workers-0:nonce-1:extra",
            "drover:run-1:workers-0:1",
            "drover-run=42;nonce=7",
        ] {
            assert_eq!(LeaseLabel::parse(text), None, "{text}");
        }
    }
}
