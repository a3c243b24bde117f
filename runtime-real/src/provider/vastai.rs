//! The Vast.ai provider: the runtime's [`Provider`] over
//! [`vastai::VastClient`] (search, rank, create, observe, destroy, list;
//! `spec/vastai.md`). A thin adapter: the client already answers in the
//! port's terms (an ambiguous create is `Ambiguous`, so the orchestrator
//! resolves it by listing labels, never by creating again; a failed list is
//! an error, never an empty fleet). What this layer adds:
//!
//! - every lease carries the API it was rented through (`metadata.api`), and
//!   a lookup or destroy through another API is refused instead of reading
//!   "gone" from a server that never knew the lease (a `drover down` pointed
//!   at the wrong URL must fail, not mark live instances released);
//! - every error message passes the key's redaction once more, and a failed
//!   list says plainly that nothing was taken for gone.
//!
//! Labels are the client's `drover:run-<run>:<node>:nonce-<nonce>`
//! ([`vastai::label::LeaseLabel`]); `list_leases` keeps only instances whose
//! label parses and names the run.

pub mod logs;
pub mod plan;
pub mod settings;

use super::{BoxFuture, LastOutput, Provider, error};
use core_fsm::ids::RunId;
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError, ProviderErrorKind,
};
pub use settings::Settings;
use std::sync::Arc;
use vastai::limits::RateLimits;
use vastai::{ApiKey, ClientConfig, VastClient};

/// The lease metadata key naming the API a lease was rented through.
pub const API_METADATA: &str = "api";

/// The Vast.ai provider of one run.
pub struct VastProvider {
    client: VastClient,
    key: ApiKey,
    base_url: String,
}

impl std::fmt::Debug for VastProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VastProvider")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// The client configuration for `settings`; drover's SSH public key goes to
/// instances through `onstart` (never an account key, never the API key).
pub fn client_config(settings: &Settings, key: ApiKey, ssh_public_key: &str) -> ClientConfig {
    let mut config = ClientConfig::new(key, ssh_public_key.trim());
    config.base_url = settings.base_url.clone();
    config.rate_limits = RateLimits::documented(settings.rate_unit_ms);
    config
}

impl VastProvider {
    /// A provider for `settings`, authenticating with `key`, injecting
    /// `ssh_public_key` into every instance.
    pub fn new(
        settings: &Settings,
        key: ApiKey,
        ssh_public_key: &str,
    ) -> Result<VastProvider, ProviderError> {
        let client = VastClient::new(client_config(settings, key.clone(), ssh_public_key))?;
        Ok(VastProvider {
            client,
            key,
            base_url: settings.base_url.clone(),
        })
    }

    /// The client underneath.
    pub fn client(&self) -> &VastClient {
        &self.client
    }

    /// The error with the key redacted (once more) and context added.
    fn clean(&self, e: ProviderError, context: &str) -> ProviderError {
        error(
            e.kind,
            self.key.redact(&format!("vastai: {context}{}", e.message)),
        )
    }

    /// Marks a lease with the API it lives on.
    fn stamp(&self, mut lease: LeaseFacts) -> LeaseFacts {
        lease
            .metadata
            .insert(API_METADATA.to_owned(), self.base_url.clone());
        lease
    }

    /// Refuses a lease rented through another API (see the module docs).
    fn check_origin(&self, lease: &LeaseFacts) -> Result<(), ProviderError> {
        match lease.metadata.get(API_METADATA) {
            Some(api) if api.trim_end_matches('/') != self.base_url => Err(error(
                ProviderErrorKind::Rejected,
                format!(
                    "vastai: lease {} was rented through {api}, but this drover talks to {}; \
                     set the plan's vastai.base_url (or VAST_URL) to {api}",
                    lease.lease_id, self.base_url
                ),
            )),
            _ => Ok(()),
        }
    }

    async fn create(&self, request: CreateLeaseRequest) -> Result<LeaseGranted, ProviderError> {
        let mut granted = self
            .client
            .create_lease(&request)
            .await
            .map_err(|e| self.clean(e, ""))?;
        granted.lease = Arc::new(self.stamp(Arc::unwrap_or_clone(granted.lease)));
        Ok(granted)
    }

    async fn lookup(&self, lease: Arc<LeaseFacts>) -> Result<EndpointStatus, ProviderError> {
        self.check_origin(&lease)?;
        self.client
            .lookup_endpoint(&lease)
            .await
            .map_err(|e| self.clean(e, ""))
    }

    async fn destroy(&self, lease: Arc<LeaseFacts>) -> Result<(), ProviderError> {
        self.check_origin(&lease)?;
        self.client
            .destroy_lease(&lease)
            .await
            .map_err(|e| self.clean(e, ""))
    }

    /// The tail of the instance's log (`request_logs`, then its result URL
    /// polled), as stdout lines with the key and tokens masked.
    async fn last_lines(&self, lease: Arc<LeaseFacts>) -> LastOutput {
        self.check_origin(&lease)?;
        let text = self
            .client
            .instance_logs(&lease, logs::TAIL_LINES)
            .await
            .map_err(|e| self.clean(e, ""))?;
        Ok(logs::lines(&text, &self.key))
    }

    async fn list(&self, run_id: RunId) -> Result<Vec<Arc<LeaseFacts>>, ProviderError> {
        let leases = self.client.list_leases(run_id).await.map_err(|e| {
            let context = format!(
                "listing the instances of {run_id} at {} failed (nothing is taken for gone): ",
                self.base_url
            );
            self.clean(e, &context)
        })?;
        Ok(leases
            .into_iter()
            .map(|l| Arc::new(self.stamp(l)))
            .collect())
    }
}

impl Provider for VastProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Vastai
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
        Box::pin(self.lookup(lease))
    }

    fn destroy_lease(&self, lease: Arc<LeaseFacts>) -> BoxFuture<'_, Result<(), ProviderError>> {
        Box::pin(self.destroy(lease))
    }

    fn list_leases(
        &self,
        run_id: RunId,
    ) -> BoxFuture<'_, Result<Vec<Arc<LeaseFacts>>, ProviderError>> {
        Box::pin(self.list(run_id))
    }

    fn last_output(&self, lease: Arc<LeaseFacts>) -> BoxFuture<'_, Option<LastOutput>> {
        Box::pin(async move { Some(self.last_lines(lease).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_fsm::ids::{LeaseId, Nonce};
    use std::collections::BTreeMap;

    const PUBLIC: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDroverUnitTestKey drover@test";

    fn provider() -> VastProvider {
        let settings = Settings {
            base_url: "http://127.0.0.1:9".into(),
            rate_unit_ms: 0,
        };
        VastProvider::new(&settings, ApiKey::new("vk-unit-secret"), PUBLIC).unwrap()
    }

    fn lease(api: Option<&str>) -> LeaseFacts {
        let mut metadata = BTreeMap::new();
        if let Some(api) = api {
            metadata.insert(API_METADATA.to_owned(), api.to_owned());
        }
        LeaseFacts {
            provider: ProviderKind::Vastai,
            lease_id: LeaseId("vastai:42".into()),
            contract_id: "42".into(),
            offer_id: None,
            host_id: None,
            nonce: Nonce(1),
            metadata,
        }
    }

    #[tokio::test]
    async fn a_lease_of_another_api_is_refused_not_read_as_gone() {
        let p = provider();
        let foreign = Arc::new(lease(Some("https://console.vast.ai")));
        for result in [
            p.destroy_lease(foreign.clone()).await.map(|_| ()),
            p.lookup_endpoint(foreign).await.map(|_| ()),
        ] {
            let err = result.unwrap_err();
            assert_eq!(err.kind, ProviderErrorKind::Rejected, "{err:?}");
            assert!(err.message.contains("https://console.vast.ai"), "{err:?}");
        }
        assert!(p.check_origin(&lease(Some("http://127.0.0.1:9/"))).is_ok());
        assert!(p.check_origin(&lease(None)).is_ok());
        assert_eq!(
            p.stamp(lease(None)).metadata[API_METADATA],
            "http://127.0.0.1:9"
        );
    }

    #[test]
    fn errors_lose_the_key_and_debug_shows_none() {
        let p = provider();
        let e = p.clean(
            error(ProviderErrorKind::Transient, "echo vk-unit-secret back"),
            "",
        );
        assert_eq!(e.message, "vastai: echo *** back");
        assert!(!format!("{p:?}").contains("vk-unit-secret"));
    }
}
