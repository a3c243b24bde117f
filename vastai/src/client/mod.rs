//! The Vast.ai provider: an async API that mirrors drover's provider boundary
//! (`core_fsm::port`): [`VastClient::create_lease`],
//! [`VastClient::lookup_endpoint`], [`VastClient::destroy_lease`],
//! [`VastClient::list_leases`], plus [`VastClient::plan_offers`] for
//! `drover plan` and [`VastClient::find_lease`] to resolve an ambiguous create.
//!
//! The client is a stateless adapter as far as correctness goes: what it keeps
//! in memory (offers claimed by its own creates, recent creates not yet
//! visible) only avoids self-inflicted double rents and false "gone"s.

mod config;
mod http;
mod instance;
mod lease;
mod list;
mod logs;
mod offers;
mod status;

pub use config::{BASE_URL_ENV, BID_LABEL, ClientConfig, DEFAULT_BASE_URL, validate_public_key};
pub use http::{AuthStyle, ClientStats, RetryPolicy};
pub use lease::{create_body, onstart_script};
pub use offers::{ChosenOffers, Offer, choose, fits, rank, search_body, vast_gpu_name};
pub use status::{
    FailureReason, Observation, SshRoute, classify, is_oci_failure, is_pull_failure, pick_endpoint,
};

use crate::limits::Endpoint;
use core_fsm::plan::DesiredShape;
use core_fsm::port::{ProviderError, ProviderErrorKind};
use http::{Failure, Idempotency, Transport};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, Once};

/// The Vast.ai provider.
pub struct VastClient {
    config: ClientConfig,
    transport: Transport,
    memory: Mutex<Memory>,
}

/// What the client remembers between calls (see the module docs).
#[derive(Default)]
struct Memory {
    /// Offer id -> the contract this client created on it.
    claimed: BTreeMap<u64, Option<u64>>,
    /// Offers a create found gone.
    dead: BTreeSet<u64>,
    /// Contract id -> when this client created it.
    created: BTreeMap<u64, tokio::time::Instant>,
}

impl std::fmt::Debug for VastClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VastClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

static CRYPTO: Once = Once::new();

/// Installs rustls' ring provider for the process, once (reqwest is built
/// with `rustls-no-provider`). Harmless when someone else installed one.
pub fn install_crypto_provider() {
    CRYPTO.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

pub(crate) fn error(kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
    ProviderError {
        kind,
        message: message.into(),
    }
}

impl VastClient {
    /// A client; fails when the SSH public key is not a safe public key line
    /// or the HTTP client cannot be built.
    pub fn new(config: ClientConfig) -> Result<VastClient, ProviderError> {
        install_crypto_provider();
        validate_public_key(&config.ssh_public_key)
            .map_err(|m| error(ProviderErrorKind::Rejected, m))?;
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(config.request_timeout_ms))
            .connect_timeout(std::time::Duration::from_millis(config.connect_timeout_ms))
            .user_agent(concat!("drover-vastai/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                error(
                    ProviderErrorKind::Rejected,
                    format!("HTTP client: {}", e.without_url()),
                )
            })?;
        let transport = Transport::new(
            http,
            &config.base_url,
            config.api_key.clone(),
            config.auth_style,
            config.rate_limits.clone(),
            config.retry.clone(),
        );
        Ok(VastClient {
            config,
            transport,
            memory: Mutex::new(Memory::default()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Request counters.
    pub fn stats(&self) -> ClientStats {
        self.transport.stats()
    }

    fn bid_dollars(&self, shape: &DesiredShape) -> Option<f64> {
        shape
            .provider_labels
            .get(BID_LABEL)
            .and_then(|cents| cents.parse::<u32>().ok())
            .or(self.config.bid_cents_per_hour)
            .map(|cents| f64::from(cents) / 100.0)
    }

    /// Searches offers for `shape`, keeps those that really fit and are not
    /// on `excluded_hosts`, and ranks them (see [`rank`]).
    pub async fn search_offers(
        &self,
        shape: &DesiredShape,
        excluded_hosts: &[String],
    ) -> Result<Vec<Offer>, ProviderError> {
        let bid = self.bid_dollars(shape).is_some();
        let body = search_body(
            shape,
            self.config.search_limit,
            bid,
            self.config.require_direct_port,
        );
        let reply = self
            .transport
            .call(
                Endpoint::Search,
                reqwest::Method::POST,
                "/api/v0/bundles/",
                &[],
                Some(&body),
                Idempotency::Safe,
            )
            .await
            .map_err(|f| self.failure(f, "search offers"))?;
        if reply.status != 200 {
            return Err(self.refusal(reply.status, &reply.body, "search offers"));
        }
        let value: Value = serde_json::from_str(&reply.body).map_err(|e| {
            error(
                ProviderErrorKind::Transient,
                format!("search offers: unreadable answer: {e}"),
            )
        })?;
        let Some(list) = value.get("offers").and_then(Value::as_array) else {
            return Err(error(
                ProviderErrorKind::Transient,
                "search offers: answer has no offers list",
            ));
        };
        let mut offers: Vec<Offer> = list
            .iter()
            .filter_map(Offer::from_value)
            .filter(|o| fits(o, shape, excluded_hosts, self.config.require_direct_port))
            .collect();
        if let Some(bid) = self.bid_dollars(shape) {
            // An offer whose minimum bid is above ours would be created stopped (F14).
            offers.retain(|o| o.min_bid.is_none_or(|min| min <= bid));
        }
        rank(&mut offers, bid);
        Ok(offers)
    }

    /// The offers `count` creates of `shape` would use, with their cost and
    /// the worst case per hour (for `drover plan`; creates nothing).
    pub async fn plan_offers(
        &self,
        shape: &DesiredShape,
        count: u32,
    ) -> Result<ChosenOffers, ProviderError> {
        let ranked = self.search_offers(shape, &[]).await?;
        Ok(choose(
            &ranked,
            count,
            self.bid_dollars(shape),
            shape.max_price_cents_per_hour,
        ))
    }

    /// A provider error from a transport failure.
    fn failure(&self, failure: Failure, what: &str) -> ProviderError {
        match failure {
            Failure::Exhausted(m) => error(ProviderErrorKind::Transient, format!("{what}: {m}")),
            Failure::Lost(m) => error(
                ProviderErrorKind::Ambiguous,
                format!("{what}: answer lost: {m}"),
            ),
        }
    }

    /// A provider error from an unexpected status.
    fn refusal(&self, status: u16, body: &str, what: &str) -> ProviderError {
        let parsed = crate::wire::ErrorBody::parse(body);
        let message = self
            .transport
            .redact(&format!("{what}: HTTP {status}: {}", parsed.summary()));
        if parsed.is_auth_error() || status == 401 || status == 403 {
            return error(
                ProviderErrorKind::Rejected,
                format!("{message} (the API key is wrong or revoked)"),
            );
        }
        let kind = if status == 429 || status >= 500 {
            ProviderErrorKind::Transient
        } else {
            ProviderErrorKind::Rejected
        };
        error(kind, message)
    }
}
