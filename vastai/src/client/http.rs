//! The HTTP layer: per-endpoint pacing, bounded retries with seeded backoff,
//! and the rule that a create is never re-sent once it may have taken effect.
//!
//! Every message that leaves this module has been through
//! [`ApiKey::redact`], and reqwest errors lose their URL first, so a key sent
//! in the legacy `?api_key=` style cannot leak through an error.

use crate::limits::{Endpoint, RateLimits};
use crate::secret::ApiKey;
use core_fsm::rng::DetRng;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::{Duration, Instant};

/// How the API key travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthStyle {
    /// `Authorization: Bearer <key>` (preferred, §A.1).
    Bearer,
    /// `?api_key=<key>` (legacy, still accepted).
    QueryParam,
}

/// Bounded retries with deterministic, seeded backoff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts per call, the first included (at least 1).
    pub attempts_max: u32,
    /// Delay after the first failed attempt.
    pub backoff_base_ms: u64,
    /// Delay ceiling.
    pub backoff_max_ms: u64,
    /// Seed of the jitter; no OS randomness is needed.
    pub seed: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // The official client makes 3 attempts 0.15 s x1.5 apart; drover makes
        // more, slower ones, because it runs unattended for hours.
        RetryPolicy {
            attempts_max: 6,
            backoff_base_ms: 500,
            backoff_max_ms: 15_000,
            seed: 0x5EED_7A57,
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempt + 1` (1-based `attempt`): base x1.5
    /// per attempt, capped, plus up to half again of seeded jitter.
    pub fn delay_ms(&self, attempt: u32, rng: &mut DetRng) -> u64 {
        let mut delay = self.backoff_base_ms;
        for _ in 1..attempt {
            delay = (delay.saturating_mul(3) / 2).min(self.backoff_max_ms);
        }
        let delay = delay.min(self.backoff_max_ms);
        delay + rng.below(delay / 2 + 1)
    }
}

/// Whether a request may be sent twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// Reads and destroys: re-sending is harmless.
    Safe,
    /// A create: re-sent only when it certainly did not reach the server
    /// (429 from the rate limiter, connection never made).
    CreateOnce,
}

/// An HTTP answer.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub body: String,
}

/// Why a call produced no usable answer.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// Nothing took effect; the retry bound was reached.
    Exhausted(String),
    /// A create was sent and its answer lost (timeout, reset, 5xx).
    Lost(String),
}

/// Counters, for tests and people.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent.
    pub requests: u64,
    /// Answers with status 429.
    pub rate_limited: u64,
    /// Answers with a 5xx status.
    pub server_errors: u64,
    /// Requests that got no answer (timeout, reset, refused).
    pub transport_errors: u64,
    /// Attempts made after a first failed one.
    pub retries: u64,
}

pub(crate) struct Transport {
    http: reqwest::Client,
    base_url: String,
    key: ApiKey,
    auth: AuthStyle,
    limits: RateLimits,
    retry: RetryPolicy,
    slots: Mutex<BTreeMap<Endpoint, Instant>>,
    rng: Mutex<DetRng>,
    requests: AtomicU64,
    rate_limited: AtomicU64,
    server_errors: AtomicU64,
    transport_errors: AtomicU64,
    retries: AtomicU64,
}

/// What one attempt produced.
enum Attempt {
    Answer(Reply),
    NotSent(String),
    NoAnswer(String),
}

impl Transport {
    pub(crate) fn new(
        http: reqwest::Client,
        base_url: &str,
        key: ApiKey,
        auth: AuthStyle,
        limits: RateLimits,
        retry: RetryPolicy,
    ) -> Transport {
        assert!(
            retry.attempts_max >= 1,
            "retry.attempts_max must be at least 1"
        );
        let rng = DetRng::new(retry.seed);
        Transport {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            key,
            auth,
            limits,
            retry,
            slots: Mutex::new(BTreeMap::new()),
            rng: Mutex::new(rng),
            requests: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
            transport_errors: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        }
    }

    pub(crate) fn redact(&self, text: &str) -> String {
        self.key.redact(text)
    }

    pub(crate) fn stats(&self) -> ClientStats {
        ClientStats {
            requests: self.requests.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            server_errors: self.server_errors.load(Ordering::Relaxed),
            transport_errors: self.transport_errors.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }

    /// Sends a request, pacing and retrying within the policy. Statuses other
    /// than 429 and 5xx are returned for the caller to interpret.
    pub(crate) async fn call(
        &self,
        endpoint: Endpoint,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        idempotency: Idempotency,
    ) -> Result<Reply, Failure> {
        let what = format!("{method} {path}");
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts_max {
            if attempt > 1 {
                self.retries.fetch_add(1, Ordering::Relaxed);
            }
            self.pace(endpoint).await;
            let outcome = self.send_once(method.clone(), path, query, body).await;
            match outcome {
                Attempt::Answer(reply) if reply.status == 429 => {
                    self.rate_limited.fetch_add(1, Ordering::Relaxed);
                    last = format!(
                        "429 {}",
                        crate::wire::ErrorBody::parse(&reply.body).summary()
                    );
                }
                Attempt::Answer(reply) if reply.status >= 500 => {
                    self.server_errors.fetch_add(1, Ordering::Relaxed);
                    last = format!(
                        "{} {}",
                        reply.status,
                        crate::wire::ErrorBody::parse(&reply.body).summary()
                    );
                    if idempotency == Idempotency::CreateOnce {
                        return Err(Failure::Lost(self.redact(&format!("{what}: {last}"))));
                    }
                }
                Attempt::Answer(reply) => return Ok(reply),
                Attempt::NotSent(message) => last = message,
                Attempt::NoAnswer(message) => {
                    if idempotency == Idempotency::CreateOnce {
                        return Err(Failure::Lost(self.redact(&format!("{what}: {message}"))));
                    }
                    last = message;
                }
            }
            if attempt < self.retry.attempts_max {
                let delay = {
                    let mut rng = self.rng.lock().expect("rng lock");
                    self.retry.delay_ms(attempt, &mut rng)
                };
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
        }
        Err(Failure::Exhausted(self.redact(&format!(
            "{what} failed after {} attempts; last: {last}",
            self.retry.attempts_max
        ))))
    }

    /// Waits for this endpoint's next slot: requests to one endpoint are at
    /// least its minimum interval apart, in the order they asked.
    async fn pace(&self, endpoint: Endpoint) {
        let interval = Duration::from_millis(self.limits.interval_ms(endpoint));
        if interval.is_zero() {
            return;
        }
        let wait = {
            let mut slots = self.slots.lock().expect("slots lock");
            let now = Instant::now();
            let slot = slots.get(&endpoint).copied().unwrap_or(now).max(now);
            slots.insert(endpoint, slot + interval);
            slot - now
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    async fn send_once(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Attempt {
        let url = match self.url(path, query) {
            Ok(url) => url,
            Err(message) => return Attempt::NotSent(message),
        };
        let mut request = self.http.request(method, url);
        if self.auth == AuthStyle::Bearer && !self.key.expose().is_empty() {
            request = request.bearer_auth(self.key.expose());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                self.transport_errors.fetch_add(1, Ordering::Relaxed);
                let message = self.describe(error);
                return if message.1 {
                    Attempt::NotSent(message.0)
                } else {
                    Attempt::NoAnswer(message.0)
                };
            }
        };
        let status = response.status().as_u16();
        match response.text().await {
            Ok(body) => Attempt::Answer(Reply { status, body }),
            Err(error) => {
                self.transport_errors.fetch_add(1, Ordering::Relaxed);
                Attempt::NoAnswer(format!(
                    "status {status}, body lost: {}",
                    self.describe(error).0
                ))
            }
        }
    }

    /// One GET of an absolute URL the API handed out (an instance log's
    /// `result_url`, on S3 in real life): no key travels with it (it is not
    /// the API's host), and a failure names neither the URL nor the key.
    pub(crate) async fn get_absolute(&self, url: &str) -> Result<Reply, String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("not an http(s) URL: {}", url.scheme()));
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let response = match self.http.get(url).send().await {
            Ok(response) => response,
            Err(error) => {
                self.transport_errors.fetch_add(1, Ordering::Relaxed);
                return Err(self.describe(error).0);
            }
        };
        let status = response.status().as_u16();
        match response.text().await {
            Ok(body) => Ok(Reply { status, body }),
            Err(error) => {
                self.transport_errors.fetch_add(1, Ordering::Relaxed);
                Err(format!(
                    "status {status}, body lost: {}",
                    self.describe(error).0
                ))
            }
        }
    }

    fn url(&self, path: &str, query: &[(&str, String)]) -> Result<reqwest::Url, String> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base_url))
            .map_err(|e| self.redact(&format!("bad URL {}{path}: {e}", self.base_url)))?;
        {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in query {
                pairs.append_pair(key, value);
            }
            if self.auth == AuthStyle::QueryParam && !self.key.expose().is_empty() {
                pairs.append_pair("api_key", self.key.expose());
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        Ok(url)
    }

    /// A redacted description of a reqwest error, and whether the request
    /// certainly never reached the server (the connection was never made).
    fn describe(&self, error: reqwest::Error) -> (String, bool) {
        let not_sent = error.is_connect();
        let timeout = error.is_timeout();
        let error = error.without_url();
        let mut text = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        if timeout && !text.contains("timed out") {
            text.push_str(" (timed out)");
        }
        (self.redact(&text), not_sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_deterministic() {
        let policy = RetryPolicy {
            attempts_max: 8,
            backoff_base_ms: 100,
            backoff_max_ms: 400,
            seed: 1,
        };
        let draw = |seed| {
            let mut rng = DetRng::new(seed);
            (1..8)
                .map(|a| policy.delay_ms(a, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        for (attempt, delay) in (1..8).zip(draw(1)) {
            let floor = (100u64 * 3u64.pow(attempt - 1) / 2u64.pow(attempt - 1)).min(400);
            assert!(
                delay >= floor.min(400) * 9 / 10 && delay <= 600,
                "{attempt}: {delay}"
            );
        }
    }
}
