//! Provider adapters: stateless answers to create, look up, destroy and list
//! leases. Every adapter (local, static, docker, vastai) implements
//! [`Provider`]; the effect sink turns its answers into inputs.
//! [`for_state_dir`] builds the ones a run's plan names.

pub mod docker;
pub mod local;
pub mod static_hosts;
pub mod vastai;

use core_fsm::ids::RunId;
use core_fsm::plan::{ProviderKind, RunPlan};
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError, ProviderErrorKind,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed, sendable future (keeps [`Provider`] usable as a trait object).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What every provider adapter answers.
pub trait Provider: Send + Sync {
    /// Which provider this is.
    fn kind(&self) -> ProviderKind;

    /// Creates a lease labelled with the request's run and nonce.
    fn create_lease(
        &self,
        request: CreateLeaseRequest,
    ) -> BoxFuture<'_, Result<LeaseGranted, ProviderError>>;

    /// Whether the lease is reachable over SSH yet.
    fn lookup_endpoint(
        &self,
        lease: Arc<LeaseFacts>,
    ) -> BoxFuture<'_, Result<EndpointStatus, ProviderError>>;

    /// Destroys the lease; destroying a lease that no longer exists answers
    /// `NotFound`, which callers treat as done.
    fn destroy_lease(&self, lease: Arc<LeaseFacts>) -> BoxFuture<'_, Result<(), ProviderError>>;

    /// Every live lease labelled with `run_id` (adoption after a restart).
    fn list_leases(
        &self,
        run_id: RunId,
    ) -> BoxFuture<'_, Result<Vec<Arc<LeaseFacts>>, ProviderError>>;

    /// What the provider itself prints for a lease (a Docker container's
    /// output), line by line: from the lease's start when `from_start`
    /// (a lease just created), else from now on (a lease adopted after a
    /// restart, whose earlier lines the datastream holds). `None`: this
    /// provider has nothing to follow.
    fn output(&self, _lease: Arc<LeaseFacts>, _from_start: bool) -> BoxFuture<'_, Option<Output>> {
        Box::pin(async { None })
    }

    /// The tail of what the provider kept of a lease's own output, fetched
    /// once, just before the lease is destroyed (Vast.ai's instance log,
    /// which cannot be followed); lines per stream, without their line
    /// ends, secrets already masked. `None`: this provider keeps nothing to
    /// fetch (or follows it with [`Provider::output`]).
    fn last_output(&self, _lease: Arc<LeaseFacts>) -> BoxFuture<'_, Option<LastOutput>> {
        Box::pin(async { None })
    }
}

/// What [`Provider::last_output`] fetched, or why it could not.
pub type LastOutput = Result<Vec<(core_fsm::port::LogStream, Vec<u8>)>, ProviderError>;

/// A lease's own output lines, per stream, without their line ends.
pub type Output = tokio::sync::mpsc::Receiver<(core_fsm::port::LogStream, Vec<u8>)>;

/// The providers of a run, by kind.
pub type Providers = BTreeMap<ProviderKind, Arc<dyn Provider>>;

/// Checks, before anything is written, that every provider `plan` names can
/// be built here: its settings read and, for vastai, an API key found; for
/// docker, the engine answers and can give the GPUs a group asks for.
pub async fn check_plan(plan: &RunPlan) -> Result<(), String> {
    if vastai::settings::from_plan(plan)?.is_some() {
        vastai::settings::api_key()?;
    }
    docker::check_plan(plan, &docker::engine::Engine::from_env()).await
}

/// The providers of the run in `state_dir`: local always, and those the
/// plan copy `up` left there (`plan.json`) names. `drover down` uses this,
/// so it reaches the same APIs `up` rented through ([`for_plan`], from the
/// plan it loaded).
pub fn for_state_dir(state_dir: &Path) -> Result<Providers, String> {
    for_plan(state_dir, plan_copy_in(state_dir)?.as_ref())
}

/// The provider of `kind` among `providers`; one this runtime lacks is a
/// `Rejected` error naming it.
pub fn of_kind(
    providers: &Providers,
    kind: ProviderKind,
) -> Result<Arc<dyn Provider>, ProviderError> {
    providers.get(&kind).cloned().ok_or_else(|| ProviderError {
        kind: ProviderErrorKind::Rejected,
        message: format!("provider {kind:?} is not available in this runtime"),
    })
}

/// The plan copy `up` left in `state_dir` (`plan.json`), if there is one.
pub fn plan_copy_in(state_dir: &Path) -> Result<Option<RunPlan>, String> {
    let path = crate::state_dir::StateDir::at(state_dir).plan();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<RunPlan>(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The providers for `plan` (local only without one) on `state_dir`.
pub fn for_plan(state_dir: &Path, plan: Option<&RunPlan>) -> Result<Providers, String> {
    let drover = std::env::current_exe().map_err(|e| format!("the drover binary: {e}"))?;
    let public_key = crate::ssh::identity::public_key_path(state_dir);
    let mut providers: Providers = BTreeMap::new();
    let local = local::LocalProvider::new(state_dir, &drover, &public_key);
    providers.insert(ProviderKind::Local, Arc::new(local));
    if let Some(plan) = plan.filter(|p| p.groups.iter().any(|g| g.provider == ProviderKind::Static))
    {
        let provider = static_hosts::StaticProvider::new(state_dir, plan)?;
        providers.insert(ProviderKind::Static, Arc::new(provider));
    }
    if plan.is_some_and(docker::in_plan) {
        let engine = docker::engine::Engine::from_env();
        let provider = docker::DockerProvider::new(engine, state_dir, &drover, &public_key);
        providers.insert(ProviderKind::Docker, Arc::new(provider));
    }
    if let Some(settings) = plan.map(vastai::settings::from_plan).transpose()?.flatten() {
        let key = vastai::settings::api_key()?;
        let public = std::fs::read_to_string(&public_key)
            .map_err(|e| format!("{}: {e}", public_key.display()))?;
        let provider = vastai::VastProvider::new(&settings, key, &public).map_err(|e| e.message)?;
        providers.insert(ProviderKind::Vastai, Arc::new(provider));
    }
    Ok(providers)
}

/// A provider error of `kind` with a message.
pub fn error(kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
    ProviderError {
        kind,
        message: message.into(),
    }
}
