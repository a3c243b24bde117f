//! Offer search: the desired shape as Vast.ai filters (§A.3), a client-side
//! re-check of every filter (the catalog is cached and stale by
//! construction), and a deterministic ranking.

use crate::wire::{bool_field, f64_field, str_field, u64_field};
use core_fsm::plan::DesiredShape;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::cmp::Reverse;

/// One offer, the fields drover reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    /// The offer (ask) id; creates go to `PUT /asks/{id}/`.
    pub id: u64,
    /// The physical machine (drover's quarantine "host").
    pub machine_id: Option<u64>,
    /// The hosting account.
    pub host_id: Option<u64>,
    /// GPU model, with spaces (`RTX 4090`).
    pub gpu_name: String,
    /// GPUs in the offer.
    pub num_gpus: u64,
    /// Memory per GPU, MB.
    pub gpu_ram_mb: u64,
    /// Compute capability x100.
    pub compute_cap: u64,
    /// Upload bandwidth, Mbit/s.
    pub inet_up_mbps: f64,
    /// Download bandwidth, Mbit/s.
    pub inet_down_mbps: f64,
    /// Host reliability, 0..1.
    pub reliability: f64,
    /// Whether the host is verified.
    pub verified: bool,
    /// On-demand price with storage, dollars per hour.
    pub dph_total: f64,
    /// Current minimum interruptible bid, dollars per hour.
    pub min_bid: Option<f64>,
    /// Free disk, GB.
    pub disk_space_gb: f64,
    /// Directly mappable ports.
    pub direct_port_count: u64,
    /// Where the host is.
    pub geolocation: Option<String>,
}

impl Offer {
    /// Reads an offer; `None` when it has no id.
    pub fn from_value(value: &Value) -> Option<Offer> {
        Some(Offer {
            id: u64_field(value, "id").or_else(|| u64_field(value, "ask_contract_id"))?,
            machine_id: u64_field(value, "machine_id"),
            host_id: u64_field(value, "host_id"),
            gpu_name: str_field(value, "gpu_name").unwrap_or_default(),
            num_gpus: u64_field(value, "num_gpus").unwrap_or(0),
            gpu_ram_mb: f64_field(value, "gpu_ram").map_or(0, |mb| mb.max(0.0) as u64),
            compute_cap: f64_field(value, "compute_cap").map_or(0, |cc| cc.max(0.0) as u64),
            inet_up_mbps: f64_field(value, "inet_up").unwrap_or(0.0),
            inet_down_mbps: f64_field(value, "inet_down").unwrap_or(0.0),
            reliability: f64_field(value, "reliability")
                .or_else(|| f64_field(value, "reliability2"))
                .unwrap_or(0.0),
            verified: str_field(value, "verification").as_deref() == Some("verified")
                || bool_field(value, "verified") == Some(true),
            dph_total: f64_field(value, "dph_total").unwrap_or(f64::INFINITY),
            min_bid: f64_field(value, "min_bid"),
            disk_space_gb: f64_field(value, "disk_space").unwrap_or(0.0),
            direct_port_count: u64_field(value, "direct_port_count").unwrap_or(0),
            geolocation: str_field(value, "geolocation"),
        })
    }

    /// The physical host id drover quarantines by.
    pub fn host_key(&self) -> Option<String> {
        self.machine_id.map(|id| id.to_string())
    }

    /// What drover pays per hour: the on-demand price, or the bid.
    pub fn price_dollars_per_hour(&self, bid: Option<f64>) -> f64 {
        bid.unwrap_or(self.dph_total)
    }
}

/// Vast.ai's spelling of a GPU name: the CLI turns `_` into spaces.
pub fn vast_gpu_name(name: &str) -> String {
    name.trim().replace('_', " ")
}

/// The search body for `shape` (§A.3): the CLI's defaults, one filter per
/// shape field, storage folded into the price, on-demand or bid.
pub fn search_body(shape: &DesiredShape, limit: u32, bid: bool, require_direct: bool) -> Value {
    let mut body = Map::new();
    let mut put = |key: &str, value: Value| {
        body.insert(key.to_owned(), value);
    };
    if shape.require_verified {
        put("verified", json!({"eq": true}));
    }
    put("external", json!({"eq": false}));
    put("rentable", json!({"eq": true}));
    put("rented", json!({"eq": false}));
    put("num_gpus", json!({"gte": 1}));
    if let Some(name) = &shape.gpu_name {
        put("gpu_name", json!({"in": [vast_gpu_name(name)]}));
    }
    if let Some(mb) = shape.min_gpu_ram_mb {
        put("gpu_ram", json!({"gte": mb}));
    }
    if let Some(mbps) = shape.min_down_mbps {
        put("inet_down", json!({"gte": mbps}));
    }
    if let Some(mbps) = shape.min_up_mbps {
        put("inet_up", json!({"gte": mbps}));
    }
    if let Some(per_mille) = shape.min_reliability_per_mille {
        put("reliability", json!({"gte": f64::from(per_mille) / 1000.0}));
    }
    if let Some(cc) = shape.min_compute_capability {
        put("compute_cap", json!({"gte": cc}));
    }
    if let Some(cents) = shape.max_price_cents_per_hour {
        put("dph_total", json!({"lte": f64::from(cents) / 100.0}));
    }
    if require_direct {
        put("direct_port_count", json!({"gte": 1}));
    }
    put("disk_space", json!({"gte": shape.disk_gb}));
    put("order", json!([["score", "desc"]]));
    put("type", json!(if bid { "bid" } else { "on-demand" }));
    put("limit", json!(limit));
    put("allocated_storage", json!(shape.disk_gb));
    Value::Object(body)
}

/// Whether `offer` meets `shape` and is not on an excluded host: the same
/// rules as [`search_body`], checked again on what came back.
pub fn fits(
    offer: &Offer,
    shape: &DesiredShape,
    excluded_hosts: &[String],
    require_direct: bool,
) -> bool {
    let at_least = |have: f64, want: Option<u32>| want.is_none_or(|w| have >= f64::from(w));
    let excluded = offer
        .host_key()
        .is_some_and(|host| excluded_hosts.contains(&host));
    !excluded
        && offer.num_gpus >= 1
        && (!shape.require_verified || offer.verified)
        && shape
            .gpu_name
            .as_ref()
            .is_none_or(|name| offer.gpu_name.eq_ignore_ascii_case(&vast_gpu_name(name)))
        && shape.min_gpu_ram_mb.is_none_or(|mb| offer.gpu_ram_mb >= mb)
        && at_least(offer.inet_down_mbps, shape.min_down_mbps)
        && at_least(offer.inet_up_mbps, shape.min_up_mbps)
        && shape
            .min_reliability_per_mille
            .is_none_or(|pm| offer.reliability * 1000.0 >= f64::from(pm) - 1e-9)
        && shape
            .min_compute_capability
            .is_none_or(|cc| offer.compute_cap >= u64::from(cc))
        && shape
            .max_price_cents_per_hour
            .is_none_or(|cents| offer.dph_total * 100.0 <= f64::from(cents) + 1e-9)
        && (!require_direct || offer.direct_port_count >= 1)
        && offer.disk_space_gb >= f64::from(shape.disk_gb)
}

/// Ranks offers, best first, independent of the server's order: lowest price
/// (on-demand: `dph_total`; bid: `min_bid`, the cheapest to hold), then
/// highest reliability, then highest download bandwidth, then lowest offer id.
/// Prices and fractions are compared as integers (micro-dollars, parts per
/// million), so equal-looking floats never reorder between runs.
pub fn rank(offers: &mut [Offer], bid: bool) {
    offers.sort_by_key(|offer| {
        let price = if bid {
            offer.min_bid.unwrap_or(offer.dph_total)
        } else {
            offer.dph_total
        };
        (
            to_micro(price),
            Reverse(to_micro(offer.reliability)),
            Reverse(to_micro(offer.inet_down_mbps)),
            offer.id,
        )
    });
}

fn to_micro(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        (value * 1e6).round().min(u64::MAX as f64) as u64
    } else if value.is_finite() {
        0
    } else {
        u64::MAX
    }
}

/// What `drover plan` shows for one group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChosenOffers {
    /// The offers creates would use, best first, one per node.
    pub chosen: Vec<Offer>,
    /// Nodes for which no fitting offer was found.
    pub shortfall: u32,
    /// Offers that fit the shape.
    pub candidates: u32,
    /// What the chosen offers cost together, dollars per hour.
    pub expected_dollars_per_hour: f64,
    /// The bound drover can promise: `count` nodes at the shape's price cap
    /// when it has one, else `count` nodes on the most expensive fitting offer
    /// of the current catalog (offers vanish, so any candidate may end up
    /// rented).
    pub worst_case_dollars_per_hour: f64,
    /// The worst case rounded up to whole cents.
    pub worst_case_cents_per_hour: u64,
}

/// Chooses `count` offers from ranked candidates.
pub fn choose(
    ranked: &[Offer],
    count: u32,
    bid: Option<f64>,
    cap_cents: Option<u32>,
) -> ChosenOffers {
    let chosen: Vec<Offer> = ranked.iter().take(count as usize).cloned().collect();
    let expected = chosen
        .iter()
        .map(|o| o.price_dollars_per_hour(bid))
        .sum::<f64>();
    let highest = ranked
        .iter()
        .map(|o| o.price_dollars_per_hour(bid))
        .fold(0.0_f64, f64::max);
    // With a cap, every create filters `dph_total <= cap`, so the cap is a
    // true bound; without one, the dearest candidate of today's catalog is.
    let per_node = cap_cents.map_or(highest, |cents| f64::from(cents) / 100.0);
    let worst = per_node * f64::from(count);
    ChosenOffers {
        shortfall: count.saturating_sub(chosen.len() as u32),
        candidates: ranked.len() as u32,
        chosen,
        expected_dollars_per_hour: expected,
        worst_case_dollars_per_hour: worst,
        worst_case_cents_per_hour: (worst * 100.0 - 1e-9).ceil().max(0.0) as u64,
    }
}
