//! Agent liveness after handoff: Alive, Suspect, Dead (SPEC.md "Membership";
//! SPEC.md "Membership").
//!
//! Once a node is handed off, its node manager is dormant and never repairs it.
//! What the orchestrator still needs to know is whether the node's agent is
//! there: the run's readiness barrier counts a node only while its agent is
//! Alive, and a Dead agent fails the run. This machine derives that from the
//! heartbeats the agent sends on the control plane.
//!
//! A member is the pair (logical node, agent identity). A heartbeat from any
//! other identity for that node is not evidence that the tracked agent lives,
//! so it is ignored (and counted). Death is sticky for the identity: a dead
//! agent that speaks again stays dead; only a new identity (a new join) is
//! tracked afresh. Reporting a death is all this machine does; it never asks
//! anyone to repair the node.

use crate::ids::{AgentId, LogicalNodeId};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Liveness thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Silence after which an Alive agent becomes Suspect.
    pub suspect_after: Duration,
    /// Silence after which an agent is Dead; longer than `suspect_after`.
    pub dead_after: Duration,
    /// Most members tracked at once (the plan's node count is enough).
    pub members_max: usize,
    /// Most dead identities remembered; past it, new identities are refused
    /// rather than risk forgetting a death.
    pub buried_max: usize,
    /// How late a tick may come before the lateness is the observer's: a
    /// tick later than this past the earliest deadline means the
    /// orchestrator itself was not listening (starved, paused), and no
    /// member's silence counts that time (M9).
    pub late_slack: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            suspect_after: Duration::from_secs(5),
            dead_after: Duration::from_secs(15),
            members_max: 1024,
            buried_max: 4096,
            late_slack: Duration::from_secs(1),
        }
    }
}

/// What the membership says of one agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Liveness {
    /// A heartbeat arrived within `suspect_after`.
    Alive,
    /// Silent for `suspect_after`; a heartbeat revives it.
    Suspect,
    /// Silent for `dead_after`; final for this agent identity.
    Dead,
}

/// One tracked member's state; the per-member phase of this machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Heard from recently.
    Alive {
        /// The agent's identity.
        agent: AgentId,
        /// When it was last heard from.
        last_heartbeat: Instant,
    },
    /// Not heard from for a while.
    Suspect {
        /// The agent's identity.
        agent: AgentId,
        /// When it was last heard from.
        last_heartbeat: Instant,
    },
    /// Gone for good.
    Dead {
        /// The agent's identity, which never counts as alive again.
        agent: AgentId,
    },
}

impl Phase {
    /// The member's agent identity.
    pub fn agent(&self) -> &AgentId {
        match self {
            Phase::Alive { agent, .. } | Phase::Suspect { agent, .. } | Phase::Dead { agent } => {
                agent
            }
        }
    }

    /// The member's liveness.
    pub fn liveness(&self) -> Liveness {
        match self {
            Phase::Alive { .. } => Liveness::Alive,
            Phase::Suspect { .. } => Liveness::Suspect,
            Phase::Dead { .. } => Liveness::Dead,
        }
    }
}

/// What the membership is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A timer may have expired.
    Tick,
    /// The node was handed off to `agent`; start watching it (Alive from now).
    Track {
        /// The logical node.
        node: LogicalNodeId,
        /// The agent that joined for it.
        agent: AgentId,
    },
    /// The agent `agent` says it is there.
    Heartbeat {
        /// The logical node the agent speaks for.
        node: LogicalNodeId,
        /// The authenticated sender.
        agent: AgentId,
    },
    /// The agent's control connection ended: it is Suspect at once (its
    /// death still waits for `dead_after` of silence; a rejoin's heartbeat
    /// revives it).
    ConnectionLost {
        /// The logical node.
        node: LogicalNodeId,
        /// The agent whose connection ended.
        agent: AgentId,
    },
    /// Stop watching the node (its lease is being torn down).
    Forget {
        /// The logical node.
        node: LogicalNodeId,
    },
}

/// What the membership reports; the orchestrator routes each change to the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// A member's liveness changed (also when it is first tracked).
    Changed {
        /// The logical node.
        node: LogicalNodeId,
        /// Its agent.
        agent: AgentId,
        /// Its liveness now; `Dead` is the report the run fails on.
        liveness: Liveness,
    },
}

/// The membership's timers, one pair per member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimerKind {
    /// The member becomes Suspect.
    Suspect(LogicalNodeId),
    /// The member becomes Dead.
    Dead(LogicalNodeId),
}

impl TimerKind {
    /// The member the timer belongs to.
    pub fn node(&self) -> &LogicalNodeId {
        match self {
            TimerKind::Suspect(node) | TimerKind::Dead(node) => node,
        }
    }
}

/// Inputs that were ignored, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// Heartbeat or forget for a node nobody tracks.
    pub unknown_node: u64,
    /// Heartbeat from an identity other than the tracked agent.
    pub wrong_agent: u64,
    /// Heartbeat or re-track of an agent already dead.
    pub after_death: u64,
    /// Re-track of the same live agent.
    pub duplicate_track: u64,
    /// Track of an identity already tracked for another node.
    pub identity_in_use: u64,
    /// Track refused because `members_max` members are tracked or
    /// `buried_max` identities are dead.
    pub over_capacity: u64,
}

/// The membership machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    config: Config,
    members: BTreeMap<LogicalNodeId, Phase>,
    /// Every identity that died, so none is ever tracked again, even after
    /// its node was forgotten or taken over by another identity.
    buried: BTreeSet<AgentId>,
    /// A member's timers are keyed by its node, so they are a map, not a
    /// [`crate::timer::TimerTable`].
    timers: BTreeMap<TimerKind, Instant>,
    /// Time credited to a member's current silence because the observer
    /// was away (M9); at most `dead_after` per silence, so an observer that
    /// is always late still declares a death, one `dead_after` later.
    credited: BTreeMap<LogicalNodeId, Duration>,
    ignored: Ignored,
}

impl Machine {
    /// A membership tracking nobody.
    pub fn new(config: Config) -> Machine {
        assert!(
            config.suspect_after < config.dead_after,
            "membership: suspect_after must be shorter than dead_after"
        );
        assert!(
            config.members_max > 0,
            "membership: members_max must be positive"
        );
        Machine {
            config,
            members: BTreeMap::new(),
            buried: BTreeSet::new(),
            timers: BTreeMap::new(),
            credited: BTreeMap::new(),
            ignored: Ignored::default(),
        }
    }

    /// The member tracked for `node`, if any.
    pub fn member(&self, node: &LogicalNodeId) -> Option<&Phase> {
        self.members.get(node)
    }

    /// Every tracked member, in node order.
    pub fn members(&self) -> impl Iterator<Item = (&LogicalNodeId, &Phase)> {
        self.members.iter()
    }

    /// Inputs ignored so far.
    pub fn ignored(&self) -> &Ignored {
        &self.ignored
    }

    fn arm(&mut self, node: &LogicalNodeId, now: Instant) {
        let (suspect, dead) = (self.config.suspect_after, self.config.dead_after);
        self.timers
            .insert(TimerKind::Suspect(node.clone()), now + suspect);
        self.timers
            .insert(TimerKind::Dead(node.clone()), now + dead);
        self.credited.remove(node);
    }

    fn disarm(&mut self, node: &LogicalNodeId) {
        self.timers.remove(&TimerKind::Suspect(node.clone()));
        self.timers.remove(&TimerKind::Dead(node.clone()));
        self.credited.remove(node);
    }

    /// M9: a tick that comes more than `late_slack` after the earliest
    /// deadline finds the observer was away (the loop was starved or
    /// paused, and the heartbeats that arrived meanwhile may still be
    /// queued behind this tick). Every member's timers move out by the
    /// lateness and the slack, within its silence's credit of `dead_after`.
    fn credit_lateness(&mut self, now: Instant) {
        let Some(due) = self.timers.values().min().copied() else {
            return;
        };
        let late = now.saturating_since(due);
        if late <= self.config.late_slack {
            return;
        }
        let armed: BTreeSet<LogicalNodeId> =
            self.timers.keys().map(TimerKind::node).cloned().collect();
        for node in armed {
            let credit = self.credited.entry(node.clone()).or_default();
            // The time away, and the slack for what was queued behind the
            // tick to be heard: a late tick reschedules, it does not condemn.
            let away = late + self.config.late_slack;
            let grant = Duration(
                away.0
                    .min(self.config.dead_after.0.saturating_sub(credit.0)),
            );
            *credit = *credit + grant;
            for kind in [TimerKind::Suspect(node.clone()), TimerKind::Dead(node)] {
                if let Some(at) = self.timers.get_mut(&kind) {
                    *at += grant;
                }
            }
        }
    }

    fn on_track(&mut self, now: Instant, node: LogicalNodeId, agent: AgentId) -> Vec<Effect> {
        if self.buried.contains(&agent) {
            self.ignored.after_death += 1;
            return Vec::new();
        }
        // An identity speaks for one node only.
        if self
            .members
            .iter()
            .any(|(n, m)| *n != node && *m.agent() == agent)
        {
            self.ignored.identity_in_use += 1;
            return Vec::new();
        }
        if self.buried.len() >= self.config.buried_max {
            self.ignored.over_capacity += 1;
            return Vec::new();
        }
        match self.members.get(&node) {
            Some(member) if *member.agent() == agent => {
                // The same identity cannot come back from the dead, and a live
                // one is already watched.
                match member {
                    Phase::Dead { .. } => self.ignored.after_death += 1,
                    _ => self.ignored.duplicate_track += 1,
                }
                return Vec::new();
            }
            Some(_) => {}
            None if self.members.len() >= self.config.members_max => {
                self.ignored.over_capacity += 1;
                return Vec::new();
            }
            None => {}
        }
        // A new identity for the node: a new join, watched from scratch.
        self.members.insert(
            node.clone(),
            Phase::Alive {
                agent: agent.clone(),
                last_heartbeat: now,
            },
        );
        self.arm(&node, now);
        vec![Effect::Changed {
            node,
            agent,
            liveness: Liveness::Alive,
        }]
    }

    fn on_connection_lost(&mut self, node: LogicalNodeId, agent: AgentId) -> Vec<Effect> {
        let Some(member) = self.members.get(&node) else {
            self.ignored.unknown_node += 1;
            return Vec::new();
        };
        if *member.agent() != agent {
            self.ignored.wrong_agent += 1;
            return Vec::new();
        }
        let Phase::Alive { last_heartbeat, .. } = *member else {
            // Already Suspect or Dead: nothing new.
            return Vec::new();
        };
        self.timers.remove(&TimerKind::Suspect(node.clone()));
        self.members.insert(
            node.clone(),
            Phase::Suspect {
                agent: agent.clone(),
                last_heartbeat,
            },
        );
        vec![Effect::Changed {
            node,
            agent,
            liveness: Liveness::Suspect,
        }]
    }

    fn on_heartbeat(&mut self, now: Instant, node: LogicalNodeId, agent: AgentId) -> Vec<Effect> {
        let Some(member) = self.members.get(&node) else {
            self.ignored.unknown_node += 1;
            return Vec::new();
        };
        if *member.agent() != agent {
            self.ignored.wrong_agent += 1;
            return Vec::new();
        }
        let was = member.liveness();
        match was {
            Liveness::Dead => {
                self.ignored.after_death += 1;
                Vec::new()
            }
            Liveness::Alive | Liveness::Suspect => {
                self.members.insert(
                    node.clone(),
                    Phase::Alive {
                        agent: agent.clone(),
                        last_heartbeat: now,
                    },
                );
                self.arm(&node, now);
                if was == Liveness::Suspect {
                    vec![Effect::Changed {
                        node,
                        agent,
                        liveness: Liveness::Alive,
                    }]
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// Removes and returns every timer due at `now`, earliest first (ties
    /// in kind order).
    fn take_expired(&mut self, now: Instant) -> Vec<TimerKind> {
        let mut due: Vec<(Instant, TimerKind)> = (self.timers.iter())
            .filter(|(_, at)| **at <= now)
            .map(|(kind, at)| (*at, kind.clone()))
            .collect();
        due.sort();
        for (_, kind) in &due {
            self.timers.remove(kind);
        }
        due.into_iter().map(|(_, kind)| kind).collect()
    }

    fn on_expired(&mut self, kind: TimerKind) -> Vec<Effect> {
        let (node, to) = match kind {
            TimerKind::Suspect(node) => (node, Liveness::Suspect),
            TimerKind::Dead(node) => (node, Liveness::Dead),
        };
        // Timers are disarmed whenever a member leaves, so one that fires
        // always belongs to a tracked member.
        let member = self
            .members
            .get(&node)
            .expect("timer of an untracked member");
        let agent = member.agent().clone();
        let next = match (member, to) {
            (Phase::Alive { last_heartbeat, .. }, Liveness::Suspect) => Phase::Suspect {
                agent: agent.clone(),
                last_heartbeat: *last_heartbeat,
            },
            (Phase::Alive { .. } | Phase::Suspect { .. }, Liveness::Dead) => {
                self.disarm(&node);
                self.buried.insert(agent.clone());
                Phase::Dead {
                    agent: agent.clone(),
                }
            }
            _ => unreachable!("membership: {to:?} timer fired for {member:?}"),
        };
        self.members.insert(node.clone(), next);
        vec![Effect::Changed {
            node,
            agent,
            liveness: to,
        }]
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        match input {
            Input::Tick => {
                self.credit_lateness(now);
                let mut out = Vec::new();
                for kind in self.take_expired(now) {
                    out.extend(self.on_expired(kind));
                }
                out
            }
            Input::Track { node, agent } => self.on_track(now, node, agent),
            Input::Heartbeat { node, agent } => self.on_heartbeat(now, node, agent),
            Input::ConnectionLost { node, agent } => self.on_connection_lost(node, agent),
            Input::Forget { node } => {
                if self.members.remove(&node).is_some() {
                    self.disarm(&node);
                } else {
                    self.ignored.unknown_node += 1;
                }
                Vec::new()
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.timers.values().min().copied()
    }

    fn check_invariants(&self) {
        assert!(self.members.len() <= self.config.members_max);
        // M6: tombstones are bounded (each death needs a track, refused past
        // `buried_max`).
        assert!(self.buried.len() <= self.config.buried_max + self.config.members_max);
        // M7: no identity is tracked for two nodes.
        let identities: BTreeSet<&AgentId> = self.members.values().map(Phase::agent).collect();
        assert_eq!(
            identities.len(),
            self.members.len(),
            "an identity tracked twice"
        );
        for (node, member) in &self.members {
            let suspect = self.timers.contains_key(&TimerKind::Suspect(node.clone()));
            let dead = self.timers.contains_key(&TimerKind::Dead(node.clone()));
            match member {
                // M2: an Alive member is on its way to Suspect and Dead.
                Phase::Alive { .. } => assert!(suspect && dead, "alive {node} unarmed"),
                // M3: a Suspect member can only die or be revived.
                Phase::Suspect { .. } => assert!(!suspect && dead, "suspect {node} timers"),
                // M4: a Dead member has nothing left to fire, and is buried.
                Phase::Dead { agent } => {
                    assert!(!suspect && !dead, "dead {node} still armed");
                    assert!(self.buried.contains(agent));
                }
            }
        }
        assert!(self.timers.len() <= 2 * self.members.len());
        // M9: credit only for armed members, never past `dead_after`.
        for (node, credit) in &self.credited {
            assert!(
                *credit <= self.config.dead_after,
                "{node} credited past dead_after"
            );
            assert!(
                self.timers.contains_key(&TimerKind::Dead(node.clone())),
                "credit of unarmed {node}"
            );
        }
    }
}
