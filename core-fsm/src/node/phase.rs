//! The node manager's phase and the resolution of an ambiguous intent:
//! each variant holds only the data valid in it.

use super::Lifecycle;
use crate::ids::{OpId, SessionId};

/// What to do once an ambiguous intent is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Then {
    /// Go on towards a bootstrap.
    Bootstrap,
    /// Destroy the lease if one turns up.
    Destroy,
    /// A replacement with this attempt: destroy the lease if one turns up,
    /// then a fresh intent.
    Replace(u32),
}

/// Where the resolution of an intent stands (list by nonce).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Resolve {
    /// Lists in the current run of failed ones, the one in flight included
    /// (at most `list_attempts_max`).
    pub(super) tries: u32,
    /// Successful lists that did not show the nonce (at most
    /// `list_misses_max`): a lease may exist before lists show it.
    pub(super) misses: u32,
    /// Intents tried within this attempt, the current one included.
    pub(super) intents: u32,
    /// What to do once resolved.
    pub(super) then: Then,
}

impl Resolve {
    /// A fresh resolution of the current intent.
    pub(super) fn new(intents: u32, then: Then) -> Resolve {
        Resolve {
            tries: 0,
            misses: 0,
            intents,
            then,
        }
    }
}

/// The node's phase: each variant holds only what is valid in it. The
/// public [`Lifecycle`] is derived from it (transient stages such as
/// `EndpointKnown` and `HandedOff` are announced but never rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    New,
    /// A create is in flight; `op` is `None` while waiting to send the
    /// same intent again after a `Transient` answer. `tries` counts the
    /// creates of this intent, the one in flight included.
    Requesting {
        op: Option<OpId>,
        tries: u32,
        intents: u32,
        destroy_after: bool,
    },
    /// Finding out whether a create took effect (list by nonce). `op` is
    /// `None` while waiting for a retry.
    Resolving {
        op: Option<OpId>,
        resolve: Resolve,
    },
    /// Polling for the endpoint; `op` is `None` between polls.
    Locating {
        op: Option<OpId>,
    },
    Bootstrapping {
        session: SessionId,
    },
    Joined {
        session: SessionId,
    },
    /// Ready. `rejoin_allowed` after a restore: the agent may reconnect once.
    Dormant {
        rejoin_allowed: bool,
    },
    /// Failed; `unresolved` when an intent's outcome could not be learned.
    Failed {
        unresolved: bool,
    },
    /// Destroying; `op` is `None` while waiting for a retry or a new Destroy.
    /// `replace` is the attempt of a replacement lease due once it is gone
    /// (0: none).
    Destroying {
        op: Option<OpId>,
        tries: u32,
        replace: u32,
    },
    Destroyed,
    /// Rebuilt from the journal with work pending that `Start` resumes (a
    /// `Destroy` before it winds the node down instead). Nothing is in
    /// flight and no timer is armed.
    Restored(Pending),
}

/// What a restored node resumes on `Start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pending {
    /// An intent whose create may have happened: list by nonce.
    Resolve(Resolve),
    /// A known lease not ready: bootstrap again from the endpoint lookup.
    Locate,
    /// A destroy that did not finish; `replace` as in `Destroying`.
    Destroy { replace: u32 },
    /// The journal says the old lease's destroy finished, and the new
    /// intent with `attempt` is not journaled yet. A `Destroy` cancels it.
    Replace { attempt: u32 },
}

impl Phase {
    pub(super) fn stage(self) -> Lifecycle {
        match self {
            Phase::New => Lifecycle::New,
            Phase::Requesting { .. } | Phase::Resolving { .. } => Lifecycle::LeaseRequested,
            Phase::Locating { .. } => Lifecycle::LeaseCreated,
            Phase::Bootstrapping { .. } => Lifecycle::BootstrapRunning,
            Phase::Joined { .. } => Lifecycle::AgentJoined,
            Phase::Dormant { .. } => Lifecycle::Dormant,
            Phase::Failed { .. } => Lifecycle::Failed,
            Phase::Destroying { .. } => Lifecycle::Destroying,
            Phase::Destroyed => Lifecycle::Destroyed,
            Phase::Restored(pending) => match pending {
                Pending::Resolve(_) => Lifecycle::LeaseRequested,
                Pending::Locate => Lifecycle::LeaseCreated,
                Pending::Destroy { .. } => Lifecycle::Destroying,
                Pending::Replace { .. } => Lifecycle::Destroyed,
            },
        }
    }
}
