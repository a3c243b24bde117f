//! A fake Vast.ai server that speaks the real API (§A.3-A.8 of
//! `shared/reference/vastai-api.md`): the same paths, request and response
//! JSON, bearer or `?api_key=` auth (a wrong key answers 404 `auth_error`),
//! the documented per-endpoint rate limits with their four 429 body shapes,
//! and every scenario F1-F21 of §A.12 (see [`scenario`]).
//!
//! Time: instance lifecycles follow the fake's clock, real (for
//! `drover fake-vast`) or manual (tests advance it, so no test waits for a
//! lifecycle). Rate limits always use real time.

mod backend;
mod catalog;
mod control;
mod create;
mod cut;
mod listing;
mod logs;
mod query;
mod routes;
pub mod scenario;
mod search;
mod state;

pub use backend::{
    BackendFuture, InstanceBackend, MachineAddr, MachineSpec, MemoryBackend, MemoryLog,
    keys_in_onstart,
};
pub use catalog::{OfferSpec, default_catalog};
pub use scenario::{Rule, Scenario, When};
pub use state::EPOCH_BASE_S;

use crate::limits::{Endpoint, RateLimits};
use core_fsm::rng::DetRng;
use serde::{Deserialize, Serialize};
use state::FakeInstance;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long each lifecycle step takes, in fake-clock milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// `actual_status` is `null` for this long after the create.
    pub creating_ms: u64,
    /// Then `created` for this long.
    pub created_ms: u64,
    /// Then `loading` for this long.
    pub loading_ms: u64,
    /// SSH fields appear this long after `running`.
    pub ssh_after_running_ms: u64,
}

impl Timings {
    /// The measured public run (§A.12): running after ~73 s, SSH 12 s later.
    pub fn realistic() -> Timings {
        Timings {
            creating_ms: 2_000,
            created_ms: 3_000,
            loading_ms: 68_000,
            ssh_after_running_ms: 12_000,
        }
    }

    /// Everything at once.
    pub fn instant() -> Timings {
        Timings {
            creating_ms: 0,
            created_ms: 0,
            loading_ms: 0,
            ssh_after_running_ms: 0,
        }
    }
}

/// Which clock drives lifecycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockMode {
    /// Milliseconds since the server started.
    Real,
    /// Starts at 0 and moves only by [`FakeServer::advance`] or `POST /_fake/clock`.
    Manual,
}

/// The fake's configuration.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// The one valid API key (compared exactly; `Debug` prints `***`).
    pub api_key: crate::ApiKey,
    /// Seed of every random choice (429 body shapes, rates, 5xx codes).
    pub seed: u64,
    /// Lifecycle clock.
    pub clock: ClockMode,
    /// Lifecycle timings.
    pub timings: Timings,
    /// Per-endpoint minimum intervals (real time).
    pub rate_limits: RateLimits,
    /// The offer catalog.
    pub offers: Vec<OfferSpec>,
    /// Scenario switches in force from the start.
    pub rules: Vec<Rule>,
    /// F20 toggle: account keys added later also reach existing instances
    /// (the OpenAPI text); off by default (the SSH guide, and practice).
    pub account_keys_reach_existing: bool,
    /// How long a lost create (F5) keeps its connection before answering.
    pub create_hang_ms: u64,
    /// Contract length of a new instance.
    pub contract_ms: u64,
    /// Search needs a key (it historically did not).
    pub search_requires_key: bool,
    /// Fetches of a log's `result_url` that answer 404 before the log is
    /// there (the upload takes a moment, §A.9).
    pub log_upload_polls: u32,
}

impl FakeConfig {
    /// For tests: manual clock, short lifecycle steps, no rate limits.
    pub fn for_tests(api_key: &str) -> FakeConfig {
        FakeConfig {
            api_key: crate::ApiKey::new(api_key),
            seed: 7,
            clock: ClockMode::Manual,
            timings: Timings {
                creating_ms: 1_000,
                created_ms: 1_000,
                loading_ms: 3_000,
                ssh_after_running_ms: 0,
            },
            rate_limits: RateLimits::none(),
            offers: default_catalog(),
            rules: Vec::new(),
            account_keys_reach_existing: false,
            create_hang_ms: 30_000,
            contract_ms: 60 * 24 * 3_600_000,
            search_requires_key: false,
            log_upload_polls: 1,
        }
    }

    /// For local end-to-end runs: real clock, instant lifecycles, no limits.
    pub fn fast(api_key: &str) -> FakeConfig {
        FakeConfig {
            clock: ClockMode::Real,
            timings: Timings::instant(),
            ..FakeConfig::for_tests(api_key)
        }
    }

    /// Like Vast.ai: real clock, measured timings, documented rate limits
    /// (thresholds read as seconds).
    pub fn realistic(api_key: &str) -> FakeConfig {
        FakeConfig {
            clock: ClockMode::Real,
            timings: Timings::realistic(),
            rate_limits: RateLimits::documented(1000),
            ..FakeConfig::for_tests(api_key)
        }
    }
}

/// An account SSH key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountKey {
    /// Key id.
    pub id: u64,
    /// The public key.
    pub public_key: String,
}

/// The mutable state behind one lock (never held across an await).
pub(crate) struct Inner {
    pub rng: DetRng,
    pub instances: BTreeMap<u64, FakeInstance>,
    pub next_contract: u64,
    pub rules: Vec<Rule>,
    pub account_keys: Vec<AccountKey>,
    pub next_key_id: u64,
    pub slots: BTreeMap<(Endpoint, String), tokio::time::Instant>,
    pub requests: BTreeMap<Endpoint, u64>,
    /// Requested instance logs by file name (see `logs.rs`).
    pub uploads: BTreeMap<String, logs::Upload>,
    pub next_upload: u64,
}

pub(crate) struct Shared {
    pub config: FakeConfig,
    /// Where the fake listens (a log's `result_url` when a request names no host).
    pub addr: SocketAddr,
    pub backend: Arc<dyn InstanceBackend>,
    started: tokio::time::Instant,
    manual_ms: AtomicU64,
    pub inner: Mutex<Inner>,
}

impl Shared {
    pub fn now_ms(&self) -> u64 {
        match self.config.clock {
            ClockMode::Real => self.started.elapsed().as_millis() as u64,
            ClockMode::Manual => self.manual_ms.load(Ordering::SeqCst),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("fake state lock")
    }

    /// Moves the manual clock forward and reaps.
    pub fn advance_manual(&self, ms: u64) -> u64 {
        let now = self.manual_ms.fetch_add(ms, Ordering::SeqCst) + ms;
        self.reap();
        now
    }

    /// Stops the machines of instances that reached a terminal state or were
    /// deleted; each machine is stopped once.
    pub fn reap(&self) {
        let now = self.now_ms();
        let ids: Vec<u64> = {
            let mut inner = self.lock();
            let timings = self.config.timings;
            inner
                .instances
                .values_mut()
                .filter(|i| !i.stop_sent && matches!(i.machine, state::Machine::Up(_)))
                .filter(|i| i.status(now, &timings).is_none_or(|s| s.terminal()))
                .map(|i| {
                    i.stop_sent = true;
                    i.id
                })
                .collect()
        };
        for id in ids {
            let stop = self.backend.stop(id);
            tokio::spawn(async move {
                let _ = stop.await;
            });
        }
    }
}

/// What the fake knows about one instance (tests, `GET /_fake/instances`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// Contract id.
    pub id: u64,
    /// The offer it was created on.
    pub offer_id: u64,
    /// Its label.
    pub label: String,
    /// Destroyed by a client.
    pub destroyed: bool,
    /// `actual_status` now (`None`: null, invisible or gone).
    pub actual_status: Option<String>,
    /// Whether show/list would return it now.
    pub visible: bool,
    /// Keys its machine accepts.
    pub authorized_keys: Vec<String>,
    /// Its environment, as `extra_env` shows it.
    pub env: Vec<(String, String)>,
    /// Its `onstart`.
    pub onstart: String,
    /// The scenario it runs.
    pub scenario: Option<Scenario>,
}

/// A running fake server.
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts the fake on `listen` (port 0 picks a free one) in the current tokio
/// runtime. `drover fake-vast --listen ADDR` is `serve(ADDR, FakeConfig::fast(key),
/// backend)` followed by [`FakeServer::join`].
pub async fn serve(
    listen: SocketAddr,
    config: FakeConfig,
    backend: Arc<dyn InstanceBackend>,
) -> std::io::Result<FakeServer> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        addr,
        backend,
        started: tokio::time::Instant::now(),
        manual_ms: AtomicU64::new(0),
        inner: Mutex::new(Inner {
            rng: DetRng::new(config.seed),
            instances: BTreeMap::new(),
            next_contract: 27_351_986,
            rules: config.rules.clone(),
            account_keys: Vec::new(),
            next_key_id: 1,
            slots: BTreeMap::new(),
            requests: BTreeMap::new(),
            uploads: BTreeMap::new(),
            next_upload: 0,
        }),
        config,
    });
    let app = routes::router(shared.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(FakeServer { addr, shared, task })
}

impl FakeServer {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the client's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a scenario switch (same as `POST /_fake/scenario`).
    pub fn add_rule(&self, rule: Rule) {
        self.shared.lock().rules.push(rule);
    }

    /// Removes every scenario switch.
    pub fn clear_rules(&self) {
        self.shared.lock().rules.clear();
    }

    /// Moves the manual clock forward; returns the new time. Panics on a real
    /// clock (a programmer error in a test).
    pub fn advance(&self, ms: u64) -> u64 {
        assert_eq!(
            self.shared.config.clock,
            ClockMode::Manual,
            "advance needs ClockMode::Manual"
        );
        self.shared.advance_manual(ms)
    }

    /// The fake clock.
    pub fn now_ms(&self) -> u64 {
        self.shared.now_ms()
    }

    /// Every instance ever created, destroyed ones included.
    pub fn instances(&self) -> Vec<InstanceInfo> {
        control::instance_infos(&self.shared)
    }

    /// Requests seen per endpoint.
    pub fn requests(&self, endpoint: Endpoint) -> u64 {
        self.shared
            .lock()
            .requests
            .get(&endpoint)
            .copied()
            .unwrap_or(0)
    }

    /// Adds an account SSH key (same as `POST /api/v0/ssh/`); returns its id.
    pub fn add_account_key(&self, public_key: &str) -> u64 {
        listing::add_account_key(&self.shared, public_key)
    }

    /// Waits until the server stops (it runs until the process ends).
    pub async fn join(self) {
        let _ = self.task.await;
    }

    /// Stops serving.
    pub fn shutdown(self) {
        self.task.abort();
    }
}
