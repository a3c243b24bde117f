//! The Docker provider: each lease is a detached container of drover's own
//! node image (built locally `FROM scratch` from this build's binaries, see
//! [`image`]; no registry), running `drover local-node` on port 22 inside,
//! published on 127.0.0.1 with a port the engine picks. The bootstrap then
//! runs over SSH exactly as for every other provider, and the agent inside
//! dials the control plane on the bridge's gateway.
//!
//! A stateless adapter over the Engine API (bollard, unix socket, version
//! negotiated):
//!
//! - create: the container's name is derived from the intent (state dir,
//!   run, node, nonce), so a second create of one intent is refused by the
//!   engine (409) and answered `Ambiguous`: the orchestrator resolves it by
//!   listing labels, never by creating again;
//! - labels, set at create time: the lease label, the run, and a hash of
//!   the state dir, so a list (adoption, `drover down`) only ever sees this
//!   state dir's containers and never another user's;
//! - lookup: a running container is `Ready` on its published port; an
//!   exited or killed one is `Failed`; a removed one is `Gone`; one that
//!   was created but never started (a crash between the two) is started;
//! - destroy: a forced remove (with its anonymous volumes); 404 is
//!   `NotFound`, which callers treat as done.

pub mod container;
pub mod engine;
pub mod image;
mod output;

use super::{BoxFuture, Provider, error};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions,
};
use container::Gpus;
use core_fsm::ids::{LeaseId, RunId};
use core_fsm::plan::{ProviderKind, RunPlan};
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError,
    ProviderErrorKind::{self, Ambiguous, NotFound, Transient},
    SshEndpoint,
};
use engine::Engine;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// The SSH user the node reports (it accepts any name with the right key).
pub const SSH_USER: &str = "drover";

/// The Docker provider of one state dir.
pub struct DockerProvider {
    engine: Engine,
    state_hash: String,
    /// The folder of `drover` and its sibling binaries (the image's input).
    bin_dir: PathBuf,
    /// The state dir's SSH public key, mounted into every container.
    public_key: PathBuf,
    /// The node image's tag, built (or found) on first create.
    image: OnceCell<String>,
}

/// A short hash of the state dir's absolute path: the label that keeps two
/// state dirs (two users, two runs with one run id) apart.
pub fn state_hash(state_dir: &Path) -> String {
    use sha2::Digest;
    let absolute = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_owned());
    let digest = sha2::Sha256::digest(absolute.as_os_str().as_encoded_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

impl DockerProvider {
    /// A provider for `state_dir` on `engine`, whose image holds the
    /// binaries next to `drover_binary` and whose nodes accept the key in
    /// `public_key`.
    pub fn new(
        engine: Engine,
        state_dir: &Path,
        drover_binary: &Path,
        public_key: &Path,
    ) -> DockerProvider {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
        let drover = absolute(drover_binary);
        DockerProvider {
            engine,
            state_hash: state_hash(state_dir),
            bin_dir: drover.parent().map(Path::to_owned).unwrap_or_default(),
            public_key: absolute(public_key),
            image: OnceCell::new(),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The state dir's label value.
    pub fn state_label(&self) -> &str {
        &self.state_hash
    }

    /// The node image's tag, built on first use.
    pub async fn image(&self) -> Result<&str, ProviderError> {
        let tag = self
            .image
            .get_or_try_init(|| image::ensure(&self.engine, &self.bin_dir))
            .await?;
        Ok(tag.as_str())
    }

    fn failed(
        &self,
        what: &str,
        e: &bollard::errors::Error,
        kind: ProviderErrorKind,
    ) -> ProviderError {
        self.engine.failed(what, e, kind)
    }

    async fn create(&self, request: CreateLeaseRequest) -> Result<LeaseGranted, ProviderError> {
        let image = self.image().await?.to_owned();
        let docker = self.engine.client().await?;
        let label = container::intent(request.run_id, &request.node, request.nonce);
        let name = container::name(&self.state_hash, &label);
        let gpus = Gpus::of_shape(&request.shape);
        let public_key = self.public_key.display().to_string();
        let body = container::body(
            &image,
            container::labels(&self.state_hash, &label),
            &public_key,
            gpus,
        );
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        let created = docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| {
                let what = match engine::status_of(&e) {
                    Some(409) => format!(
                        "creating container {name}: it exists already (this intent was \
                         created before; resolved by listing labels)"
                    ),
                    _ => format!("creating container {name}"),
                };
                // An answer that never came may have created it.
                let kind = match e {
                    bollard::errors::Error::RequestTimeoutError => Ambiguous,
                    _ => Transient,
                };
                self.failed(&what, &e, kind)
            })?;
        if let Err(e) = docker.start_container(&created.id, None).await {
            // Never started: removed again, so a retry of the intent may
            // take the name. A GPU request the engine cannot serve fails here.
            let _ = self.remove(&created.id).await;
            return Err(self.failed(&format!("starting container {name}"), &e, Transient));
        }
        let lease = self.facts(&created.id, &name, &label);
        let endpoint = match self.status(&created.id, &name).await? {
            EndpointStatus::Ready(endpoint) => Some(endpoint),
            _ => None,
        };
        Ok(LeaseGranted {
            lease: Arc::new(lease),
            endpoint,
        })
    }

    fn facts(&self, id: &str, name: &str, label: &core_fsm::ids::LeaseLabel) -> LeaseFacts {
        let mut metadata = BTreeMap::new();
        metadata.insert("name".to_owned(), name.to_owned());
        // Whose it is, from its label (a listed lease before the journal
        // knows it: adoption).
        metadata.insert("node".to_owned(), label.node.to_string());
        metadata.insert("socket".to_owned(), self.engine.socket().to_owned());
        LeaseFacts {
            provider: ProviderKind::Docker,
            lease_id: LeaseId::new(format!("docker:{name}")),
            contract_id: id.to_owned(),
            offer_id: None,
            host_id: Some("localhost".to_owned()),
            nonce: label.nonce,
            metadata,
        }
    }

    /// What the engine says of container `id` now.
    async fn status(&self, id: &str, name: &str) -> Result<EndpointStatus, ProviderError> {
        use bollard::models::ContainerStateStatusEnum as S;
        let docker = self.engine.client().await?;
        let inspected = match docker.inspect_container(id, None).await {
            Ok(inspected) => inspected,
            Err(e) if engine::status_of(&e) == Some(404) => return Ok(EndpointStatus::Gone),
            Err(e) => {
                return Err(self.failed(&format!("inspecting container {name}"), &e, Transient));
            }
        };
        let state = inspected.state.unwrap_or_default();
        match state.status {
            Some(S::RUNNING) => {}
            Some(S::CREATED) => {
                // Created but never started: the creator crashed between
                // the two calls. Starting it finishes that create.
                if let Err(e) = docker.start_container(id, None).await {
                    return Err(self.failed(&format!("starting container {name}"), &e, Transient));
                }
                return Ok(EndpointStatus::Pending {
                    detail: "container started".into(),
                });
            }
            Some(S::EXITED) | Some(S::DEAD) | Some(S::REMOVING) => {
                let code = state.exit_code.unwrap_or(-1);
                let killed = if state.oom_killed == Some(true) {
                    ", out of memory"
                } else {
                    ""
                };
                return Ok(EndpointStatus::Failed {
                    reason: format!("container {name} exited (code {code}{killed})"),
                });
            }
            other => {
                let words = other.map(|s| s.to_string()).unwrap_or_default();
                return Ok(EndpointStatus::Pending { detail: words });
            }
        }
        let port = inspected
            .network_settings
            .and_then(|n| n.ports)
            .and_then(|mut ports| ports.remove(container::SSH_PORT))
            .flatten()
            .and_then(|bindings| {
                bindings
                    .into_iter()
                    .find_map(|b| b.host_port.and_then(|p| p.parse::<u16>().ok()))
            });
        Ok(match port {
            Some(port) => EndpointStatus::Ready(SshEndpoint {
                host: "127.0.0.1".into(),
                port,
                user: SSH_USER.into(),
            }),
            None => EndpointStatus::Pending {
                detail: "port 22 not published yet".into(),
            },
        })
    }

    async fn remove(&self, id: &str) -> Result<(), bollard::errors::Error> {
        let docker = match self.engine.client().await {
            Ok(docker) => docker,
            Err(_) => return Ok(()),
        };
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        docker.remove_container(id, Some(options)).await
    }

    async fn destroy(&self, lease: Arc<LeaseFacts>) -> Result<(), ProviderError> {
        self.engine.client().await?;
        let name = lease.metadata.get("name").cloned().unwrap_or_default();
        match self.remove(&lease.contract_id).await {
            Ok(()) => Ok(()),
            Err(e) if engine::status_of(&e) == Some(404) => {
                Err(error(NotFound, format!("container {name} does not exist")))
            }
            Err(e) => Err(self.failed(&format!("removing container {name}"), &e, Transient)),
        }
    }

    /// The containers of this state dir (of `run_id`, or of every run),
    /// running or not: a stopped one is still a lease to destroy.
    pub async fn list(&self, run_id: Option<RunId>) -> Result<Vec<LeaseFacts>, ProviderError> {
        let docker = self.engine.client().await?;
        let options = ListContainersOptions {
            all: true,
            filters: Some(container::filters(&self.state_hash, run_id)),
            ..Default::default()
        };
        let listed = docker.list_containers(Some(options)).await.map_err(|e| {
            let what = "listing containers by label (nothing is taken for gone)";
            self.failed(what, &e, Transient)
        })?;
        let mut leases = Vec::new();
        for summary in listed {
            let labels = summary.labels.unwrap_or_default();
            let (Some(id), Some(label)) =
                (summary.id, container::lease_of(&self.state_hash, &labels))
            else {
                continue;
            };
            let name = container::name(&self.state_hash, &label);
            leases.push(self.facts(&id, &name, &label));
        }
        leases.sort();
        Ok(leases)
    }
}

impl Provider for DockerProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Docker
    }

    fn create_lease(
        &self,
        request: CreateLeaseRequest,
    ) -> BoxFuture<'_, Result<LeaseGranted, ProviderError>> {
        Box::pin(self.create(request))
    }

    fn lookup_endpoint(
        &self,
        lease: Arc<LeaseFacts>,
    ) -> BoxFuture<'_, Result<EndpointStatus, ProviderError>> {
        Box::pin(async move {
            let name = lease.metadata.get("name").cloned().unwrap_or_default();
            self.status(&lease.contract_id, &name).await
        })
    }

    fn destroy_lease(&self, lease: Arc<LeaseFacts>) -> BoxFuture<'_, Result<(), ProviderError>> {
        Box::pin(self.destroy(lease))
    }

    fn output(
        &self,
        lease: Arc<LeaseFacts>,
        from_start: bool,
    ) -> BoxFuture<'_, Option<crate::provider::Output>> {
        Box::pin(async move {
            let docker = self.engine.client().await.ok()?.clone();
            let since = (!from_start).then(output::now_unix);
            Some(output::follow(docker, lease.contract_id.clone(), since))
        })
    }

    fn list_leases(
        &self,
        run_id: RunId,
    ) -> BoxFuture<'_, Result<Vec<Arc<LeaseFacts>>, ProviderError>> {
        Box::pin(async move {
            Ok(self
                .list(Some(run_id))
                .await?
                .into_iter()
                .map(Arc::new)
                .collect())
        })
    }
}

/// Whether `plan` has a docker group.
pub fn in_plan(plan: &RunPlan) -> bool {
    plan.groups
        .iter()
        .any(|g| g.provider == ProviderKind::Docker)
}

/// Plan-time checks (`drover plan`, and `up` before anything is written):
/// the engine answers, and a group asking for GPUs has an engine that can
/// give them. A group's `gpus` is otherwise refused by the engine only when
/// its container starts, half-way through a run.
pub async fn check_plan(plan: &RunPlan, engine: &Engine) -> Result<(), String> {
    if !in_plan(plan) {
        return Ok(());
    }
    engine.client().await.map_err(|e| e.message)?;
    let gpu_groups: Vec<&str> = plan
        .groups
        .iter()
        .filter(|g| g.provider == ProviderKind::Docker && Gpus::of_shape(&g.shape).is_some())
        .map(|g| g.group_id.as_str())
        .collect();
    if gpu_groups.is_empty() {
        return Ok(());
    }
    match engine.nvidia_runtime().await.map_err(|e| e.message)? {
        Ok(()) => Ok(()),
        Err(reason) => Err(format!(
            "group(s) {} ask for gpus: {reason}",
            gpu_groups.join(", ")
        )),
    }
}
