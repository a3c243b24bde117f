//! A fake Vast.ai server on 127.0.0.1 and a real client pointed at it, with
//! every interval shrunk to milliseconds and the fake's clock manual.

#![allow(dead_code)]

use core_fsm::ids::{LogicalNodeId, Nonce, RunId};
use core_fsm::plan::{DesiredShape, ProviderKind};
use core_fsm::port::{CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError};
use std::sync::Arc;
use vastai::client::RetryPolicy;
use vastai::fake::{FakeConfig, FakeServer, MemoryBackend, Rule};
use vastai::limits::RateLimits;
use vastai::{ApiKey, ClientConfig, VastClient};

/// The test account's API key: no output may ever contain it.
pub const KEY: &str = "vk-test-5f3c9a1b7e2d4c6a";
/// drover's SSH public key in tests.
pub const PUBKEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDroverTestKeyOnly drover@test";

pub struct World {
    pub fake: FakeServer,
    pub backend: Arc<MemoryBackend>,
    pub client: VastClient,
}

/// The client configuration tests use: no pacing, fast bounded retries.
pub fn client_config(base_url: &str) -> ClientConfig {
    let mut config = ClientConfig::new(ApiKey::new(KEY), PUBKEY);
    config.base_url = base_url.to_owned();
    config.rate_limits = RateLimits::none();
    config.retry = RetryPolicy {
        attempts_max: 5,
        backoff_base_ms: 1,
        backoff_max_ms: 4,
        seed: 11,
    };
    config.request_timeout_ms = 5_000;
    config.connect_timeout_ms = 1_000;
    config.visibility_read_interval_ms = 1;
    config
}

pub async fn world() -> World {
    world_with(|_| {}, |_| {}).await
}

pub async fn world_with(
    fake: impl FnOnce(&mut FakeConfig),
    client: impl FnOnce(&mut ClientConfig),
) -> World {
    let mut fake_config = FakeConfig::for_tests(KEY);
    fake(&mut fake_config);
    let backend = Arc::new(MemoryBackend::default());
    let server = vastai::serve("127.0.0.1:0".parse().unwrap(), fake_config, backend.clone())
        .await
        .expect("fake binds");
    let mut config = client_config(&server.base_url());
    client(&mut config);
    World {
        client: VastClient::new(config).expect("client builds"),
        fake: server,
        backend,
    }
}

impl World {
    /// Another client against the same fake (a second orchestrator).
    pub fn second_client(&self, tweak: impl FnOnce(&mut ClientConfig)) -> VastClient {
        let mut config = client_config(&self.fake.base_url());
        tweak(&mut config);
        VastClient::new(config).expect("client builds")
    }

    pub fn rule(&self, rule: Rule) {
        self.fake.add_rule(rule);
    }

    /// Advances the fake clock in `step_ms` steps, looking after each, until
    /// the answer is not `Pending`; bounded by `steps_max`.
    pub async fn settle(&self, lease: &LeaseFacts, step_ms: u64, steps_max: u32) -> EndpointStatus {
        for _ in 0..steps_max {
            let status = self.client.lookup_endpoint(lease).await.expect("lookup");
            if !matches!(status, EndpointStatus::Pending { .. }) {
                return status;
            }
            self.fake.advance(step_ms);
        }
        panic!("still pending after {steps_max} steps of {step_ms} ms");
    }

    pub async fn create(&self, node: &str, nonce: u64) -> Result<LeaseGranted, ProviderError> {
        self.client.create_lease(&request(node, nonce)).await
    }
}

/// A shape the default catalog's RTX 4090 offers fit.
pub fn shape() -> DesiredShape {
    DesiredShape {
        image: "ghcr.io/drover/node:1".to_owned(),
        disk_gb: 20,
        gpu_name: Some("RTX_4090".to_owned()),
        min_gpu_ram_mb: Some(24_000),
        min_down_mbps: Some(200),
        require_verified: true,
        ..DesiredShape::default()
    }
}

pub fn request(node: &str, nonce: u64) -> CreateLeaseRequest {
    CreateLeaseRequest {
        run_id: RunId(1),
        node: LogicalNodeId::from(node),
        nonce: Nonce(nonce),
        provider: ProviderKind::Vastai,
        shape: shape().into(),
        excluded_hosts: Vec::new(),
    }
}

/// The failure reason code of a `Failed` status.
pub fn failed_code(status: &EndpointStatus) -> String {
    match status {
        EndpointStatus::Failed { reason } => reason.split(':').next().unwrap_or("").to_owned(),
        other => panic!("expected Failed, got {other:?}"),
    }
}
