//! `drover plan` on a plan with vastai groups: the offers `up` would rent
//! now, one per node, and the worst case per hour (searches only; nothing is
//! created). The catalog moves, so each real create searches again; the
//! worst case is the bound that holds anyway (`count x` the shape's price
//! cap, or `count x` the dearest fitting offer when there is no cap).

use super::settings::{self, Settings};
use core_fsm::plan::{ProviderKind, RunPlan};
use russh::keys::{Algorithm, PrivateKey};
use serde_json::{Value, json};
use std::fmt::Write;
use vastai::VastClient;
use vastai::client::ChosenOffers;

/// The offers of one vastai group.
#[derive(Clone, Debug)]
pub struct GroupOffers {
    /// The group.
    pub group: String,
    /// Nodes it wants.
    pub count: u32,
    /// The offers its creates would use and their cost.
    pub chosen: ChosenOffers,
}

/// What `drover plan` shows for the vastai part of a plan.
#[derive(Clone, Debug)]
pub struct VastPlan {
    /// The API searched.
    pub base_url: String,
    /// One entry per vastai group, in plan order.
    pub groups: Vec<GroupOffers>,
}

impl VastPlan {
    /// The worst case of the whole plan, dollars per hour.
    pub fn worst_case_dollars_per_hour(&self) -> f64 {
        self.groups
            .iter()
            .map(|g| g.chosen.worst_case_dollars_per_hour)
            .sum()
    }

    /// The worst case of the whole plan in cents, each group rounded up.
    pub fn worst_case_cents_per_hour(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.chosen.worst_case_cents_per_hour)
            .sum()
    }
}

/// Searches the offers of `plan`'s vastai groups; `None` when it has none.
/// Needs the API key (a real search does); the SSH key is a throwaway one,
/// since nothing is created.
pub async fn offers(plan: &RunPlan) -> Result<Option<VastPlan>, String> {
    let Some(settings) = settings::from_plan(plan)? else {
        return Ok(None);
    };
    let client = client(&settings)?;
    let mut groups = Vec::new();
    for group in plan
        .groups
        .iter()
        .filter(|g| g.provider == ProviderKind::Vastai)
    {
        let chosen = client
            .plan_offers(&group.shape, group.count)
            .await
            .map_err(|e| {
                format!(
                    "searching offers for group {}: {}",
                    group.group_id, e.message
                )
            })?;
        groups.push(GroupOffers {
            group: group.group_id.to_string(),
            count: group.count,
            chosen,
        });
    }
    Ok(Some(VastPlan {
        base_url: settings.base_url,
        groups,
    }))
}

fn client(settings: &Settings) -> Result<VastClient, String> {
    let key = settings::api_key()?;
    let throwaway = PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519)
        .and_then(|k| k.public_key().to_openssh())
        .map_err(|e| format!("SSH key: {e}"))?;
    VastClient::new(super::client_config(settings, key, &throwaway)).map_err(|e| e.message)
}

/// The `--json` form: `{"base_url", "groups": [{"group", "count", "offers":
/// [...], "shortfall", "candidates", "expected_dollars_per_hour",
/// "worst_case_dollars_per_hour", "worst_case_cents_per_hour"}],
/// "worst_case_dollars_per_hour", "worst_case_cents_per_hour"}`.
pub fn to_json(plan: &VastPlan) -> Value {
    let groups: Vec<Value> = plan
        .groups
        .iter()
        .map(|g| {
            let offers: Vec<Value> = g
                .chosen
                .chosen
                .iter()
                .map(|o| {
                    json!({
                        "offer_id": o.id, "machine_id": o.machine_id, "gpu_name": o.gpu_name,
                        "num_gpus": o.num_gpus, "dollars_per_hour": o.dph_total,
                        "reliability": o.reliability, "inet_down_mbps": o.inet_down_mbps,
                        "verified": o.verified,
                    })
                })
                .collect();
            json!({
                "group": g.group, "count": g.count, "offers": offers,
                "shortfall": g.chosen.shortfall, "candidates": g.chosen.candidates,
                "expected_dollars_per_hour": g.chosen.expected_dollars_per_hour,
                "worst_case_dollars_per_hour": g.chosen.worst_case_dollars_per_hour,
                "worst_case_cents_per_hour": g.chosen.worst_case_cents_per_hour,
            })
        })
        .collect();
    json!({
        "base_url": plan.base_url, "groups": groups,
        "worst_case_dollars_per_hour": plan.worst_case_dollars_per_hour(),
        "worst_case_cents_per_hour": plan.worst_case_cents_per_hour(),
    })
}

/// The text form, one offer per line.
pub fn render(plan: &VastPlan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "vastai offers at {} (each create searches again; the catalog moves):",
        plan.base_url
    );
    for g in &plan.groups {
        let c = &g.chosen;
        let _ = writeln!(
            out,
            "group {}: {} node(s), {} fitting offer(s)",
            g.group, g.count, c.candidates
        );
        let _ = writeln!(
            out,
            "  {:<10} {:<14} {:>9} {:>11} {:>11} {:>8}",
            "offer", "gpu", "$/hour", "reliability", "down Mbit/s", "machine"
        );
        for o in &c.chosen {
            let machine = o.machine_id.map(|m| m.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<10} {:<14} {:>9.4} {:>11.4} {:>11.0} {:>8}",
                o.id, o.gpu_name, o.dph_total, o.reliability, o.inet_down_mbps, machine
            );
        }
        if c.shortfall > 0 {
            let _ = writeln!(
                out,
                "  shortfall: {} node(s) have no fitting offer",
                c.shortfall
            );
        }
        let _ = writeln!(
            out,
            "  expected ${:.4}/h; worst case ${:.2}/h ({} cents/h)",
            c.expected_dollars_per_hour, c.worst_case_dollars_per_hour, c.worst_case_cents_per_hour
        );
    }
    let _ = writeln!(
        out,
        "worst case for the plan: ${:.2}/h ({} cents/h)",
        plan.worst_case_dollars_per_hour(),
        plan.worst_case_cents_per_hour()
    );
    out
}
