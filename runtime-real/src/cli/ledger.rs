//! The ledger as the journal tells it: one row per logical node, read from
//! the core's fold of the journal (`core_fsm::node::JournalFold`, the one a
//! restore uses), for `status` and `down` (which run without the plan and
//! without the orchestrator machine).
//!
//! Stages between the journaled ones (endpoint known, bootstrap running)
//! are not journaled; while `drover up` runs, it writes its live view to
//! `<state>/live.json`, which `status` overlays.

use core_fsm::ids::{AgentId, GroupId, LogicalNodeId, Nonce, RunId};
use core_fsm::node::{JournalFold, Journaled, Lifecycle};
use core_fsm::port::{JournalRecord, LeaseFacts};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// One node's row.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeRow {
    /// The logical node.
    pub id: LogicalNodeId,
    /// Its stage.
    pub stage: Lifecycle,
    /// Handed off and dormant.
    pub ready: bool,
    /// Its current lease, while one stands.
    pub lease: Option<Arc<LeaseFacts>>,
    /// Why it failed, if it did.
    pub failed_reason: Option<String>,
    /// Its agent, once joined.
    pub agent: Option<AgentId>,
    /// Nonces of lease intents not yet resolved (a lease may exist for
    /// them that the journal never heard of).
    pub pending_nonces: Vec<Nonce>,
    /// A destroy was requested.
    pub destroy_requested: bool,
    /// Stray leases (created for intents already abandoned) not yet
    /// released; `down` destroys them too.
    #[serde(default)]
    pub strays: Vec<Arc<LeaseFacts>>,
    /// Its agent's liveness, from a running `up`.
    #[serde(default)]
    pub liveness: Option<core_fsm::membership::Liveness>,
    /// Milliseconds since its agent's last heartbeat, from a running `up`.
    #[serde(default)]
    pub heartbeat_age_ms: Option<u64>,
}

impl NodeRow {
    /// The row of node `id` as the journal tells it (no live view).
    fn folded(id: &LogicalNodeId, node: &Journaled) -> NodeRow {
        let stage = node.stage();
        NodeRow {
            id: id.clone(),
            stage,
            ready: stage == Lifecycle::Dormant,
            lease: node.standing_lease().cloned(),
            failed_reason: node.failed.clone(),
            agent: node.agent.clone(),
            pending_nonces: node.open_intent().into_iter().collect(),
            destroy_requested: node.destroy_requested || node.replace.is_some(),
            strays: node.strays.clone(),
            liveness: None,
            heartbeat_age_ms: None,
        }
    }
}

/// Every node's row, and the run.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// The run, once started.
    pub run_id: Option<RunId>,
    /// Rows by node.
    pub nodes: BTreeMap<LogicalNodeId, NodeRow>,
    /// Groups whose desired count the operator set (the dashboard's +1 /
    /// -1), with the last count: it replaces the plan's.
    pub desired: BTreeMap<GroupId, u32>,
    /// What reading the journal found at its end, when not clean.
    pub tail_note: Option<String>,
    /// The journal's fold (the core's) the rows are read from.
    fold: JournalFold,
}

impl Ledger {
    /// Folds `records` into rows.
    pub fn from_records(records: &[JournalRecord]) -> Ledger {
        let mut ledger = Ledger::default();
        for record in records {
            ledger.apply(record);
        }
        ledger
    }

    /// Reads `<state>/journal.bin` and overlays the live view of a running
    /// `up`.
    pub fn from_state_dir(state_dir: &Path) -> std::io::Result<Ledger> {
        let recovered = crate::journal::Journal::read(state_dir)?;
        let mut ledger = Ledger::from_records(&recovered.records);
        if recovered.tail != crate::journal::Tail::Clean {
            ledger.tail_note = Some(recovered.tail.to_string());
        }
        if crate::up::control::running_pid(state_dir).is_some() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            for live in crate::up::control::read_live(state_dir) {
                if let Some(row) = ledger.nodes.get_mut(&live.id) {
                    row.stage = live.stage;
                    row.liveness = live.liveness;
                    row.heartbeat_age_ms = live.last_heartbeat_ms.map(|t| now.saturating_sub(t));
                    let dead = live.liveness == Some(core_fsm::membership::Liveness::Dead);
                    row.ready = live.ready && !dead;
                    row.failed_reason = live.failed_reason.or(row.failed_reason.take());
                }
            }
        }
        Ok(ledger)
    }

    /// Applies one record.
    pub fn apply(&mut self, record: &JournalRecord) {
        self.fold.apply(record);
        self.run_id = self.fold.run_id;
        match Journaled::node_of(record) {
            Some(id) => {
                let row = NodeRow::folded(id, &self.fold.nodes[id]);
                self.nodes.insert(id.clone(), row);
            }
            None => self.desired.clone_from(&self.fold.desired),
        }
    }

    /// Leases the journal knows and has not seen released.
    pub fn standing_leases(&self) -> Vec<(LogicalNodeId, Arc<LeaseFacts>)> {
        self.nodes
            .values()
            .flat_map(|r| {
                r.lease
                    .iter()
                    .chain(&r.strays)
                    .map(|l| (r.id.clone(), l.clone()))
            })
            .collect()
    }

    /// Nonces of intents whose create may have happened unseen.
    pub fn pending_intents(&self) -> Vec<(LogicalNodeId, Nonce)> {
        self.nodes
            .values()
            .flat_map(|r| r.pending_nonces.iter().map(|n| (r.id.clone(), *n)))
            .collect()
    }

    /// `status --json`: one object with a `nodes` array.
    pub fn to_json(&self) -> serde_json::Value {
        let nodes: Vec<_> = self
            .nodes
            .values()
            .map(|r| {
                serde_json::json!({
                    "id": r.id,
                    "stage": r.stage,
                    "ready": r.ready,
                    "lease": r.lease.as_ref().map(|l| l.lease_id.clone()),
                    "failed_reason": r.failed_reason,
                    "agent": r.agent,
                    "liveness": r.liveness,
                    "heartbeat_age_ms": r.heartbeat_age_ms,
                })
            })
            .collect();
        serde_json::json!({ "run_id": self.run_id.map(|r| r.0), "nodes": nodes })
    }

    /// The human table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        match self.run_id {
            Some(run) => out.push_str(&format!("{run}\n")),
            // Nothing to tabulate: the line alone.
            None if self.nodes.is_empty() => return "no run in this state dir\n".to_owned(),
            None => out.push_str("no run in this state dir\n"),
        }
        out.push_str(&format!(
            "{:<24} {:<16} {:<6} {:<12} {:<16} reason\n",
            "node", "stage", "ready", "lease", "liveness"
        ));
        for r in self.nodes.values() {
            let lease = r
                .lease
                .as_ref()
                .map(|l| l.lease_id.to_string())
                .unwrap_or_else(|| "-".into());
            let liveness = match (r.liveness, r.heartbeat_age_ms) {
                (Some(l), Some(age)) => format!("{l:?} {:.1}s", age as f64 / 1000.0),
                (Some(l), None) => format!("{l:?}"),
                (None, _) => "-".to_owned(),
            };
            out.push_str(&format!(
                "{:<24} {:<16} {:<6} {:<12} {:<16} {}\n",
                r.id,
                format!("{:?}", r.stage),
                r.ready,
                lease,
                liveness,
                r.failed_reason.as_deref().unwrap_or("")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_fsm::ids::LeaseId;
    use core_fsm::plan::ProviderKind;

    fn lease(n: u64, nonce: u64) -> LeaseFacts {
        LeaseFacts {
            provider: ProviderKind::Local,
            lease_id: LeaseId::new(format!("local:{n}")),
            contract_id: "1".into(),
            offer_id: None,
            host_id: None,
            nonce: Nonce(nonce),
            metadata: Default::default(),
        }
    }

    #[test]
    fn folds_intents_leases_failures_and_releases() {
        let a = LogicalNodeId::from("w-0");
        let b = LogicalNodeId::from("w-1");
        let records = vec![
            JournalRecord::RunStarted { run_id: RunId(5) },
            JournalRecord::LeaseIntent {
                node: a.clone(),
                nonce: Nonce(1),
                attempt: 1,
            },
            JournalRecord::LeaseIntent {
                node: b.clone(),
                nonce: Nonce(2),
                attempt: 1,
            },
            JournalRecord::LeaseKnown {
                node: a.clone(),
                lease: lease(0, 1).into(),
            },
            JournalRecord::NodeReady {
                node: a.clone(),
                agent: AgentId::from("agent-a"),
                log_seqs: Default::default(),
            },
            JournalRecord::NodeFailed {
                node: b.clone(),
                reason: "verify exited 1".into(),
                log_seqs: Default::default(),
            },
        ];
        assert_eq!(
            Ledger::from_records(&[]).table(),
            "no run in this state dir\n",
            "no header over no rows"
        );
        let ledger = Ledger::from_records(&records);
        assert_eq!(ledger.run_id, Some(RunId(5)));
        assert!(
            ledger.table().starts_with("run-5\nnode "),
            "{}",
            ledger.table()
        );
        assert_eq!(
            ledger.standing_leases(),
            vec![(a.clone(), lease(0, 1).into())]
        );
        assert_eq!(ledger.pending_intents(), vec![(b.clone(), Nonce(2))]);
        let json = ledger.to_json();
        assert_eq!(json["nodes"][0]["ready"], true);
        assert_eq!(json["nodes"][0]["stage"], "Dormant");
        assert_eq!(json["nodes"][1]["failed_reason"], "verify exited 1");
        let mut ledger = ledger;
        ledger.apply(&JournalRecord::LeaseReleased {
            node: a.clone(),
            lease_id: LeaseId("local:0".into()),
        });
        ledger.apply(&JournalRecord::IntentAbandoned {
            node: b.clone(),
            nonce: Nonce(2),
        });
        assert!(ledger.standing_leases().is_empty() && ledger.pending_intents().is_empty());
        assert_eq!(ledger.nodes[&a].stage, Lifecycle::Destroyed);
        ledger.apply(&JournalRecord::LeaseIntent {
            node: a.clone(),
            nonce: Nonce(3),
            attempt: 2,
        });
        // A replacement shows the node's last agent until its own joins.
        assert_eq!(ledger.nodes[&a].stage, Lifecycle::LeaseRequested);
        assert_eq!(ledger.nodes[&a].agent, Some(AgentId::from("agent-a")));
    }
}
