//! The node manager's side of a bootstrap session: observations, the
//! agent's join, and the handoff once SSH is closed (SPEC.md "Node manager").

use super::machine::Phase;
use super::{AgentFacts, Effect, Lifecycle};
use crate::bootstrap;
use crate::ids::{AgentId, SessionId};
use crate::port::{JournalRecord, LogSeqs};
use crate::time::Instant;

impl super::Machine {
    pub(super) fn on_observed(&mut self, now: Instant, obs: bootstrap::Observation) {
        let Some(facts) = self.record.bootstrap.as_mut() else {
            return self.ignored += 1;
        };
        facts.last_stage = obs.stage;
        facts.last_observed_at = now;
        facts.last_stdout_seq = obs.last_stdout_seq.or(facts.last_stdout_seq);
        facts.last_stderr_seq = obs.last_stderr_seq.or(facts.last_stderr_seq);
        let seen = LogSeqs {
            stdout: obs.last_stdout_seq.unwrap_or(0),
            stderr: obs.last_stderr_seq.unwrap_or(0),
        };
        self.record.log_seqs = self.record.log_seqs.max_each(seen);
    }

    pub(super) fn on_joined(
        &mut self,
        now: Instant,
        session: SessionId,
        agent: AgentId,
        out: &mut Vec<Effect>,
    ) {
        self.record.agent = Some(AgentFacts {
            agent: agent.clone(),
            joined_at: now,
            handed_off_at: None,
        });
        self.enter(Phase::Joined { session }, out);
        out.push(Effect::ConvergenceObserved { session, agent });
    }

    /// The agent of a restored, ready node reconnected; it may do so once.
    pub(super) fn on_rejoined(&mut self, now: Instant, agent: AgentId, out: &mut Vec<Effect>) {
        let handed_off_at = self.record.agent.as_ref().and_then(|a| a.handed_off_at);
        self.record.agent = Some(AgentFacts {
            agent: agent.clone(),
            joined_at: now,
            handed_off_at,
        });
        self.persist_ready(agent, out);
        self.phase = Phase::Dormant {
            rejoin_allowed: false,
        };
    }

    /// SSH closed after the join: the handoff is complete (SPEC.md "Node manager").
    pub(super) fn on_handed_off(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let agent = self.record.agent.as_mut().expect("Joined has agent facts");
        agent.handed_off_at = Some(now);
        let agent = agent.agent.clone();
        self.pass_through(Lifecycle::HandedOff, out);
        self.persist_ready(agent, out);
        self.enter(
            Phase::Dormant {
                rejoin_allowed: false,
            },
            out,
        );
    }

    /// Journals the node as ready with `agent` and its log numbers.
    fn persist_ready(&self, agent: AgentId, out: &mut Vec<Effect>) {
        out.push(Effect::Persist(JournalRecord::NodeReady {
            node: self.record.desired.node_id.clone(),
            agent,
            log_seqs: self.record.log_seqs,
        }));
    }
}
