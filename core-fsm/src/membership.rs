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

mod machine;

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
    /// How much longer than a tracked agent an expected one (an agent the
    /// journal says a restored node was handed to) may stay silent: the
    /// time a live agent may take to notice its old connection is gone and
    /// dial the restarted orchestrator again (`drover up`: the connections'
    /// 10 s idle timeout, then the agents' longest wait between dials, 5 s).
    #[serde(default = "Config::default_rejoin_grace")]
    pub rejoin_grace: Duration,
}

impl Config {
    fn default_rejoin_grace() -> Duration {
        Duration::from_secs(15)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            suspect_after: Duration::from_secs(5),
            dead_after: Duration::from_secs(15),
            members_max: 1024,
            buried_max: 4096,
            late_slack: Duration::from_secs(1),
            rejoin_grace: Config::default_rejoin_grace(),
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
    /// A restored node's agent, not heard from since the orchestrator
    /// restarted: Suspect from now (its first heartbeat makes it Alive),
    /// Dead after `dead_after` plus `rejoin_grace` of silence. An agent
    /// that never comes back is found Dead, as a silent tracked one is;
    /// one that rejoins is tracked already.
    Expect {
        /// The logical node.
        node: LogicalNodeId,
        /// The agent the journal says the node was handed to.
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
