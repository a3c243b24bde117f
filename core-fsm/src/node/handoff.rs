//! The node manager's side of a bootstrap session: observations, the
//! agent's join, and the handoff once SSH is closed (SPEC.md "Node manager").

use super::machine::{Boot, Phase};
use super::{AgentFacts, Effect, Lifecycle};
use crate::bootstrap;
use crate::ids::AgentId;
use crate::port::{JournalRecord, LeaseFacts, LogSeqs};
use crate::time::Instant;
use std::sync::Arc;

impl super::Machine {
    /// Notes an observation of the running session, or of the last one (a
    /// cancelled session logs until SSH is closed): its log numbers count.
    pub(super) fn on_observed(&mut self, now: Instant, obs: bootstrap::Observation) {
        let facts = match &mut self.phase {
            Phase::Bootstrapping { boot, .. } | Phase::Joined { boot, .. } => &mut boot.facts,
            _ => match &mut self.past.boot {
                Some(boot) => &mut boot.facts,
                None => return self.ignored += 1,
            },
        };
        facts.last_stage = obs.stage;
        facts.last_observed_at = now;
        facts.last_stdout_seq = obs.last_stdout_seq.or(facts.last_stdout_seq);
        facts.last_stderr_seq = obs.last_stderr_seq.or(facts.last_stderr_seq);
        let seen = LogSeqs {
            stdout: obs.last_stdout_seq.unwrap_or(0),
            stderr: obs.last_stderr_seq.unwrap_or(0),
        };
        self.log_seqs = self.log_seqs.max_each(seen);
    }

    pub(super) fn on_joined(
        &mut self,
        now: Instant,
        (lease, boot): (Arc<LeaseFacts>, Boot),
        agent: AgentId,
        out: &mut Vec<Effect>,
    ) {
        let session = boot.facts.session;
        let facts = AgentFacts {
            agent: agent.clone(),
            joined_at: now,
            handed_off_at: None,
        };
        let joined = Phase::Joined {
            lease,
            boot,
            agent: facts,
        };
        self.enter(joined, out);
        out.push(Effect::ConvergenceObserved { session, agent });
    }

    /// The agent of a restored, ready node reconnected; it may do so once.
    pub(super) fn on_rejoined(
        &mut self,
        now: Instant,
        (lease, handed_off_at): (Arc<LeaseFacts>, Option<Instant>),
        agent: AgentId,
        out: &mut Vec<Effect>,
    ) {
        self.persist_ready(agent.clone(), out);
        let facts = AgentFacts {
            agent,
            joined_at: now,
            handed_off_at,
        };
        self.set_phase(Phase::Dormant {
            lease,
            agent: facts,
            rejoin_allowed: false,
        });
    }

    /// SSH closed after the join: the handoff is complete (SPEC.md "Node manager").
    pub(super) fn on_handed_off(
        &mut self,
        now: Instant,
        (lease, mut agent): (Arc<LeaseFacts>, AgentFacts),
        out: &mut Vec<Effect>,
    ) {
        agent.handed_off_at = Some(now);
        self.pass_through(Lifecycle::HandedOff, out);
        self.persist_ready(agent.agent.clone(), out);
        let dormant = Phase::Dormant {
            lease,
            agent,
            rejoin_allowed: false,
        };
        self.enter(dormant, out);
    }

    /// Journals the node as ready with `agent` and its log numbers.
    fn persist_ready(&self, agent: AgentId, out: &mut Vec<Effect>) {
        out.push(Effect::Persist(JournalRecord::NodeReady {
            node: self.spec.node_id.clone(),
            agent,
            log_seqs: self.log_seqs,
        }));
    }
}
