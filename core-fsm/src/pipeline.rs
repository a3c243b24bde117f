//! The pipeline host (SPEC.md "The pipeline host"): the run of a pipeline
//! and the membership that watches its nodes, as one machine for one effect
//! loop.
//!
//! Membership derives each node's liveness from its agent's heartbeats; the
//! host hands every change to the run (whose readiness barrier counts only
//! Alive members and whose stages die with their node) and reports it, so
//! the runtime can show it. The host decides nothing of its own: it routes.

use crate::ids::{AgentId, LogicalNodeId};
use crate::membership::{self, Liveness};
use crate::run;
use crate::time::Instant;
use serde::{Deserialize, Serialize};

/// What the host is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer of either child may have expired.
    Tick,
    /// For the membership (a node handed to its agent, a heartbeat).
    Membership(membership::Input),
    /// For the run (reports, prompts, answers, a stop).
    Run(run::Input),
}

/// What the host asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// A node's liveness changed (observational: the run was told too).
    Liveness {
        /// The node.
        node: LogicalNodeId,
        /// Its agent.
        agent: AgentId,
        /// Its liveness now.
        liveness: Liveness,
    },
    /// The run's effect.
    Run(run::Effect),
}

/// The pipeline host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    membership: membership::Machine,
    run: run::Machine,
}

impl Machine {
    /// A host of `run`, watching with `membership`.
    pub fn new(membership: membership::Config, run: run::Machine) -> Machine {
        Machine {
            membership: membership::Machine::new(membership),
            run,
        }
    }

    /// The run.
    pub fn run(&self) -> &run::Machine {
        &self.run
    }

    /// The membership.
    pub fn membership(&self) -> &membership::Machine {
        &self.membership
    }

    fn feed_membership(&mut self, now: Instant, input: membership::Input, out: &mut Vec<Effect>) {
        let changes = crate::Machine::handle(&mut self.membership, now, input);
        for membership::Effect::Changed {
            node,
            agent,
            liveness,
        } in changes
        {
            out.push(Effect::Liveness {
                node: node.clone(),
                agent: agent.clone(),
                liveness,
            });
            let input = run::Input::Liveness {
                node,
                agent,
                liveness,
            };
            self.feed_run(now, input, out);
        }
    }

    fn feed_run(&mut self, now: Instant, input: run::Input, out: &mut Vec<Effect>) {
        let effects = crate::Machine::handle(&mut self.run, now, input);
        out.extend(effects.into_iter().map(Effect::Run));
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::Tick => {
                self.feed_membership(now, membership::Input::Tick, &mut out);
                self.feed_run(now, run::Input::Tick, &mut out);
            }
            Input::Membership(input) => self.feed_membership(now, input, &mut out),
            Input::Run(input) => self.feed_run(now, input, &mut out),
        }
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        let membership = crate::Machine::next_deadline(&self.membership);
        let run = crate::Machine::next_deadline(&self.run);
        membership.into_iter().chain(run).min()
    }

    fn check_invariants(&self) {
        crate::Machine::check_invariants(&self.membership);
        crate::Machine::check_invariants(&self.run);
        // PH1: the run never believes a node more alive than membership
        // says: a node membership holds Dead is not Alive to the run.
        for (node, member) in self.membership.members() {
            if member.liveness() == Liveness::Dead {
                assert_ne!(
                    self.run.member(node).map(|(_, l)| l),
                    Some(Liveness::Alive),
                    "PH1: {node} is Dead to membership and Alive to the run"
                );
            }
        }
    }
}
