//! The boot machine: facts in, at most one outcome out.

use super::Timers;
use super::{
    BootFault, Config, Counters, Effect, Facts, Input, Phase, Resource, TimerKind,
    WorkerStartPolicy, WorkerStatus,
};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// One node's boot attempt (SPEC.md "Node boot readiness"), from process start to
/// `NodeAvailable` or one `Faulted`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    config: Config,
    phase: Phase,
    timers: Timers,
    counters: Counters,
    emitted: Emitted,
}

/// How often each announcement was made; the invariants read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Emitted {
    available: u32,
    faulted: u32,
    provisioning_ready: u32,
    worker_failed: u32,
}

/// What one fact does to a booting node.
enum Step {
    /// A new fact is held (availability may follow).
    Held,
    /// Recorded without changing readiness (a deferred worker's failure).
    Noted,
    /// Already known.
    Duplicate,
    /// Contradicts a settled outcome (a worker ready after it failed).
    Stale,
    /// The boot fails.
    Fault(BootFault),
}

impl Machine {
    /// A boot attempt starting at `now` (the process was launched); the boot
    /// deadline is armed at `now + boot_timeout`.
    pub fn new(config: Config, now: Instant) -> Machine {
        assert!(
            config.boot_timeout > Duration::ZERO,
            "boot timeout must be positive"
        );
        assert!(!config.node.as_str().is_empty(), "boot needs a node id");
        let mut timers = Timers::new();
        timers.set(TimerKind::BootDeadline, now + config.boot_timeout);
        Machine {
            config,
            phase: Phase::Booting(Facts::default()),
            timers,
            counters: Counters::default(),
            emitted: Emitted::default(),
        }
    }

    /// The policy.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where the boot stands.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Inputs ignored so far, by why.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Whether the node announced itself available.
    pub fn is_available(&self) -> bool {
        matches!(self.phase, Phase::Available { .. })
    }

    /// The fault, if the boot failed.
    pub fn fault(&self) -> Option<&BootFault> {
        match &self.phase {
            Phase::Faulted { fault } => Some(fault),
            _ => None,
        }
    }

    /// Whether the node may accept stage provisioning now: it is available
    /// and its worker is ready (SPEC.md "Node boot readiness": provisioning never races ahead of
    /// availability; with a deferred start, it also waits for the worker).
    pub fn may_accept_provisioning(&self) -> bool {
        matches!(
            self.phase,
            Phase::Available {
                worker: WorkerStatus::Ready
            }
        )
    }

    /// The facts availability needs under this policy, in spec order.
    pub fn required(&self) -> Vec<Resource> {
        Resource::ALL
            .into_iter()
            .filter(|r| {
                *r != Resource::Worker || self.config.worker_start == WorkerStartPolicy::Required
            })
            .collect()
    }

    /// Required facts not held yet; empty once the boot has an outcome.
    pub fn missing(&self) -> Vec<Resource> {
        match &self.phase {
            Phase::Booting(facts) => self
                .required()
                .into_iter()
                .filter(|r| !facts.held.contains(r))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Fires every timer due at `now`; false when none was due. Called for
    /// every input, not only ticks, so a fact that arrives after the deadline
    /// but before its tick cannot make a timed-out node available.
    fn expire(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
        let expired = self.timers.take_expired(now);
        let any = !expired.is_empty();
        for kind in expired {
            match kind {
                TimerKind::BootDeadline => {
                    // Only armed while booting (BT6), so something is missing.
                    let missing = self.missing();
                    let after = self.config.boot_timeout;
                    self.enter_fault(BootFault::Timeout { missing, after }, out);
                }
            }
        }
        any
    }

    fn on_booting(&mut self, input: Input, out: &mut Vec<Effect>) {
        let Phase::Booting(facts) = &mut self.phase else {
            unreachable!("on_booting outside Booting");
        };
        match booting_step(&self.config, facts, input) {
            Step::Held => {
                if self.missing().is_empty() {
                    self.enter_available(out);
                }
            }
            Step::Noted => {}
            Step::Duplicate => self.counters.duplicate_facts += 1,
            Step::Stale => self.counters.after_outcome += 1,
            Step::Fault(fault) => self.enter_fault(fault, out),
        }
    }

    fn on_available(&mut self, input: Input, out: &mut Vec<Effect>) {
        let node = self.config.node.clone();
        let Phase::Available { worker } = &mut self.phase else {
            unreachable!("on_available outside Available");
        };
        match (&*worker, input) {
            (WorkerStatus::Pending, Input::WorkerReady) => {
                *worker = WorkerStatus::Ready;
                self.emitted.provisioning_ready += 1;
                out.push(Effect::ProvisioningReady { node });
            }
            (WorkerStatus::Pending | WorkerStatus::Ready, Input::WorkerFailed { reason }) => {
                // A crash after availability withdraws provisioning readiness,
                // whatever the policy; the boot outcome itself stands.
                *worker = WorkerStatus::Failed {
                    reason: reason.clone(),
                };
                self.emitted.worker_failed += 1;
                out.push(Effect::WorkerUnavailable { node, reason });
            }
            (WorkerStatus::Ready, Input::WorkerReady) => self.counters.duplicate_facts += 1,
            (_, input) if is_success(&input) && !matches!(input, Input::WorkerReady) => {
                self.counters.duplicate_facts += 1
            }
            // Failures of other boot resources after availability, and a
            // worker ready after it failed, belong to the run.
            _ => self.counters.after_outcome += 1,
        }
    }

    fn enter_available(&mut self, out: &mut Vec<Effect>) {
        let Phase::Booting(facts) = &mut self.phase else {
            unreachable!("available outside Booting");
        };
        let worker = if facts.held.contains(&Resource::Worker) {
            WorkerStatus::Ready
        } else if let Some(reason) = facts.deferred_worker_failure.take() {
            WorkerStatus::Failed { reason }
        } else {
            WorkerStatus::Pending
        };
        let node = self.config.node.clone();
        self.timers.cancel(&TimerKind::BootDeadline);
        self.emitted.available += 1;
        out.push(Effect::NodeAvailable { node: node.clone() });
        match &worker {
            WorkerStatus::Ready => {
                self.emitted.provisioning_ready += 1;
                out.push(Effect::ProvisioningReady { node });
            }
            WorkerStatus::Failed { reason } => {
                self.emitted.worker_failed += 1;
                let reason = reason.clone();
                out.push(Effect::WorkerUnavailable { node, reason });
            }
            WorkerStatus::Pending => {}
        }
        self.phase = Phase::Available { worker };
    }

    fn enter_fault(&mut self, fault: BootFault, out: &mut Vec<Effect>) {
        self.timers.clear();
        self.emitted.faulted += 1;
        let node = self.config.node.clone();
        out.push(Effect::Faulted {
            node,
            fault: fault.clone(),
        });
        self.phase = Phase::Faulted { fault };
    }
}

/// Whether an input reports a resource coming up (as opposed to failing).
fn is_success(input: &Input) -> bool {
    matches!(
        input,
        Input::ProcessAlive
            | Input::TransportReady
            | Input::IdentityAssigned { .. }
            | Input::ArenaCreated
            | Input::WorkerReady
            | Input::Membership(_)
            | Input::CanAcceptProvisioning
    )
}

/// Folds one fact into a booting node's facts.
fn booting_step(config: &Config, facts: &mut Facts, input: Input) -> Step {
    let hold = |facts: &mut Facts, resource| {
        if facts.held.insert(resource) {
            Step::Held
        } else {
            Step::Duplicate
        }
    };
    match input {
        Input::ProcessAlive => hold(facts, Resource::Process),
        Input::TransportReady => hold(facts, Resource::Transport),
        Input::ArenaCreated => hold(facts, Resource::Arena),
        Input::CanAcceptProvisioning => hold(facts, Resource::Provisioning),
        Input::TransportFailed { reason } => Step::Fault(BootFault::TransportFailed { reason }),
        Input::ArenaFailed { reason } => Step::Fault(BootFault::ArenaFailed { reason }),
        Input::IdentityInvalid { reason } => Step::Fault(BootFault::IdentityInvalid { reason }),
        Input::IdentityAssigned { node } if node != config.node => {
            let reason = format!("assigned {node}, but started as {}", config.node);
            Step::Fault(BootFault::IdentityInvalid { reason })
        }
        Input::IdentityAssigned { node } => {
            facts.identity = Some(node);
            hold(facts, Resource::Identity)
        }
        Input::Membership(m) if facts.membership.is_some_and(|seen| seen >= m) => Step::Duplicate,
        Input::Membership(m) => {
            facts.membership = Some(m);
            // Joined after Joining is progress, not a new readiness fact.
            let _ = hold(facts, Resource::Membership);
            Step::Held
        }
        Input::WorkerReady if facts.deferred_worker_failure.is_some() => Step::Stale,
        Input::WorkerReady => hold(facts, Resource::Worker),
        Input::WorkerFailed { reason } => match config.worker_start {
            WorkerStartPolicy::Required => Step::Fault(BootFault::WorkerStartFailed { reason }),
            WorkerStartPolicy::Deferred if facts.deferred_worker_failure.is_some() => {
                Step::Duplicate
            }
            WorkerStartPolicy::Deferred => {
                // A worker that was ready and then died is failed too: boot
                // does not restart workers.
                facts.held.remove(&Resource::Worker);
                facts.deferred_worker_failure = Some(reason);
                Step::Noted
            }
        },
        Input::Tick => unreachable!("ticks are handled before facts"),
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        let expired = self.expire(now, &mut out);
        match (&self.phase, input) {
            (_, Input::Tick) if !expired => self.counters.spurious_ticks += 1,
            (_, Input::Tick) => {}
            (Phase::Faulted { .. }, _) => self.counters.after_fault += 1,
            (Phase::Booting(_), input) => self.on_booting(input, &mut out),
            (Phase::Available { .. }, input) => self.on_available(input, &mut out),
        }
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    fn check_invariants(&self) {
        let e = self.emitted;
        assert!(
            e.available + e.faulted <= 1,
            "BT2: two boot outcomes: {e:?}"
        );
        match &self.phase {
            Phase::Booting(facts) => {
                assert!(
                    self.timers.is_set(&TimerKind::BootDeadline),
                    "BT6: booting without a deadline"
                );
                assert_eq!(e, Emitted::default(), "BT1: announced while booting");
                assert!(
                    !self.missing().is_empty(),
                    "BT1: every fact held but not available"
                );
                assert_eq!(
                    facts.identity.is_some(),
                    facts.held.contains(&Resource::Identity)
                );
                if let Some(id) = &facts.identity {
                    assert_eq!(
                        id, &self.config.node,
                        "BT8: identity differs from the node's"
                    );
                }
                assert_eq!(
                    facts.membership.is_some(),
                    facts.held.contains(&Resource::Membership)
                );
                if facts.deferred_worker_failure.is_some() {
                    assert_eq!(self.config.worker_start, WorkerStartPolicy::Deferred, "BT5");
                    assert!(
                        !facts.held.contains(&Resource::Worker),
                        "BT5: worker both ready and failed"
                    );
                }
            }
            Phase::Available { worker } => {
                assert!(
                    self.timers.is_empty(),
                    "BT6: a timer armed after availability"
                );
                assert_eq!(e.available, 1, "BT1: available without announcing it");
                let (ready_max, failed) = match worker {
                    WorkerStatus::Pending => (0, 0),
                    WorkerStatus::Ready => (1, 0),
                    WorkerStatus::Failed { .. } => (1, 1),
                };
                let ready_min = u32::from(*worker == WorkerStatus::Ready);
                assert!(
                    (ready_min..=ready_max).contains(&e.provisioning_ready),
                    "BT4: provisioning readiness announced {} times with the worker {worker:?}",
                    e.provisioning_ready
                );
                assert_eq!(
                    e.worker_failed, failed,
                    "BT5: worker failure announced wrongly"
                );
                if self.config.worker_start == WorkerStartPolicy::Required {
                    assert_eq!(e.provisioning_ready, 1, "BT5: required worker never ready");
                }
            }
            Phase::Faulted { fault } => {
                assert!(self.timers.is_empty(), "BT6: a timer armed after the fault");
                assert_eq!(e.faulted, 1, "BT2: faulted without announcing it");
                assert_eq!(
                    e.provisioning_ready + e.worker_failed,
                    0,
                    "BT3: faulted node went on"
                );
                assert!(
                    !fault.resources().is_empty(),
                    "BT7: a fault names no resource"
                );
            }
        }
    }
}
