//! The handoff contract (W5) and the log stream's numbering (W6): what a
//! node's SSH output, its logs and its join must show before it is ready.

use super::{Checked, Oracle, SessionFacts};
use crate::backend::NodeView;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::port::LeaseFacts;

impl Oracle {
    pub(super) fn log(&mut self, record: &core_fsm::port::LogRecord) -> Checked {
        // Numbers run per (node, stream) for the whole run; a restarted
        // incarnation continues from what its synced journal named.
        let key = (record.node.clone(), record.stream);
        let base = self.inc.log_base.get(&record.node).copied();
        let prev = self
            .inc
            .log_seq
            .get(&key)
            .copied()
            .unwrap_or_else(|| base.unwrap_or_default().get(record.stream));
        if record.seq != prev + 1 {
            return self.fail(
                "W6",
                format!(
                    "log of {} {:?} (on {}) jumps from seq {prev} to {}",
                    record.node, record.stream, record.lease_id, record.seq
                ),
            );
        }
        self.inc.log_seq.insert(key, record.seq);
        let pair = (record.node.clone(), record.lease_id.clone());
        if self.inc.ready.contains(&pair) {
            return self.fail(
                "W5",
                format!("log line for {} after its handoff", record.node),
            );
        }
        if self.inc.closed_leases.contains(&record.lease_id) {
            *self.inc.logs_after_close.entry(pair.clone()).or_insert(0) += 1;
        }
        *self.inc.logs.entry(pair).or_insert(0) += 1;
        Ok(())
    }

    /// Checks one node record after a step.
    pub fn node(&mut self, view: NodeView<'_>) -> Checked {
        use core_fsm::node::Lifecycle;
        if view.ready != (view.stage == Lifecycle::Dormant) {
            return self.fail(
                "W5",
                format!(
                    "{} ready={} in stage {:?}",
                    view.node, view.ready, view.stage
                ),
            );
        }
        if !view.ready {
            return Ok(());
        }
        let (Some(lease), Some(agent)) = (view.lease, view.agent) else {
            return self.fail("W5", format!("{} ready without lease and agent", view.node));
        };
        // Checked once per (node, lease) and incarnation; looked up without
        // allocating, since this runs for every ready node after every step.
        if self.inc.ready_lease.get(view.node) == Some(&lease.lease_id) {
            return Ok(());
        }
        self.handoff(view.node, lease, agent)?;
        self.inc
            .ready
            .insert((view.node.clone(), lease.lease_id.clone()));
        self.inc
            .ready_lease
            .insert(view.node.clone(), lease.lease_id.clone());
        Ok(())
    }

    /// The handoff contract (SPEC.md "Node manager"), checked when a node first shows
    /// ready in an incarnation.
    fn handoff(&self, node: &LogicalNodeId, lease: &LeaseFacts, agent: &AgentId) -> Checked {
        let id = &lease.lease_id;
        if !self
            .joins
            .contains(&(node.clone(), id.clone(), agent.clone()))
        {
            return self.fail(
                "W5",
                format!("{node} ready with agent {agent} on {id}, but no such join was delivered"),
            );
        }
        if self.open.values().any(|l| l == id) {
            return self.fail(
                "W5",
                format!("{node} ready while an SSH connection to {id} is open"),
            );
        }
        let sessions: Vec<&SessionFacts> = self
            .inc
            .sessions
            .values()
            .filter(|s| s.lease.as_ref() == Some(id))
            .collect();
        let Some(last) = sessions.last() else {
            // Ready restored from the journal: the handoff happened in an
            // earlier incarnation, whose connections died with it.
            return Ok(());
        };
        if !last.closed_delivered {
            return self.fail(
                "W5",
                format!("{node} ready before its SSH close was confirmed"),
            );
        }
        let key = (node.clone(), id.clone());
        if let Some(late) = self.inc.logs_after_close.get(&key) {
            return self.fail(
                "W5",
                format!("{node} ready with {late} log lines after its SSH close"),
            );
        }
        let logs = self
            .inc
            .logs
            .get(&(node.clone(), id.clone()))
            .copied()
            .unwrap_or(0);
        if logs < last.outputs {
            return self.fail(
                "W5",
                format!(
                    "{node} ready with {} output lines seen but only {logs} logged",
                    last.outputs
                ),
            );
        }
        Ok(())
    }
}
