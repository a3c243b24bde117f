//! The `static` provider: machines the user already has, listed in the plan
//! (`[[group.host]]`: host, port, user, key file per node). Nothing is
//! rented and nothing is started by a create: a lease is a *reservation* of
//! the node's machine, `static:<host>:<port>`, kept as a file in the state
//! dir:
//!
//! ```text
//! static/<lease>.json   {"run_id":..,"lease":{LeaseFacts}}   (the label)
//! ```
//!
//! Destroying a lease stops drover's agent on the machine over SSH (with the
//! host's key file and the host key pinned at bootstrap) and then releases
//! the reservation. The agent is found by the pid file its start command
//! passes as `--pid-file .drover/run-<run>/<node>.pid` (relative to the SSH
//! login directory); `up` has already told it to shut down over the control
//! plane, so this is the backstop for an agent that was not connected.
//! Listing returns the run's reservations, which is how a restarted `up`
//! adopts a create whose answer it lost.
//!
//! A reservation is also *claimed* for the user, beside every state dir:
//!
//! ```text
//! $XDG_STATE_HOME/drover/static-claims/<lease>.json   {"state_dir":..}
//! (else ~/.local/state/drover/static-claims)
//! ```
//!
//! so that a second run in another state dir cannot reserve a machine a run
//! still holds (its agent's pid file and its teardown would meet the first
//! run's): that create is refused, naming the state dir that holds it. A
//! claim whose state dir no longer holds the reservation (destroyed, or the
//! folder removed) is stale and is taken over. Claims cover one user on one
//! workstation; two workstations sharing machines are not coordinated.

mod claims;
pub mod hosts;
mod stop;

pub use claims::default_claims_dir;
pub use stop::pid_file;

use super::{BoxFuture, Provider, error};
use crate::ssh;
use core_fsm::ids::{LeaseId, LogicalNodeId, RunId};
use core_fsm::plan::{ProviderKind, RunPlan};
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError,
    ProviderErrorKind::{NotFound, Rejected, Transient},
    SshEndpoint,
};
use hosts::StaticHost;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use stop::{STOP_TIMEOUT, stop_agent};

/// A reservation as stored on disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Reservation {
    run_id: RunId,
    lease: LeaseFacts,
}

/// The static provider of one state dir and plan.
pub struct StaticProvider {
    state_dir: PathBuf,
    hosts: BTreeMap<LogicalNodeId, StaticHost>,
    /// The user's claims folder; `None` when neither `XDG_STATE_HOME` nor
    /// `HOME` is set (reservations are then kept per state dir only).
    claims: Option<PathBuf>,
}

/// The file name a lease is kept under (reservations and claims alike).
fn file_name(lease: &LeaseId) -> String {
    format!("{}.json", ssh::lease_file_stem(lease))
}

/// Where the state dir `state_dir` keeps its reservation of `lease`.
fn reservation_file(state_dir: &Path, lease: &LeaseId) -> PathBuf {
    crate::state_dir::StateDir::at(state_dir)
        .static_leases()
        .join(file_name(lease))
}

impl StaticProvider {
    /// A provider for the static groups of `plan`, keeping its reservations
    /// under `<state_dir>/static` and claiming them in the user's claims
    /// folder ([`default_claims_dir`]).
    pub fn new(state_dir: &Path, plan: &RunPlan) -> Result<StaticProvider, String> {
        StaticProvider::with_claims(state_dir, plan, default_claims_dir())
    }

    /// As [`StaticProvider::new`], with claims kept in `claims` (none: not
    /// claimed beyond the state dir).
    pub fn with_claims(
        state_dir: &Path,
        plan: &RunPlan,
        claims: Option<PathBuf>,
    ) -> Result<StaticProvider, String> {
        // Absolute, so that a claim names the state dir from anywhere.
        let state_dir = std::fs::canonicalize(state_dir)
            .or_else(|_| std::path::absolute(state_dir))
            .unwrap_or_else(|_| state_dir.to_owned());
        Ok(StaticProvider {
            state_dir,
            hosts: hosts::of_plan(plan)?,
            claims,
        })
    }

    fn dir(&self) -> PathBuf {
        crate::state_dir::StateDir::at(&self.state_dir).static_leases()
    }

    fn file(&self, lease: &LeaseId) -> PathBuf {
        reservation_file(&self.state_dir, lease)
    }

    fn read(&self, lease: &LeaseId) -> Result<Option<Reservation>, ProviderError> {
        let path = self.file(lease);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| error(Transient, format!("reservation {}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(error(
                Transient,
                format!("reservation {}: {e}", path.display()),
            )),
        }
    }

    fn create(&self, request: CreateLeaseRequest) -> Result<LeaseGranted, ProviderError> {
        let host = self.hosts.get(&request.node).ok_or_else(|| {
            error(
                Rejected,
                format!("the plan lists no static host for {}", request.node),
            )
        })?;
        let lease_id = host.lease_id();
        let mut metadata = BTreeMap::new();
        metadata.insert("node".to_owned(), request.node.to_string());
        metadata.insert("host".to_owned(), host.host.clone());
        metadata.insert("port".to_owned(), host.port.to_string());
        metadata.insert("user".to_owned(), host.user.clone());
        metadata.insert("key_file".to_owned(), host.key_file.clone());
        let lease = LeaseFacts {
            provider: ProviderKind::Static,
            lease_id,
            contract_id: "reservation".to_owned(),
            offer_id: None,
            host_id: Some(host.host.clone()),
            nonce: request.nonce,
            metadata,
        };
        // Reserving again (an intent whose answer was lost, then abandoned)
        // takes the reservation over with the new nonce: a state dir holds
        // one run, and each machine belongs to one node of it.
        let reservation = Reservation {
            run_id: request.run_id,
            lease: lease.clone(),
        };
        let transient = |e: std::io::Error| error(Transient, format!("reserving {host}: {e}"));
        std::fs::create_dir_all(self.dir()).map_err(transient)?;
        let bytes = serde_json::to_vec_pretty(&reservation).expect("a reservation serialises");
        let file = self.file(&lease.lease_id);
        let held_before = file.exists();
        super::local::write_atomic(&file, &bytes).map_err(transient)?;
        // Reserved first, claimed second: a claim whose state dir holds no
        // reservation is then surely stale, and of two runs racing for one
        // machine, the one that loses the claim sees the winner's
        // reservation and backs off (taking back only what it just wrote).
        if let Err(refused) = self.claim(host, &lease.lease_id) {
            if !held_before {
                let _ = std::fs::remove_file(&file);
            }
            return Err(refused);
        }
        Ok(LeaseGranted {
            endpoint: Some(endpoint_of(host)),
            lease: Arc::new(lease),
        })
    }

    fn lookup(&self, lease: &LeaseFacts) -> Result<EndpointStatus, ProviderError> {
        Ok(match self.read(&lease.lease_id)? {
            Some(held) => match host_of(&held.lease) {
                Some(host) => EndpointStatus::Ready(endpoint_of(&host)),
                None => EndpointStatus::Failed {
                    reason: "the reservation names no host".to_owned(),
                },
            },
            None => EndpointStatus::Gone,
        })
    }

    async fn destroy(&self, lease: Arc<LeaseFacts>) -> Result<(), ProviderError> {
        let Some(held) = self.read(&lease.lease_id)? else {
            return Err(error(
                NotFound,
                format!("{} is not reserved", lease.lease_id),
            ));
        };
        let host =
            host_of(&held.lease).ok_or_else(|| error(Rejected, "the reservation names no host"))?;
        let node = held.lease.metadata.get("node").cloned().unwrap_or_default();
        let stop = stop_agent(&self.state_dir, &held, &host, &node);
        match tokio::time::timeout(STOP_TIMEOUT, stop).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(error(
                    Transient,
                    format!("stopping the agent on {host} took over {STOP_TIMEOUT:?}"),
                ));
            }
        }
        match std::fs::remove_file(self.file(&lease.lease_id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(error(Transient, format!("releasing {host}: {e}"))),
        }
        self.release_claim(&lease.lease_id);
        Ok(())
    }

    fn list(&self, run_id: RunId) -> Result<Vec<LeaseFacts>, ProviderError> {
        let entries = match std::fs::read_dir(self.dir()) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(error(Transient, format!("listing reservations: {e}"))),
        };
        let mut leases = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            // A file that does not read is not a reservation this provider
            // wrote (writes are atomic).
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let Ok(held) = serde_json::from_slice::<Reservation>(&bytes) else {
                continue;
            };
            if held.run_id == run_id {
                leases.push(held.lease);
            }
        }
        leases.sort();
        Ok(leases)
    }
}

fn host_of(lease: &LeaseFacts) -> Option<StaticHost> {
    let get = |k: &str| lease.metadata.get(k).cloned();
    Some(StaticHost {
        host: get("host")?,
        port: get("port")?.parse().ok()?,
        user: get("user")?,
        key_file: get("key_file")?,
    })
}

fn endpoint_of(host: &StaticHost) -> SshEndpoint {
    SshEndpoint {
        host: host.host.as_str().into(),
        port: host.port,
        user: host.user.as_str().into(),
    }
}

impl Provider for StaticProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Static
    }

    fn create_lease(
        &self,
        request: CreateLeaseRequest,
    ) -> BoxFuture<'_, Result<LeaseGranted, ProviderError>> {
        Box::pin(async move { self.create(request) })
    }

    fn lookup_endpoint(
        &self,
        lease: Arc<LeaseFacts>,
    ) -> BoxFuture<'_, Result<EndpointStatus, ProviderError>> {
        Box::pin(async move { self.lookup(&lease) })
    }

    fn destroy_lease(&self, lease: Arc<LeaseFacts>) -> BoxFuture<'_, Result<(), ProviderError>> {
        Box::pin(self.destroy(lease))
    }

    fn list_leases(
        &self,
        run_id: RunId,
    ) -> BoxFuture<'_, Result<Vec<Arc<LeaseFacts>>, ProviderError>> {
        Box::pin(async move { Ok(self.list(run_id)?.into_iter().map(Arc::new).collect()) })
    }
}

#[cfg(test)]
mod tests {
    use super::claims::Claim;
    use super::*;
    use core_fsm::ids::{GroupId, Nonce};
    use core_fsm::plan::DesiredShape;

    fn plan() -> RunPlan {
        let mut plan = RunPlan::local(1);
        let group = &mut plan.groups[0];
        group.group_id = GroupId::from("hosts");
        group.provider = ProviderKind::Static;
        let host = StaticHost {
            host: "10.0.0.7".to_owned(),
            port: 22,
            user: "ops".to_owned(),
            key_file: "/keys/a".to_owned(),
        };
        hosts::to_labels(&mut group.shape.provider_labels, &[host]);
        plan
    }

    fn request(nonce: u64) -> CreateLeaseRequest {
        CreateLeaseRequest {
            run_id: RunId(1),
            node: LogicalNodeId::from("hosts-0"),
            nonce: Nonce(nonce),
            provider: ProviderKind::Static,
            shape: DesiredShape::default().into(),
            excluded_hosts: vec![],
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("drover-claims-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Two state dirs `a` and `b` under a scratch root, claiming in one
    /// claims folder: the root and a provider for each.
    fn two_runs(name: &str) -> (PathBuf, StaticProvider, StaticProvider) {
        let root = scratch(name);
        let claims = Some(root.join("claims"));
        let provider = |dir: &str| {
            let state = root.join(dir);
            std::fs::create_dir_all(&state).unwrap();
            StaticProvider::with_claims(&state, &plan(), claims.clone()).unwrap()
        };
        let (first, second) = (provider("a"), provider("b"));
        (root, first, second)
    }

    #[test]
    fn a_machine_reserved_by_a_run_in_one_state_dir_is_refused_to_another_until_released() {
        let (root, first, second) = two_runs("two");
        let granted = first.create(request(1)).expect("the first run reserves it");
        let err = second.create(request(2)).unwrap_err();
        assert_eq!(err.kind, Rejected, "{err:?}");
        assert!(
            err.message.contains("ops@10.0.0.7:22")
                && err.message.contains(&first.state_dir.display().to_string())
                && err.message.contains("down"),
            "{}",
            err.message
        );
        assert!(
            second.list(RunId(1)).unwrap().is_empty(),
            "nothing half-reserved"
        );
        // The same state dir reserving again (a lost answer retried) is fine.
        first.create(request(3)).expect("its own claim");
        // Released (what destroy does once the agent is stopped): the
        // other state dir may take it.
        std::fs::remove_file(first.file(&granted.lease.lease_id)).unwrap();
        first.release_claim(&granted.lease.lease_id);
        second.create(request(4)).expect("released, so free");
        assert_eq!(second.list(RunId(1)).unwrap().len(), 1);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_claim_whose_state_dir_no_longer_holds_the_machine_is_taken_over() {
        let (root, first, second) = two_runs("stale");
        first.create(request(1)).unwrap();
        // The first state dir is deleted by hand, its claim left behind.
        std::fs::remove_dir_all(&first.state_dir).unwrap();
        second
            .create(request(2))
            .expect("a stale claim is taken over");
        let claim: Claim = serde_json::from_slice(
            &std::fs::read(root.join("claims").join("static_10.0.0.7_22.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(claim.state_dir, second.state_dir);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
