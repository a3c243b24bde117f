//! The membership machine's transitions: tracking, heartbeats, its timers
//! and the stall rule (M9); its types are in `membership.rs`.

use super::{Config, Effect, Ignored, Input, Liveness, Machine, Phase, TimerKind};
use crate::ids::{AgentId, LogicalNodeId};
use crate::time::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet};

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

    /// Holds `agent` Alive for `node` as of `now`, its Suspect and Dead
    /// timers armed afresh.
    fn set_alive(&mut self, node: &LogicalNodeId, agent: &AgentId, now: Instant) {
        let alive = Phase::Alive {
            agent: agent.clone(),
            last_heartbeat: now,
        };
        self.members.insert(node.clone(), alive);
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

    /// A new identity for `node`: Alive from `now`, or, `expected`, Suspect
    /// (not heard from since the restart) with `rejoin_grace` more before
    /// it is Dead.
    fn on_track(
        &mut self,
        now: Instant,
        node: LogicalNodeId,
        agent: AgentId,
        expected: bool,
    ) -> Vec<Effect> {
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
            // A live identity is already watched (a dead one is buried,
            // refused above).
            Some(member) if *member.agent() == agent => {
                self.ignored.duplicate_track += 1;
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
        self.set_alive(&node, &agent, now);
        if !expected {
            return vec![Effect::Changed {
                node,
                agent,
                liveness: Liveness::Alive,
            }];
        }
        // Expected: its first heartbeat revives it; silence kills it.
        self.timers.remove(&TimerKind::Suspect(node.clone()));
        let dead = now + self.config.dead_after + self.config.rejoin_grace;
        self.timers.insert(TimerKind::Dead(node.clone()), dead);
        let suspect = Phase::Suspect {
            agent: agent.clone(),
            last_heartbeat: now,
        };
        self.members.insert(node.clone(), suspect);
        vec![Effect::Changed {
            node,
            agent,
            liveness: Liveness::Suspect,
        }]
    }

    /// The member tracking `agent` for `node`; an unknown node or another
    /// identity is counted as ignored and gives `None`.
    fn member_of(&mut self, node: &LogicalNodeId, agent: &AgentId) -> Option<Phase> {
        match self.members.get(node) {
            None => self.ignored.unknown_node += 1,
            Some(member) if member.agent() != agent => self.ignored.wrong_agent += 1,
            Some(member) => return Some(member.clone()),
        }
        None
    }

    fn on_connection_lost(&mut self, node: LogicalNodeId, agent: AgentId) -> Vec<Effect> {
        let Some(member) = self.member_of(&node, &agent) else {
            return Vec::new();
        };
        let Phase::Alive { last_heartbeat, .. } = member else {
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
        let Some(member) = self.member_of(&node, &agent) else {
            return Vec::new();
        };
        let was = member.liveness();
        match was {
            Liveness::Dead => {
                self.ignored.after_death += 1;
                Vec::new()
            }
            Liveness::Alive | Liveness::Suspect => {
                self.set_alive(&node, &agent, now);
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
            Input::Track { node, agent } => self.on_track(now, node, agent, false),
            Input::Expect { node, agent } => self.on_track(now, node, agent, true),
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
