//! A dead node's replacement provisioning, as the case plans its faults:
//! the provider's answer to a replacement's create
//! (`replacement-create-fails`) and a replacement lease's start command
//! (`replacement-boot-fails`). The rest of the provisioning side is in
//! `provision.rs`.

use super::RunWorld;
use super::provision::{Lease, lease_facts};
use conformance::run::RunFault;
use core_fsm::ids::{OpId, SessionId};
use core_fsm::port::{
    CreateLeaseRequest, Input, LeaseFacts, LeaseGranted, ProviderError, ProviderErrorKind,
    SshEndpoint,
};
use std::sync::Arc;

/// The provider's answer to a replacement's create that
/// `replacement-create-fails` strikes with argument `how`: 0 `Transient`
/// (nothing created), 1 `Ambiguous` (the lease was created), otherwise
/// `Rejected`. Both tiers' run worlds answer so.
pub fn refused_create(how: u64) -> ProviderError {
    let (kind, message) = match how {
        0 => (ProviderErrorKind::Transient, "429 too many requests"),
        1 => (ProviderErrorKind::Ambiguous, "the create's answer was lost"),
        _ => (ProviderErrorKind::Rejected, "no offer fits"),
    };
    let message = message.to_owned();
    ProviderError { kind, message }
}

impl RunWorld<'_> {
    /// The provider answers a create: a new lease with its endpoint, unless
    /// a replacement's create is planned to fail.
    pub(super) fn create(&mut self, op: OpId, request: &CreateLeaseRequest) {
        let Some(s) = self.stage_of(&request.node) else {
            return;
        };
        let created = &mut self.ps.created[s as usize];
        *created += 1;
        let replacing = *created > 1;
        if replacing {
            self.coverage.labels.insert("composite:replaced".to_owned());
            self.note(&format!("world: {} asks for a new lease", request.node));
            let nth = self.ps.replacement_creates;
            self.ps.replacement_creates += 1;
            let fault = RunFault::ReplacementCreateFails;
            if let Some(how) = self
                .planned(fault, nth)
                .filter(|_| self.fired.insert(fault))
            {
                self.inject(fault);
                let refusal = refused_create(how);
                // An ambiguous answer hides a lease that was created.
                if refusal.kind == ProviderErrorKind::Ambiguous {
                    self.grant(s, request, replacing);
                }
                let result = Err(refusal);
                return self.answer(Input::LeaseCreated { op, result });
            }
        }
        let (lease, endpoint) = self.grant(s, request, replacing);
        let result = Ok(LeaseGranted {
            lease,
            endpoint: Some(endpoint),
        });
        self.answer(Input::LeaseCreated { op, result });
    }

    /// A new lease for stage `s`'s node, with its endpoint.
    fn grant(
        &mut self,
        s: u32,
        request: &CreateLeaseRequest,
        replacing: bool,
    ) -> (Arc<LeaseFacts>, SshEndpoint) {
        self.ps.contracts += 1;
        let contract = self.ps.contracts;
        let facts = Arc::new(lease_facts(request, contract));
        let endpoint = SshEndpoint {
            host: format!("10.0.{}.{}", contract / 250, contract % 250).into(),
            port: 22,
            user: "root".into(),
        };
        let replacement = replacing.then(|| {
            self.ps.replacement_leases += 1;
            self.ps.replacement_leases - 1
        });
        let lease = Lease {
            facts: facts.clone(),
            endpoint: endpoint.clone(),
            stage: s,
            agent: None,
            died: false,
            destroyed: false,
            destroy_told: false,
            replacement,
        };
        self.ps.leases.insert(facts.lease_id.clone(), lease);
        (facts, endpoint)
    }

    /// Whether the start command of `session` fails: its lease is the
    /// replacement lease a planned boot failure strikes.
    pub(super) fn start_fails(&mut self, session: SessionId) -> bool {
        let fault = RunFault::ReplacementBootFails;
        let nth = (self.ps.sessions.get(&session))
            .and_then(|(id, _)| self.ps.leases.get(id))
            .and_then(|l| l.replacement);
        let fails =
            nth.is_some_and(|nth| self.planned(fault, nth).is_some()) && self.fired.insert(fault);
        if fails {
            self.inject(fault);
        }
        fails
    }
}
