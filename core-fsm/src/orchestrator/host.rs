//! The composite's pipeline host (`crate::pipeline`: membership and the
//! run), when `Config::membership` gives it one. The composite feeds it the
//! facts it owns and acts on its verdicts:
//!
//! - an agent's join on its node's current lease is a handoff membership
//!   watches from then on (a rejoin too);
//! - a node restored ready has its journaled agent expected from `Start`
//!   on, so an agent that never rejoins is found Dead;
//! - membership's Dead is the node's loss: the node manager is told
//!   `AgentLost` in the same step, so it fails (and the reconciler may
//!   replace it) before any other input (O11 in `spec/provisioning.md`).

use super::Orchestrator;
use crate::Machine as _;
use crate::ids::{AgentId, LeaseId, LogicalNodeId};
use crate::membership::{self, Liveness};
use crate::node::{self, Lifecycle};
use crate::pipeline;
use crate::port::Effect;
use crate::time::Instant;

/// Why a node whose agent membership holds Dead fails.
pub const DEAD_REASON: &str = "its agent stopped heartbeating (membership: Dead)";

impl Orchestrator {
    /// The pipeline host, when the composite has one.
    pub fn pipeline(&self) -> Option<&pipeline::Machine> {
        self.pipeline.as_ref()
    }

    /// An input for the host; counted when there is none.
    pub(super) fn on_pipeline(
        &mut self,
        now: Instant,
        input: pipeline::Input,
        out: &mut Vec<Effect>,
    ) {
        let Some(host) = self.pipeline.as_mut() else {
            self.counters.no_pipeline += 1;
            return;
        };
        let effects = host.handle(now, input);
        for effect in effects {
            let dead = match &effect {
                pipeline::Effect::Liveness {
                    node,
                    agent,
                    liveness: Liveness::Dead,
                } => Some((node.clone(), agent.clone())),
                _ => None,
            };
            out.push(Effect::Pipeline(Box::new(effect)));
            if let Some((node, agent)) = dead {
                self.lose_agent(now, node, agent, DEAD_REASON.to_owned(), out);
            }
        }
    }

    /// Tells `node`'s manager its agent is lost (counted when the ledger
    /// lacks the node).
    pub(super) fn lose_agent(
        &mut self,
        now: Instant,
        node: LogicalNodeId,
        agent: AgentId,
        reason: String,
        out: &mut Vec<Effect>,
    ) {
        match self.slot_of(&node) {
            Some(slot) if self.nodes.contains_key(&slot) => {
                self.deliver_node(now, slot, node::Input::AgentLost { agent, reason }, out)
            }
            _ => self.counters.unknown_nodes += 1,
        }
    }

    /// After a join was routed: an agent on its node's current lease is
    /// handed the node (or rejoined it), and membership watches it.
    pub(super) fn track_join(
        &mut self,
        now: Instant,
        node: LogicalNodeId,
        lease_id: &LeaseId,
        agent: AgentId,
        out: &mut Vec<Effect>,
    ) {
        if self.pipeline.is_none() {
            return;
        }
        let handed = |m: &node::Machine| {
            matches!(
                m.stage(),
                Lifecycle::AgentJoined | Lifecycle::HandedOff | Lifecycle::Dormant
            ) && m.lease_id() == Some(lease_id)
        };
        let current = self.node(&node).is_some_and(handed);
        if current {
            let track = membership::Input::Track { node, agent };
            self.on_pipeline(now, pipeline::Input::Membership(track), out);
        }
    }

    /// At `Start`: membership expects the agent of every node restored
    /// ready (the one the journal names). Its rejoin tracks it; if it never
    /// comes back (it died while the orchestrator was down, or before it
    /// was found Dead), it is found Dead, so the node fails and may be
    /// replaced.
    pub(super) fn expect_restored(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.pipeline.is_none() {
            return;
        }
        let expected: Vec<(LogicalNodeId, AgentId)> = (self.nodes.values())
            .filter(|m| m.is_ready())
            .filter_map(|m| Some((m.node().clone(), m.agent()?.agent.clone())))
            .collect();
        for (node, agent) in expected {
            let expect = membership::Input::Expect { node, agent };
            self.on_pipeline(now, pipeline::Input::Membership(expect), out);
        }
    }

    /// The agent of the node in `slot` when the node is ready with an agent
    /// membership holds Dead: a verdict that came while the node was not
    /// at rest yet (joined, SSH not closed), which it ignored then.
    pub(super) fn dead_ready_agent(&self, slot: super::Slot) -> Option<AgentId> {
        let host = self.pipeline.as_ref()?;
        let machine = self.nodes.get(&slot).filter(|m| m.is_ready())?;
        let agent = &machine.agent()?.agent;
        let member = host.membership().member(&self.ids[slot.0 as usize])?;
        (member.liveness() == Liveness::Dead && member.agent() == agent).then(|| agent.clone())
    }

    /// The host's deadline.
    pub(super) fn pipeline_deadline(&self) -> Option<Instant> {
        self.pipeline.as_ref().and_then(|h| h.next_deadline())
    }

    /// A tick for the host, when one of its timers is due.
    pub(super) fn tick_pipeline(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.pipeline_deadline().is_some_and(|at| at <= now) {
            self.on_pipeline(now, pipeline::Input::Tick, out);
        }
    }
}
