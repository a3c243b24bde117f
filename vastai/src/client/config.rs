//! The client's configuration: everything tunable, with production defaults
//! and millisecond intervals that tests shrink.

use super::http::{AuthStyle, RetryPolicy};
use super::status::SshRoute;
use crate::limits::RateLimits;
use crate::secret::ApiKey;
use core_fsm::port::{ProviderError, ProviderErrorKind};
use std::collections::BTreeMap;

/// The default API base URL (§A.1).
pub const DEFAULT_BASE_URL: &str = "https://console.vast.ai";

/// The environment variable that overrides the base URL (§A.1).
pub const BASE_URL_ENV: &str = "VAST_URL";

/// The provider label that makes a group's creates interruptible bids at
/// this many whole cents per hour (overrides the configured bid).
pub const BID_LABEL: &str = "vastai.bid_cents_per_hour";

/// The client's configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Where the API is; `https://console.vast.ai` or a fake's `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The account key; `Debug` prints `***`.
    pub api_key: ApiKey,
    /// Bearer header (default) or legacy query parameter.
    pub auth_style: AuthStyle,
    /// drover's SSH public key, injected into every instance through `onstart`.
    pub ssh_public_key: String,
    /// The SSH user of Vast.ai instances.
    pub ssh_user: String,
    /// Whole-request timeout; a create that times out is ambiguous.
    pub request_timeout_ms: u64,
    /// TCP connect timeout (a connect failure is never ambiguous).
    pub connect_timeout_ms: u64,
    /// Minimum interval per endpoint (the documented thresholds by default).
    pub rate_limits: RateLimits,
    /// Bounded retries of 429, 5xx and lost answers (creates excepted).
    pub retry: RetryPolicy,
    /// After a create, `{"instances": null}` means "not visible yet" (F4)
    /// for this long, and "gone" after.
    pub visibility_grace_ms: u64,
    /// Reads [`super::VastClient::find_lease`] makes before saying "not there".
    pub visibility_reads: u32,
    /// Interval between those reads.
    pub visibility_read_interval_ms: u64,
    /// Offers asked for per search.
    pub search_limit: u32,
    /// Offers one create tries when offers turn out gone (F2).
    pub offer_attempts_max: u32,
    /// Which SSH endpoint to use when both are published.
    pub ssh_route: SshRoute,
    /// The `runtype` sent on create; the CLI's legacy spelling by default.
    pub runtype: String,
    /// Rent interruptible (bid) instances at this price instead of on-demand.
    pub bid_cents_per_hour: Option<u32>,
    /// Only offers with a directly mappable port.
    pub require_direct_port: bool,
    /// Pages (of 25) one list may walk before it fails.
    pub list_pages_max: u32,
    /// Extra environment for every instance (never a secret).
    pub extra_env: BTreeMap<String, String>,
    /// Fetches of an instance log's result URL before giving up (it answers
    /// non-200 until the log is uploaded, §A.9).
    pub log_polls_max: u32,
    /// Interval between those fetches.
    pub log_poll_interval_ms: u64,
}

impl ClientConfig {
    /// Production defaults for `api_key` and drover's SSH public key.
    pub fn new(api_key: ApiKey, ssh_public_key: impl Into<String>) -> ClientConfig {
        ClientConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key,
            auth_style: AuthStyle::Bearer,
            ssh_public_key: ssh_public_key.into(),
            ssh_user: "root".to_owned(),
            request_timeout_ms: 60_000,
            connect_timeout_ms: 10_000,
            rate_limits: RateLimits::default(),
            retry: RetryPolicy::default(),
            visibility_grace_ms: 60_000,
            visibility_reads: 3,
            visibility_read_interval_ms: 2_000,
            search_limit: 64,
            offer_attempts_max: 3,
            ssh_route: SshRoute::PreferDirect,
            runtype: "ssh_direc ssh_proxy".to_owned(),
            bid_cents_per_hour: None,
            require_direct_port: true,
            list_pages_max: 400,
            extra_env: BTreeMap::new(),
            // The official client: 30 x 0.3 s; drover fetches logs on the
            // way to a destroy and wants them sooner or not at all.
            log_polls_max: 10,
            log_poll_interval_ms: 300,
        }
    }

    /// Defaults with the key from `VAST_API_KEY` and the base URL from
    /// `VAST_URL` when set.
    pub fn from_env(ssh_public_key: impl Into<String>) -> Result<ClientConfig, ProviderError> {
        let key = ApiKey::from_env().ok_or_else(|| ProviderError {
            kind: ProviderErrorKind::Rejected,
            message: "VAST_API_KEY is not set".to_owned(),
        })?;
        let mut config = ClientConfig::new(key, ssh_public_key);
        if let Ok(url) = std::env::var(BASE_URL_ENV)
            && !url.trim().is_empty()
        {
            config.base_url = url.trim().to_owned();
        }
        Ok(config)
    }
}

/// Checks that `key` is one line of an OpenSSH public key that is safe inside
/// single quotes in a shell script.
pub fn validate_public_key(key: &str) -> Result<(), String> {
    let key = key.trim();
    let known = [
        "ssh-ed25519 ",
        "ssh-rsa ",
        "ecdsa-sha2-",
        "sk-ssh-ed25519",
        "sk-ecdsa-",
    ];
    if !known.iter().any(|prefix| key.starts_with(prefix)) {
        return Err("the SSH public key must be one OpenSSH public key line".to_owned());
    }
    if key.contains("PRIVATE") {
        return Err("refusing to send what looks like a private key".to_owned());
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || " +/=@._-:".contains(c);
    if key.len() > 4096 || !key.chars().all(safe) {
        return Err("the SSH public key has characters that are not allowed".to_owned());
    }
    Ok(())
}
