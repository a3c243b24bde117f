//! The pipeline host (SPEC.md "The pipeline host"): the membership that
//! watches every handed-off node and, once the nodes are settled, the run of
//! a pipeline, as one machine for one effect loop.
//!
//! Membership derives each node's liveness from its agent's heartbeats from
//! the handoff on; the host reports every change, so the runtime can show
//! it, and hands it to the run (whose readiness barrier counts only Alive
//! members and whose stages die with their node). A run begins with the
//! liveness membership holds at that moment. The host decides nothing of
//! its own: it routes.

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
    /// Begin the run (once): it starts at this input's time, told the
    /// liveness of every member now.
    Begin(Box<run::Config>),
    /// For the run (reports, prompts, answers, a stop); ignored and counted
    /// before `Begin`.
    Run(run::Input),
    /// A drill: make `node`'s agent die as a crash would (the operator's
    /// kill from the dashboard). Only a member membership holds Alive or
    /// Suspect is killed; what follows is what follows any crash: its
    /// silence makes it Dead, and the composite fails (and may replace)
    /// the node.
    Kill {
        /// The node.
        node: LogicalNodeId,
    },
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
    /// Make the agent exit at once, without a goodbye (a drill).
    KillAgent {
        /// The node.
        node: LogicalNodeId,
        /// Its agent, the one membership tracks.
        agent: AgentId,
    },
}

/// Inputs the host ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// A run input before `Begin`.
    pub no_run: u64,
    /// A second `Begin`.
    pub duplicate_begin: u64,
    /// A kill of a node nobody tracks, or whose agent is Dead already.
    pub kill_not_alive: u64,
}

/// The pipeline host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    membership: membership::Machine,
    run: Option<run::Machine>,
    ignored: Ignored,
}

impl Machine {
    /// A host watching with `membership`, no run yet.
    pub fn new(membership: membership::Config) -> Machine {
        Machine {
            membership: membership::Machine::new(membership),
            run: None,
            ignored: Ignored::default(),
        }
    }

    /// The run, once begun.
    pub fn run(&self) -> Option<&run::Machine> {
        self.run.as_ref()
    }

    /// Inputs ignored so far.
    pub fn ignored(&self) -> Ignored {
        self.ignored
    }

    fn begin(&mut self, now: Instant, config: run::Config, out: &mut Vec<Effect>) {
        if self.run.is_some() {
            self.ignored.duplicate_begin += 1;
            return;
        }
        match run::Machine::new(config, now) {
            Ok(machine) => self.run = Some(machine),
            Err(error) => {
                let failed = run::Effect::Finished(Err(run::RunError::Planning(error)));
                out.push(Effect::Run(failed));
                return;
            }
        }
        let members: Vec<run::Input> = self
            .membership
            .members()
            .map(|(node, member)| run::Input::Liveness {
                node: node.clone(),
                agent: member.agent().clone(),
                liveness: member.liveness(),
            })
            .collect();
        for input in members {
            self.feed_run(now, input, out);
        }
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
        let Some(run) = self.run.as_mut() else {
            // A membership change before the run is only reported; a tick
            // has nothing to tell.
            if !matches!(input, run::Input::Tick | run::Input::Liveness { .. }) {
                self.ignored.no_run += 1;
            }
            return;
        };
        let effects = crate::Machine::handle(run, now, input);
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
            Input::Begin(config) => self.begin(now, *config, &mut out),
            Input::Run(input) => self.feed_run(now, input, &mut out),
            Input::Kill { node } => {
                let alive = self
                    .membership
                    .member(&node)
                    .filter(|m| m.liveness() != Liveness::Dead)
                    .map(|m| m.agent().clone());
                match alive {
                    Some(agent) => out.push(Effect::KillAgent { node, agent }),
                    None => self.ignored.kill_not_alive += 1,
                }
            }
        }
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        let membership = crate::Machine::next_deadline(&self.membership);
        let run = self.run.as_ref().and_then(crate::Machine::next_deadline);
        membership.into_iter().chain(run).min()
    }

    fn check_invariants(&self) {
        crate::Machine::check_invariants(&self.membership);
        let Some(run) = &self.run else {
            return;
        };
        crate::Machine::check_invariants(run);
        // PH1: the run never believes a node more alive than membership
        // says: a node membership holds Dead is not Alive to the run.
        for (node, member) in self.membership.members() {
            if member.liveness() == Liveness::Dead {
                assert_ne!(
                    run.member(node).map(|(_, l)| l),
                    Some(Liveness::Alive),
                    "PH1: {node} is Dead to membership and Alive to the run"
                );
            }
        }
    }
}
