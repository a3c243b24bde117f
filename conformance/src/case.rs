//! The explicit plan of one simulated run: a swarm profile (the world's
//! shape and timings) and a list of plan items (timed operator actions and
//! faults keyed by operation ordinal).
//!
//! A case is everything a backend needs to run; the seed that drew it is kept
//! only to name it. Shrinking edits the case, never the seed, and a trace is
//! a case written as text.

use core_fsm::plan::ReplacementPolicy;
use std::fmt;

/// Which world operation a fault is keyed on. Ordinals count every request of
/// that kind the world received in the whole run (all incarnations), from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// `CreateLease`.
    Create,
    /// `LookupEndpoint`.
    Lookup,
    /// `DestroyLease`.
    Destroy,
    /// `ListLeases`.
    List,
    /// `SshConnect`.
    Connect,
    /// `SshExec` of the probe.
    Probe,
    /// `SshExec` of a verify command.
    Verify,
    /// `SshExec` of the agent start command.
    Start,
    /// `SshExec` of a log tail (runs until the connection closes).
    Tail,
    /// `SshClose`.
    Close,
}

impl OpKind {
    /// Every kind, in a fixed order.
    pub const ALL: [OpKind; 10] = [
        OpKind::Create,
        OpKind::Lookup,
        OpKind::Destroy,
        OpKind::List,
        OpKind::Connect,
        OpKind::Probe,
        OpKind::Verify,
        OpKind::Start,
        OpKind::Tail,
        OpKind::Close,
    ];

    /// The kind's name in traces.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Lookup => "lookup",
            OpKind::Destroy => "destroy",
            OpKind::List => "list",
            OpKind::Connect => "connect",
            OpKind::Probe => "probe",
            OpKind::Verify => "verify",
            OpKind::Start => "start",
            OpKind::Tail => "tail",
            OpKind::Close => "close",
        }
    }

    /// Parses a trace name.
    pub fn parse(text: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == text)
    }

    /// Whether the kind is a provider call.
    pub fn is_provider(self) -> bool {
        matches!(
            self,
            OpKind::Create | OpKind::Lookup | OpKind::Destroy | OpKind::List
        )
    }

    /// Whether the kind is a command run over SSH.
    pub fn is_exec(self) -> bool {
        matches!(
            self,
            OpKind::Probe | OpKind::Verify | OpKind::Start | OpKind::Tail
        )
    }
}

/// How one provider or SSH request misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpFault {
    /// 429 (F15): nothing happened.
    RateLimited,
    /// 502/503/504 (F21): nothing happened.
    ServerError,
    /// The offer is gone (F2): a create is rejected.
    OfferGone,
    /// The create took effect but its answer was lost (F5).
    AmbiguousCreated,
    /// The answer was lost and the create did not take effect.
    AmbiguousNotCreated,
    /// The create succeeds but the lease is the loser of a double rent (F3).
    DoubleRent,
    /// The created lease is absent from lists for this long (F4).
    Invisible {
        /// How long, in ms.
        ms: u64,
    },
    /// SSH: the connection is refused.
    Refused,
    /// SSH: the connect or command hits the port's own timeout.
    Timeout,
    /// SSH: public-key authentication denied (F20).
    AuthDenied,
    /// SSH: the connection resets mid-command.
    Reset,
    /// SSH: the command exits with this code.
    Exit {
        /// The exit code.
        code: i32,
    },
}

/// How the network treats one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NetFault {
    /// The answer arrives this much later than usual.
    Delay {
        /// Extra latency, in ms.
        ms: u64,
    },
    /// The answer never arrives (the request did take effect).
    Drop,
    /// The answer arrives twice.
    Duplicate,
}

/// How one created lease (instance) misbehaves over its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LeaseFault {
    /// Stays loading forever (F6, F9).
    StuckLoading,
    /// Takes this much longer to boot.
    SlowBoot {
        /// Extra boot time, in ms.
        ms: u64,
    },
    /// Running, but the SSH endpoint appears this much later (F7).
    SshLate {
        /// Extra delay, in ms.
        ms: u64,
    },
    /// Exits this long after creation (F11).
    Exits {
        /// When, in ms after creation.
        after_ms: u64,
    },
    /// Its host goes offline this long after creation (F12).
    Offline {
        /// When, in ms after creation.
        after_ms: u64,
    },
    /// It is outbid and stopped this long after creation (F13).
    Outbid {
        /// When, in ms after creation.
        after_ms: u64,
    },
    /// Its agent never joins (crashes before joining).
    AgentNeverJoins,
    /// Its agent presents a wrong token; the transport rejects it.
    AgentWrongToken,
    /// Its agent joins twice.
    AgentJoinsTwice,
    /// Its agent crashes after handoff.
    AgentCrashesAfterHandoff,
    /// An earlier agent of the same node joins with that node's previous,
    /// still unrevoked binding (a join for the wrong lease).
    StaleJoin,
}

/// How a host misbehaves for every lease placed on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostFault {
    /// Every SSH connect is refused.
    Refuses,
    /// Every verify command fails.
    VerifyFails,
    /// Every lease exits shortly after it starts running.
    Exits,
}

/// A timed action of the operator or the world.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// The orchestrator process is killed, and restarted from its journal
    /// after `restart_after_ms`.
    Crash {
        /// Downtime, in ms.
        restart_after_ms: u64,
    },
    /// Every provider call is answered 429 for this long (F15).
    Storm {
        /// Length of the storm, in ms.
        ms: u64,
    },
    /// The operator tears the run down early.
    Teardown,
    /// The operator destroys one node.
    Destroy {
        /// Index of the node in plan order.
        node: u32,
    },
    /// An answer for an operation nobody asked for arrives.
    UnknownAnswer,
    /// The operator sets a group's desired count (the dashboard's +1 / -1,
    /// or any count: the machine takes an absolute one).
    Scale {
        /// Index of the group in plan order (modulo the plan's groups).
        group: u32,
        /// Its new desired count.
        count: u32,
    },
}

/// One item of the explicit plan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Item {
    /// An action at a virtual time.
    At {
        /// When, in ms since the run epoch.
        at: u64,
        /// What.
        action: Action,
    },
    /// The `nth` request of `op` misbehaves.
    Op {
        /// The request kind.
        op: OpKind,
        /// Its ordinal.
        nth: u32,
        /// How.
        fault: OpFault,
    },
    /// The answer to the `nth` request of `op` is delayed, dropped or doubled.
    Net {
        /// The request kind.
        op: OpKind,
        /// Its ordinal.
        nth: u32,
        /// How.
        fault: NetFault,
    },
    /// The orchestrator is killed right after it dispatches its `nth` effect
    /// (0-based, all incarnations together).
    CrashAfterEffect {
        /// The effect ordinal.
        nth: u32,
        /// Downtime, in ms.
        restart_after_ms: u64,
    },
    /// The orchestrator is killed while its `nth` journal write is not yet
    /// synced (the write is lost).
    CrashBeforeSync {
        /// The journal write ordinal.
        nth: u32,
        /// Downtime, in ms.
        restart_after_ms: u64,
    },
    /// The `nth` created lease misbehaves.
    Lease {
        /// The creation ordinal.
        nth: u32,
        /// How.
        fault: LeaseFault,
    },
    /// A host is bad.
    Host {
        /// The host index.
        host: u32,
        /// How.
        fault: HostFault,
    },
}

/// The swarm profile: the world's shape and timings, drawn first from the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// Node count per group (groups are named `g0`, `g1`, ...).
    pub groups: Vec<u32>,
    /// Verify commands per node.
    pub verify_commands: u32,
    /// The plan's replacement policy.
    pub replacement: ReplacementPolicy,
    /// Hosts the provider can place leases on.
    pub hosts: u32,
    /// Whether a create already returns the SSH endpoint (local-like).
    pub endpoint_on_create: bool,
    /// Journal sync latency, in ms.
    pub fsync_ms: u64,
    /// Usual latency of one provider or SSH answer, in ms.
    pub latency_ms: u64,
    /// Boot time of a lease (created to running), in ms.
    pub boot_ms: u64,
    /// Running to SSH reachable, in ms.
    pub ssh_ms: u64,
    /// Agent start to join, in ms.
    pub join_ms: u64,
    /// The seed the orchestrator under test is built with.
    pub system_seed: u64,
    /// When the fault phase ends and the heal phase begins, in ms.
    pub heal_at_ms: u64,
    /// The generator's fault rates, per mille, by fault name (for people and
    /// coverage; the items are what the world acts on).
    pub rates: Vec<(String, u32)>,
}

impl Profile {
    /// Total logical nodes.
    pub fn node_count(&self) -> u32 {
        self.groups.iter().sum()
    }
}

/// One run: its name, profile and explicit plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The scenario that drew it.
    pub scenario: String,
    /// The seed that drew it (a name only; replay does not use it).
    pub seed: u64,
    /// The swarm profile.
    pub profile: Profile,
    /// The explicit plan.
    pub items: Vec<Item>,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
