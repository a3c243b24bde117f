//! The simulated Vast-like provider (reference §A.12): leases with a
//! lifecycle (`created` -> `loading` -> `running`, SSH a little later), offers
//! on a pool of hosts, labels that carry the intent nonce, and the
//! documented misbehaviours (F2-F21) as the plan asks for them.
//!
//! The provider is a plain data structure: the world decides when a request
//! reaches it and when the answer comes back.

use conformance::case::{HostFault, LeaseFault, Profile};
use core_fsm::ids::{LeaseId, LogicalNodeId, Nonce};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, ProviderError, ProviderErrorKind, SshEndpoint,
};
use core_fsm::time::{Duration, Instant};
use std::collections::BTreeMap;

/// One lease (a Vast instance).
#[derive(Clone, Debug)]
pub struct Lease {
    /// Its facts, as a create or a list reports them.
    pub facts: LeaseFacts,
    /// The node it was created for.
    pub node: LogicalNodeId,
    /// Creation ordinal (keys lease faults).
    pub ordinal: u32,
    /// The host index.
    pub host: u32,
    /// When it was created.
    pub created_at: Instant,
    /// When it starts running; `None` while stuck loading.
    pub running_at: Option<Instant>,
    /// When its SSH endpoint answers.
    pub ssh_at: Option<Instant>,
    /// Absent from lists until then (F4).
    pub visible_at: Instant,
    /// When it goes down, and why.
    pub down: Option<(Instant, &'static str)>,
    /// Destroyed.
    pub destroyed: bool,
}

/// What a lease is doing at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Created or loading.
    Loading,
    /// Running, SSH not yet reachable.
    Running,
    /// Running and reachable over SSH.
    Reachable,
    /// Exited, offline or stopped.
    Down(&'static str),
    /// Destroyed.
    Gone,
}

/// The provider's state.
#[derive(Clone, Debug, Default)]
pub struct Provider {
    /// Leases by contract id.
    pub leases: BTreeMap<u64, Lease>,
    by_id: BTreeMap<LeaseId, u64>,
    created: u32,
}

/// How a create should go, decided by the world from the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    /// Normal.
    Plain,
    /// Created, but the loser of a double rent (F3).
    DoubleRent,
    /// Created, absent from lists for this long (F4).
    Invisible(Duration),
}

impl Provider {
    /// Leases created so far.
    pub fn created_count(&self) -> u32 {
        self.created
    }

    /// The lease behind an id.
    pub fn get(&self, id: &LeaseId) -> Option<&Lease> {
        self.by_id.get(id).and_then(|c| self.leases.get(c))
    }

    /// The ordinal the next lease will get.
    pub fn next_ordinal(&self) -> u32 {
        self.created
    }

    /// Picks a host: round robin over hosts not excluded.
    pub fn pick_host(&self, profile: &Profile, excluded: &[String]) -> Option<u32> {
        let eligible: Vec<u32> = (0..profile.hosts)
            .filter(|h| !excluded.contains(&host_name(*h)))
            .collect();
        if eligible.is_empty() {
            return None;
        }
        Some(eligible[self.created as usize % eligible.len()])
    }

    /// Creates a lease on `host` for `request`.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        now: Instant,
        profile: &Profile,
        request: &CreateLeaseRequest,
        host: u32,
        mode: CreateMode,
        lease_faults: &[LeaseFault],
        host_fault: Option<HostFault>,
    ) -> LeaseFacts {
        let ordinal = self.created;
        self.created += 1;
        let contract = 1000 + u64::from(ordinal);
        let facts = LeaseFacts {
            provider: ProviderKind::Vastai,
            lease_id: LeaseId::new(format!("vastai:{contract}")),
            contract_id: contract.to_string(),
            offer_id: Some(format!("offer-{host}-{ordinal}")),
            host_id: Some(host_name(host)),
            nonce: request.nonce,
            metadata: BTreeMap::new(),
        };
        let mut boot = Duration::from_millis(profile.boot_ms);
        let mut ssh = Duration::from_millis(profile.ssh_ms);
        let mut stuck = false;
        let mut down = None;
        for fault in lease_faults {
            match *fault {
                LeaseFault::StuckLoading => stuck = true,
                LeaseFault::SlowBoot { ms } => boot = boot + Duration::from_millis(ms),
                LeaseFault::SshLate { ms } => ssh = ssh + Duration::from_millis(ms),
                LeaseFault::Exits { after_ms } => {
                    down = Some((
                        now + Duration::from_millis(after_ms),
                        "exited: entrypoint died",
                    ))
                }
                LeaseFault::Offline { after_ms } => {
                    down = Some((
                        now + Duration::from_millis(after_ms),
                        "offline: host unreachable",
                    ))
                }
                LeaseFault::Outbid { after_ms } => {
                    down = Some((now + Duration::from_millis(after_ms), "stopped: outbid"))
                }
                _ => {}
            }
        }
        let running_at = (!stuck).then_some(now + boot);
        if mode == CreateMode::DoubleRent {
            down = Some((
                now + boot + Duration::from_secs(2),
                "exited: port bind failed (double rent)",
            ));
        }
        if host_fault == Some(HostFault::Exits) {
            let at = now + boot + Duration::from_secs(3);
            down = Some(down.map_or((at, "exited: host fault"), |d| {
                d.min((at, "exited: host fault"))
            }));
        }
        let visible_at = match mode {
            CreateMode::Invisible(d) => now + d,
            _ => now,
        };
        self.by_id.insert(facts.lease_id.clone(), contract);
        self.leases.insert(
            contract,
            Lease {
                facts: facts.clone(),
                node: request.node.clone(),
                ordinal,
                host,
                created_at: now,
                running_at,
                ssh_at: running_at.map(|r| r + ssh),
                visible_at,
                down,
                destroyed: false,
            },
        );
        facts
    }

    /// What lease `id` is doing at `now`.
    pub fn status(&self, id: &LeaseId, now: Instant) -> Status {
        let Some(lease) = self.get(id) else {
            return Status::Gone;
        };
        if lease.destroyed {
            return Status::Gone;
        }
        if let Some((at, why)) = lease.down
            && at <= now
        {
            return Status::Down(why);
        }
        match (lease.running_at, lease.ssh_at) {
            (Some(r), Some(s)) if s <= now && r <= now => Status::Reachable,
            (Some(r), _) if r <= now => Status::Running,
            _ => Status::Loading,
        }
    }

    /// The SSH endpoint of a lease.
    pub fn endpoint(lease: &Lease) -> SshEndpoint {
        SshEndpoint {
            host: format!("ssh{}.vast.sim", lease.host).into(),
            port: u16::try_from(
                20_000 + lease.facts.contract_id.parse::<u64>().unwrap_or(0) % 40_000,
            )
            .unwrap_or(22),
            user: "root".into(),
        }
    }

    /// Answers an endpoint lookup (the adapter maps "not yet visible" to
    /// pending, F4).
    pub fn lookup(&self, id: &LeaseId, now: Instant) -> EndpointStatus {
        let Some(lease) = self.get(id) else {
            return EndpointStatus::Gone;
        };
        if now < lease.visible_at && !lease.destroyed {
            return EndpointStatus::Pending {
                detail: "not yet visible".to_owned(),
            };
        }
        match self.status(id, now) {
            Status::Gone => EndpointStatus::Gone,
            Status::Down(why) => EndpointStatus::Failed {
                reason: why.to_owned(),
            },
            Status::Loading => EndpointStatus::Pending {
                detail: "loading".to_owned(),
            },
            Status::Running => EndpointStatus::Pending {
                detail: "running, ssh port not yet mapped".to_owned(),
            },
            Status::Reachable => EndpointStatus::Ready(Provider::endpoint(lease)),
        }
    }

    /// Destroys a lease; a destroy of a gone lease is `NotFound` (F18).
    pub fn destroy(&mut self, id: &LeaseId) -> Result<(), ProviderError> {
        let lease = self
            .by_id
            .get(id)
            .and_then(|c| self.leases.get_mut(c))
            .filter(|l| !l.destroyed);
        match lease {
            Some(lease) => {
                lease.destroyed = true;
                Ok(())
            }
            None => Err(ProviderError {
                kind: ProviderErrorKind::NotFound,
                message: "no_such_instance".to_owned(),
            }),
        }
    }

    /// Every visible, not destroyed lease whose label names a nonce.
    pub fn list(&self, now: Instant) -> Vec<LeaseFacts> {
        self.leases
            .values()
            .filter(|l| !l.destroyed && l.visible_at <= now)
            .map(|l| l.facts.clone())
            .collect()
    }

    /// The lease created for `nonce`, if any.
    pub fn by_nonce(&self, nonce: Nonce) -> Option<&Lease> {
        self.leases.values().find(|l| l.facts.nonce == nonce)
    }
}

/// The name of host `h` as leases and quarantine report it.
pub fn host_name(h: u32) -> String {
    format!("host-{h}")
}
