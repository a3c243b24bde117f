//! The composite's provisioning effects on a happy path: the run's plan
//! (one group `w` of one node per stage, so node `w-S` runs stage S),
//! a provider that grants every lease with its endpoint, SSH that connects
//! and runs every command with exit 0, and the start command, which starts
//! the stage's agent on a new node bound to the lease. Every answer comes
//! back through the inbox after a hop's latency of madsim time; the
//! leases live in the world, so they outlive the orchestrator.

use super::HostSink;
use crate::run::shared::Control;
use conformance::run::RunProfile;
use core_fsm::ids::{LeaseId, OpId};
use core_fsm::orchestrator::Config;
use core_fsm::port::{
    CreateLeaseRequest, Effect, EndpointStatus, Input, JournalRecord, LeaseGranted, SshEndpoint,
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
                    let w = self.shared.lock();
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

    /// A lease for `request`'s node, with its endpoint.
    fn create(&self, op: OpId, request: &CreateLeaseRequest) -> Input {
        let mut w = self.shared.lock();
        let contract = 1000 + w.leases.len();
        let facts = sim::run_world::kit::lease_facts(request, contract as u32);
        let stage = w.stage_of(&request.node).unwrap_or(u32::MAX);
        w.leases
            .insert(facts.lease_id.clone(), (stage, facts.clone(), false));
        let granted = LeaseGranted {
            lease: Arc::new(facts),
            endpoint: Some(endpoint(contract)),
        };
        Input::LeaseCreated {
            op,
            result: Ok(granted),
        }
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
