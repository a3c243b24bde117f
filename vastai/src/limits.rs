//! The endpoints drover uses and Vast.ai's documented per-endpoint rate limits
//! (§A.2 of `shared/reference/vastai-api.md`), shared by the client's limiter
//! and the fake server.
//!
//! Vast.ai states each limit as a `threshold` without a unit and enforces it
//! as a minimum interval between requests to one endpoint from one identity.
//! Both sides read a threshold `T` as `T x unit_ms` milliseconds between
//! requests; `unit_ms` defaults to 1000 (seconds, the conservative reading)
//! and tests shrink it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An API endpoint as the rate limiter sees it (a path template and method).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `POST /api/v0/bundles/`: search offers.
    Search,
    /// `PUT /api/v0/asks/{id}/`: create an instance from an offer.
    Create,
    /// `GET /api/v0/instances/{id}/`: show one instance.
    ShowInstance,
    /// `GET /api/v1/instances/`: list instances (paginated).
    ListInstances,
    /// `DELETE /api/v0/instances/{id}/`: destroy an instance.
    Destroy,
    /// `PUT /api/v0/instances/{id}/`: change state or label.
    Manage,
    /// `/api/v0/ssh/...`: account SSH keys.
    SshKeys,
    /// `PUT /api/v0/instances/request_logs/{id}/`: ask for an instance's logs.
    Logs,
}

impl Endpoint {
    /// Every endpoint, in a fixed order.
    pub const ALL: [Endpoint; 8] = [
        Endpoint::Search,
        Endpoint::Create,
        Endpoint::ShowInstance,
        Endpoint::ListInstances,
        Endpoint::Destroy,
        Endpoint::Manage,
        Endpoint::SshKeys,
        Endpoint::Logs,
    ];

    /// The documented threshold, in thousandths (`4.5` -> `4500`). Search is
    /// documented as `10 requests per minute`, i.e. one per 6 units.
    pub fn documented_threshold_milli(self) -> u64 {
        match self {
            Endpoint::Search => 6_000,
            Endpoint::Create => 4_500,
            Endpoint::ShowInstance => 2_000,
            Endpoint::ListInstances => 1_000,
            Endpoint::Destroy => 3_000,
            Endpoint::Manage => 1_000,
            Endpoint::SshKeys => 1_000,
            // Not documented; read like the other instance writes.
            Endpoint::Logs => 1_000,
        }
    }

    /// The extra wait a violation costs (create: `penalty: 12`), in thousandths.
    pub fn documented_penalty_milli(self) -> u64 {
        match self {
            Endpoint::Create => 12_000,
            _ => 0,
        }
    }

    /// The threshold as Vast.ai prints it in a 429 body (`4.5`, `2.0`).
    pub fn threshold_text(self) -> String {
        let milli = self.documented_threshold_milli();
        format!("{}.{}", milli / 1000, (milli % 1000) / 100)
    }
}

/// Minimum intervals per endpoint, in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimits {
    /// Minimum interval between two requests to one endpoint, per endpoint.
    pub min_interval_ms: BTreeMap<Endpoint, u64>,
    /// Extra wait after a rejected request, per endpoint (create only by default).
    pub penalty_ms: BTreeMap<Endpoint, u64>,
}

impl RateLimits {
    /// The documented thresholds, each unit worth `unit_ms` milliseconds.
    pub fn documented(unit_ms: u64) -> RateLimits {
        let scale = |milli: u64| milli.saturating_mul(unit_ms) / 1000;
        RateLimits {
            min_interval_ms: Endpoint::ALL
                .iter()
                .map(|e| (*e, scale(e.documented_threshold_milli())))
                .collect(),
            penalty_ms: Endpoint::ALL
                .iter()
                .map(|e| (*e, scale(e.documented_penalty_milli())))
                .collect(),
        }
    }

    /// No limits at all.
    pub fn none() -> RateLimits {
        RateLimits::documented(0)
    }

    /// The minimum interval of `endpoint`, 0 if none is set.
    pub fn interval_ms(&self, endpoint: Endpoint) -> u64 {
        self.min_interval_ms.get(&endpoint).copied().unwrap_or(0)
    }

    /// The penalty of `endpoint`, 0 if none is set.
    pub fn penalty_of_ms(&self, endpoint: Endpoint) -> u64 {
        self.penalty_ms.get(&endpoint).copied().unwrap_or(0)
    }
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits::documented(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_thresholds_scale() {
        let limits = RateLimits::documented(1000);
        assert_eq!(limits.interval_ms(Endpoint::Create), 4500);
        assert_eq!(limits.interval_ms(Endpoint::ShowInstance), 2000);
        assert_eq!(limits.penalty_of_ms(Endpoint::Create), 12_000);
        assert_eq!(RateLimits::documented(10).interval_ms(Endpoint::Search), 60);
        assert_eq!(RateLimits::none().interval_ms(Endpoint::Destroy), 0);
        assert_eq!(Endpoint::Create.threshold_text(), "4.5");
        assert_eq!(Endpoint::ListInstances.threshold_text(), "1.0");
    }
}
