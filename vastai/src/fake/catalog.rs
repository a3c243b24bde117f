//! The fake's offer catalog and its search (§A.3). The catalog is static:
//! rented offers keep being listed, as Vast.ai's cached catalog does ("we
//! can't guarantee availability of any machine at the point of inquiry").

use super::query::{Kind, compare_by, matches, number_param, parse_filters, parse_order};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One offer of the fake's catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OfferSpec {
    /// Offer (ask) id.
    pub id: u64,
    /// Physical machine.
    pub machine_id: u64,
    /// Hosting account.
    pub host_id: u64,
    /// GPU model, with spaces.
    pub gpu_name: String,
    /// GPUs.
    pub num_gpus: u64,
    /// MB per GPU.
    pub gpu_ram_mb: u64,
    /// Compute capability x100.
    pub compute_cap: u64,
    /// Mbit/s up.
    pub inet_up: f64,
    /// Mbit/s down.
    pub inet_down: f64,
    /// 0..1.
    pub reliability: f64,
    /// Verified host.
    pub verified: bool,
    /// GPU price, dollars per hour.
    pub dph_base: f64,
    /// Storage, dollars per GB per month.
    pub storage_cost: f64,
    /// Minimum interruptible bid, dollars per hour.
    pub min_bid: f64,
    /// Free disk, GB.
    pub disk_space: f64,
    /// Directly mappable ports.
    pub direct_port_count: u64,
    /// `City, CC`.
    pub geolocation: String,
}

/// A small, varied, deterministic catalog.
pub fn default_catalog() -> Vec<OfferSpec> {
    let offer =
        |id: u64, gpu: &str, ram: u64, cc: u64, price: f64, rel: f64, verified: bool, down: f64| {
            OfferSpec {
                id,
                machine_id: 41_000 + id % 1000,
                host_id: 118_000 + id % 7,
                gpu_name: gpu.to_owned(),
                num_gpus: 1,
                gpu_ram_mb: ram,
                compute_cap: cc,
                inet_up: down * 0.9,
                inet_down: down,
                reliability: rel,
                verified,
                dph_base: price,
                storage_cost: 0.15,
                min_bid: (price * 0.4 * 10_000.0).round() / 10_000.0,
                disk_space: 400.0,
                direct_port_count: 100,
                geolocation: "Washington, US".to_owned(),
            }
        };
    vec![
        offer(
            18_422_311, "RTX 4090", 24_564, 890, 0.32, 0.9981, true, 905.7,
        ),
        offer(
            18_422_312, "RTX 4090", 24_564, 890, 0.30, 0.9720, true, 510.0,
        ),
        offer(
            18_422_313, "RTX 4090", 24_564, 890, 0.28, 0.9950, false, 220.0,
        ),
        offer(
            18_422_314, "RTX 4090", 24_564, 890, 0.35, 0.9990, true, 2_100.0,
        ),
        offer(
            18_422_320,
            "RTX A5000",
            24_564,
            860,
            0.18,
            0.9930,
            true,
            800.0,
        ),
        offer(
            18_422_330,
            "A100 SXM4",
            81_920,
            800,
            1.10,
            0.9970,
            true,
            3_000.0,
        ),
        offer(
            18_422_340, "H100 SXM", 81_559, 900, 2.20, 0.9985, true, 5_000.0,
        ),
        offer(
            18_422_350,
            "Tesla V100",
            16_384,
            700,
            0.12,
            0.9600,
            true,
            400.0,
        ),
    ]
}

impl OfferSpec {
    /// The offer as Vast.ai sends it, with `allocated_storage` GB folded
    /// into the price.
    pub fn to_json(&self, allocated_storage_gb: f64) -> Value {
        let disk_hour = allocated_storage_gb * self.storage_cost / 30.0 / 24.0;
        let total = self.dph_base + disk_hour;
        json!({
            "id": self.id, "ask_contract_id": self.id, "bundle_id": self.id * 50, "bundled_results": null,
            "machine_id": self.machine_id, "host_id": self.host_id, "hostname": null, "cluster_id": null,
            "num_gpus": self.num_gpus, "gpu_name": self.gpu_name, "gpu_ram": self.gpu_ram_mb,
            "gpu_total_ram": self.gpu_ram_mb * self.num_gpus, "gpu_frac": 1.0, "gpu_arch": "nvidia",
            "compute_cap": self.compute_cap, "cuda_max_good": 12.8, "driver_version": "570.124.04",
            "cpu_name": "AMD EPYC 7543 32-Core Processor", "cpu_arch": "amd64", "cpu_cores": null,
            "cpu_cores_effective": 16.0, "cpu_ram": 257_597, "disk_space": self.disk_space,
            "inet_up": self.inet_up, "inet_down": self.inet_down, "inet_up_cost": 0.002, "inet_down_cost": 0.002,
            "direct_port_count": self.direct_port_count, "public_ipaddr": "203.0.113.42", "static_ip": true,
            "dph_base": self.dph_base, "dph_total": total, "min_bid": self.min_bid,
            "storage_cost": self.storage_cost, "storage_total_cost": disk_hour,
            "dlperf": 74.1, "score": 200.0 * self.reliability / total.max(0.01),
            "rentable": true, "rented": false, "is_bid": false, "external": false, "hosting_type": 1,
            "geolocation": self.geolocation, "reliability": self.reliability, "reliability2": self.reliability,
            "verification": if self.verified { "verified" } else { "unverified" },
            "verified": self.verified, "vericode": if self.verified { 1 } else { 0 },
            "start_date": 1_767_225_600.0, "end_date": 1_772_409_600.0, "duration": 5_184_000.0,
            "search": {"gpuCostPerHour": self.dph_base, "diskHour": disk_hour, "totalHour": total},
            // The rest of the fields the official CLI can filter on.
            "bw_nvlink": 0.0, "cpu_ghz": 2.8, "datacenter": self.verified, "disk_bw": 3120.4,
            "dlperf_per_dphtotal": 74.1 / total.max(0.01), "total_flops": 82.5,
            "flops_per_dphtotal": 82.5 / total.max(0.01), "gpu_display_active": false,
            "gpu_mem_bw": 903.4, "gpu_max_power": 450, "gpu_max_temp": 83, "gpu_lanes": 16,
            "has_avx": 1, "mobo_name": "ROMED8-2T", "pci_gen": 4.0, "pcie_bw": 24.8,
            "ubuntu_version": "22.04", "os_version": "22.04", "vms_enabled": false,
            "driver_vers": 570_124_004, "reliability_mult": 0.99,
        })
    }
}

/// Keys of a search body that are not filters.
const CONTROL_KEYS: [&str; 5] = [
    "order",
    "type",
    "limit",
    "allocated_storage",
    "disable_bundling",
];

/// The search types the CLI, the SDK and the OpenAPI text send.
const TYPES: [&str; 5] = ["on-demand", "ondemand", "bid", "interruptible", "reserved"];

/// A search: the offers of `catalog` matching `body`, ordered and limited.
/// `Err` carries the 400 message, naming what could not be read.
pub fn search(catalog: &[OfferSpec], body: &Value) -> Result<Vec<Value>, String> {
    let Some(query) = body.as_object() else {
        return Err("Invalid json body".to_owned());
    };
    match query.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(kind)) if TYPES.contains(&kind.as_str()) => {}
        Some(other) => return Err(format!("type: invalid type {other} ({})", TYPES.join(", "))),
    }
    // Every offer has the same fields; a sample types them (a catalog may be empty).
    let sample = default_catalog()[0].to_json(5.0);
    let kind_of = |field: &str| sample.get(field).map(Kind::of);
    let filters = parse_filters(query, &CONTROL_KEYS, kind_of)?;
    let order = parse_order(query.get("order"), |field| sample.get(field).is_some())?;
    let storage = number_param(query, "allocated_storage")?.unwrap_or(5.0);
    let limit = number_param(query, "limit")?.map_or(64, |n| n.max(0.0) as usize);
    let mut offers: Vec<Value> = catalog
        .iter()
        .map(|spec| spec.to_json(storage))
        .filter(|offer| matches(offer, &filters))
        .collect();
    offers.sort_by(|a, b| compare_by(a, b, &order));
    offers.truncate(limit);
    Ok(offers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_order_and_limit() {
        let body = json!({"gpu_name": {"in": ["RTX 4090"]}, "verified": {"eq": true},
            "reliability": {"gte": 0.99}, "order": [["dph_total", "asc"]], "limit": 2, "type": "ondemand"});
        let offers = search(&default_catalog(), &body).unwrap();
        let ids: Vec<u64> = offers.iter().map(|o| o["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, vec![18_422_311, 18_422_314]);
        assert!(search(&default_catalog(), &json!([1])).is_err());
        assert!(search(&default_catalog(), &json!({"type": "spot"})).is_err());
    }
}
