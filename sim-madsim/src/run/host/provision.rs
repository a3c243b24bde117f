//! The composite's provisioning effects: the run's plan (one group `w` of
//! one node per stage, so node `w-S` runs stage S), a provider that grants
//! every lease with its endpoint, SSH that connects and runs every command
//! with exit 0, and the start command, which starts the stage's agent on a
//! new node bound to the lease. Only a replacement's provisioning fails,
//! as the case plans it (tier 1's `replacement-create-fails` and
//! `replacement-boot-fails`). Every answer comes
//! back through the inbox after a hop's latency of madsim time; the
//! leases live in the world, so they outlive the orchestrator.

use super::HostSink;
use crate::run::shared::Control;
use conformance::run::{RunFault, RunProfile};
use core_fsm::ids::{LeaseId, OpId};
use core_fsm::orchestrator::Config;
use core_fsm::port::{
    CreateLeaseRequest, Effect, EndpointStatus, Input, JournalRecord, LeaseGranted,
    ProviderErrorKind, SshEndpoint,
};
use driver::{Disk, DiskError};
use std::sync::Arc;

/// The composite's config for a case: tier 1's (`kit::orchestrator_config`:
/// the plan of `stages` nodes of group `w`, membership as `drover up` sets
/// it, `Bounded` replacement when the case repairs).
pub(crate) fn config(p: &RunProfile) -> Config {
    sim::run_world::kit::orchestrator_config(p)
}

/// Where lease `contract` answers SSH.
fn endpoint(contract: usize) -> SshEndpoint {
    SshEndpoint {
        host: format!("ssh{contract}.vast.sim").into(),
        port: 22,
        user: "root".into(),
    }
}

impl HostSink {
    /// Carries out a provisioning effect (`Persist` is the disk's).
    pub(super) fn provision(&self, effect: Effect) {
        let input = match effect {
            Effect::CreateLease { op, request } => self.create(op, &request),
            Effect::LookupEndpoint { op, lease } => {
                let w = self.shared.lock();
                let status = match w.leases.get(&lease.lease_id) {
                    Some((_, _, false)) => {
                        let contract = lease.contract_id.parse().unwrap_or(0);
                        EndpointStatus::Ready(endpoint(contract))
                    }
                    _ => EndpointStatus::Gone,
                };
                Input::EndpointLooked {
                    op,
                    result: Ok(status),
                }
            }
            Effect::DestroyLease { op, lease } => {
                self.destroy(&lease.lease_id);
                Input::LeaseDestroyed { op, result: Ok(()) }
            }
            Effect::ListLeases { op, .. } => {
                let w = self.shared.lock();
                let live = w
                    .leases
                    .values()
                    .filter(|(_, _, destroyed)| !destroyed)
                    .map(|(_, facts, _)| Arc::new(facts.clone()))
                    .collect();
                Input::LeasesListed {
                    op,
                    result: Ok(live),
                }
            }
            Effect::SshConnect { op, .. } => Input::SshConnected { op, result: Ok(()) },
            Effect::SshExec { op, join, .. } => {
                // The start command: the stage's agent starts, bound to
                // the lease; its join reaches the control plane.
                if let Some(binding) = join {
                    let mut w = self.shared.lock();
                    let fault = RunFault::ReplacementBootFails;
                    let nth = w.replacement_leases.get(&binding.lease_id).copied();
                    if nth.is_some_and(|n| w.planned(fault, n).is_some()) && w.fired.insert(fault) {
                        w.inject(fault);
                        drop(w);
                        return self.answer(Input::SshExited { op, result: Ok(1) });
                    }
                    if let Some(stage) = w.stage_of(&binding.node) {
                        w.ask(Control::Boot {
                            stage,
                            lease: binding.lease_id,
                        });
                    }
                }
                Input::SshExited { op, result: Ok(0) }
            }
            Effect::SshClose { op, .. } => Input::SshClosed { op },
            // Nothing to do: no token is minted here, the log and the
            // node's changes were recorded with the step.
            Effect::RevokeJoin(_)
            | Effect::Log(_)
            | Effect::NodeChanged { .. }
            | Effect::Persist(_)
            | Effect::Pipeline(_) => return,
        };
        self.answer(input);
    }

    /// A lease for `request`'s node, with its endpoint, unless a
    /// replacement's create is planned to fail.
    fn create(&self, op: OpId, request: &CreateLeaseRequest) -> Input {
        let mut w = self.shared.lock();
        let stage = w.stage_of(&request.node).unwrap_or(u32::MAX);
        // The stage had a lease before (the world keeps destroyed ones).
        let replacing = w.leases.values().any(|(s, _, _)| *s == stage);
        let mut refused = None;
        if replacing {
            let nth = w.replacement_creates;
            w.replacement_creates += 1;
            let fault = RunFault::ReplacementCreateFails;
            if let Some(how) = w.planned(fault, nth).filter(|_| w.fired.insert(fault)) {
                w.inject(fault);
                refused = Some(how);
            }
        }
        let refusal = refused.map(sim::run_world::kit::refused_create);
        if refusal
            .as_ref()
            .is_none_or(|r| r.kind == ProviderErrorKind::Ambiguous)
        {
            // Granted; an ambiguous answer hides a lease that was created.
            let contract = 1000 + w.leases.len();
            let facts = sim::run_world::kit::lease_facts(request, contract as u32);
            w.leases
                .insert(facts.lease_id.clone(), (stage, facts.clone(), false));
            if replacing {
                let nth = w.replacement_leases.len() as u32;
                w.replacement_leases.insert(facts.lease_id.clone(), nth);
            }
            if refusal.is_none() {
                let granted = LeaseGranted {
                    lease: Arc::new(facts),
                    endpoint: Some(endpoint(contract)),
                };
                return Input::LeaseCreated {
                    op,
                    result: Ok(granted),
                };
            }
        }
        let result = Err(refusal.expect("refused"));
        Input::LeaseCreated { op, result }
    }

    /// Destroys a lease: its agent's node, if alive, dies with it.
    fn destroy(&self, lease: &LeaseId) {
        let mut w = self.shared.lock();
        let Some((stage, _, destroyed)) = w.leases.get_mut(lease) else {
            return;
        };
        *destroyed = true;
        let stage = *stage;
        if let Some(slot) = w.slots.get(stage as usize)
            && slot.alive
            && slot.lease.as_ref() == Some(lease)
        {
            let generation = slot.generation;
            w.ask(Control::Kill { stage, generation });
        }
    }

    /// `input` reaches the composite a hop's latency from now.
    fn answer(&self, input: Input) {
        let (tx, hop) = (self.tx.clone(), self.hop);
        madsim::task::spawn_local(async move {
            madsim::time::sleep(hop).await;
            let _ = tx.send(input);
        });
    }
}

/// The orchestrator's journal: a record is durable once in the world's
/// list (the world outlives the orchestrator's node).
pub(super) struct Journal(pub(super) Arc<crate::run::shared::Shared>);

impl Disk for Journal {
    async fn persist(&mut self, record: &JournalRecord) -> Result<(), DiskError> {
        self.0.lock().journal.push(record.clone());
        Ok(())
    }
}
