//! The node manager's phase and the resolution of an ambiguous intent:
//! each variant holds only the data valid in it.

use super::{AgentFacts, BootstrapFacts, Lifecycle};
use crate::ids::OpId;
use crate::port::{LeaseFacts, SshEndpoint};
use crate::time::Instant;
use std::sync::Arc;

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

/// A running bootstrap session: where it connects and what it reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Boot {
    pub(super) endpoint: SshEndpoint,
    pub(super) facts: BootstrapFacts,
}

/// The failure of the current intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    pub(super) reason: String,
    pub(super) at: Instant,
}

/// The node's phase: each variant holds only what is valid in it (the
/// lease once it is known, the session while it runs, the agent once it
/// joined). The public [`Lifecycle`] is derived from it (transient stages
/// such as `EndpointKnown` and `HandedOff` are announced but never rest),
/// and so is the ledger's [`super::Record`], with [`Past`] for what the
/// intent went through before.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Polling for the lease's endpoint; `op` is `None` between polls.
    Locating {
        op: Option<OpId>,
        lease: Arc<LeaseFacts>,
    },
    Bootstrapping {
        lease: Arc<LeaseFacts>,
        boot: Boot,
    },
    Joined {
        lease: Arc<LeaseFacts>,
        boot: Boot,
        agent: AgentFacts,
    },
    /// Ready. `rejoin_allowed` after a restore: the agent may reconnect once.
    Dormant {
        lease: Arc<LeaseFacts>,
        agent: AgentFacts,
        rejoin_allowed: bool,
    },
    /// Failed, with the lease if one is known; `unresolved` when an
    /// intent's outcome could not be learned.
    Failed {
        unresolved: bool,
        lease: Option<Arc<LeaseFacts>>,
        failure: Failure,
    },
    /// Destroying; `op` is `None` while waiting for a retry or a new Destroy.
    /// `replace` is the attempt of a replacement lease due once it is gone
    /// (0: none).
    Destroying {
        op: Option<OpId>,
        tries: u32,
        replace: u32,
        lease: Arc<LeaseFacts>,
    },
    /// Ended; `released` is the lease destroyed, and when.
    Destroyed {
        released: Option<(Arc<LeaseFacts>, Instant)>,
    },
    /// Rebuilt from the journal with work pending that `Start` resumes (a
    /// `Destroy` before it winds the node down instead). Nothing is in
    /// flight and no timer is armed.
    Restored(Pending),
}

/// What a restored node resumes on `Start`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Pending {
    /// An intent whose create may have happened: list by nonce.
    Resolve(Resolve),
    /// A known lease not ready: bootstrap again from the endpoint lookup.
    Locate { lease: Arc<LeaseFacts> },
    /// A destroy that did not finish; `replace` as in `Destroying`.
    Destroy {
        replace: u32,
        lease: Arc<LeaseFacts>,
    },
    /// The journal says the old lease's destroy finished, and the new
    /// intent with `attempt` is not journaled yet. A `Destroy` cancels it.
    Replace { attempt: u32 },
}

/// What the current intent went through before its phase, kept for the
/// ledger only (no transition reads it): the phase left hands it what it
/// held. A new intent starts with none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Past {
    /// The last session, closed or cancelled.
    pub(super) boot: Option<Boot>,
    pub(super) agent: Option<AgentFacts>,
    pub(super) lease: Option<Arc<LeaseFacts>>,
    pub(super) failure: Option<Failure>,
    /// Why the last destroy attempt (or the lists of one) failed; cleared
    /// when a destroy succeeds.
    pub(super) destroy_error: Option<String>,
}

impl Past {
    /// Keeps what `left` held.
    pub(super) fn keep(&mut self, left: Phase) {
        match left {
            Phase::Locating { lease, .. }
            | Phase::Destroying { lease, .. }
            | Phase::Restored(Pending::Locate { lease } | Pending::Destroy { lease, .. }) => {
                self.lease = Some(lease)
            }
            Phase::Bootstrapping { lease, boot } => {
                self.lease = Some(lease);
                self.boot = Some(boot);
            }
            Phase::Joined { lease, boot, agent } => {
                self.lease = Some(lease);
                self.boot = Some(boot);
                self.agent = Some(agent);
            }
            Phase::Dormant { lease, agent, .. } => {
                self.lease = Some(lease);
                self.agent = Some(agent);
            }
            Phase::Failed { lease, failure, .. } => {
                self.lease = lease.or(self.lease.take());
                self.failure = Some(failure);
            }
            Phase::Destroyed { released } => {
                if let Some((lease, _)) = released {
                    self.lease = Some(lease);
                }
            }
            Phase::New
            | Phase::Requesting { .. }
            | Phase::Resolving { .. }
            | Phase::Restored(Pending::Resolve(_) | Pending::Replace { .. }) => {}
        }
    }
}

impl Phase {
    pub(super) fn stage(&self) -> Lifecycle {
        match self {
            Phase::New => Lifecycle::New,
            Phase::Requesting { .. } | Phase::Resolving { .. } => Lifecycle::LeaseRequested,
            Phase::Locating { .. } => Lifecycle::LeaseCreated,
            Phase::Bootstrapping { .. } => Lifecycle::BootstrapRunning,
            Phase::Joined { .. } => Lifecycle::AgentJoined,
            Phase::Dormant { .. } => Lifecycle::Dormant,
            Phase::Failed { .. } => Lifecycle::Failed,
            Phase::Destroying { .. } => Lifecycle::Destroying,
            Phase::Destroyed { .. } => Lifecycle::Destroyed,
            Phase::Restored(pending) => match pending {
                Pending::Resolve(_) => Lifecycle::LeaseRequested,
                Pending::Locate { .. } => Lifecycle::LeaseCreated,
                Pending::Destroy { .. } => Lifecycle::Destroying,
                Pending::Replace { .. } => Lifecycle::Destroyed,
            },
        }
    }

    /// The lease the phase holds.
    pub(super) fn lease(&self) -> Option<&Arc<LeaseFacts>> {
        match self {
            Phase::Locating { lease, .. }
            | Phase::Bootstrapping { lease, .. }
            | Phase::Joined { lease, .. }
            | Phase::Dormant { lease, .. }
            | Phase::Destroying { lease, .. }
            | Phase::Restored(Pending::Locate { lease } | Pending::Destroy { lease, .. }) => {
                Some(lease)
            }
            Phase::Failed { lease, .. } => lease.as_ref(),
            Phase::Destroyed { released } => released.as_ref().map(|(lease, _)| lease),
            Phase::New
            | Phase::Requesting { .. }
            | Phase::Resolving { .. }
            | Phase::Restored(Pending::Resolve(_) | Pending::Replace { .. }) => None,
        }
    }

    /// The running session.
    pub(super) fn boot(&self) -> Option<&Boot> {
        match self {
            Phase::Bootstrapping { boot, .. } | Phase::Joined { boot, .. } => Some(boot),
            _ => None,
        }
    }

    /// The agent, once it joined.
    pub(super) fn agent(&self) -> Option<&AgentFacts> {
        match self {
            Phase::Joined { agent, .. } | Phase::Dormant { agent, .. } => Some(agent),
            _ => None,
        }
    }
}
