//! Where the Vast.ai provider's settings come from.
//!
//! - The API base URL: the plan's `vastai.base_url` provider label (every
//!   vastai group that sets it must agree: one run talks to one API), else
//!   `VAST_URL`, else `https://console.vast.ai`. The plan wins because `up`
//!   copies it into the state dir, so `drover down` reaches the API the
//!   leases were rented through even from a shell without `VAST_URL`.
//! - Pacing: the plan's `vastai.rate_unit_ms` (what one unit of Vast.ai's
//!   documented thresholds is worth; 1000 by default, i.e. seconds).
//! - The API key: `VAST_API_KEY`, else the file the vast CLI keeps
//!   (`~/.config/vastai/vast_api_key`, then `~/.vast_api_key`). It is an
//!   [`ApiKey`] from the first moment: never printed, never journaled.

use core_fsm::plan::{ProviderKind, RunPlan};
use std::collections::BTreeSet;
use std::path::PathBuf;
use vastai::ApiKey;
use vastai::client::{BASE_URL_ENV, DEFAULT_BASE_URL};
use vastai::secret::API_KEY_ENV;

/// The provider label that names the API base URL.
pub const BASE_URL_LABEL: &str = "vastai.base_url";
/// The provider label that scales the documented rate-limit thresholds.
pub const RATE_UNIT_LABEL: &str = "vastai.rate_unit_ms";
/// The default worth of one threshold unit: a second (the conservative reading).
pub const RATE_UNIT_DEFAULT_MS: u64 = 1_000;
/// The provider label that makes every create of the group an interruptible
/// bid at this many whole cents per hour (the client reads it per create).
pub use vastai::client::BID_LABEL;
/// What every `vastai.*` label names.
pub const LABEL_PREFIX: &str = "vastai.";

/// Why `value` is not a valid value of the `vastai.*` label `key` (an
/// unknown key included); `None` when it is. The plan file's reader reports
/// this at the label's line; [`from_plan`] checks it again for plans that
/// came from elsewhere.
pub fn label_problem(key: &str, value: &str) -> Option<String> {
    let value = value.trim();
    match key {
        BASE_URL_LABEL if !(value.starts_with("http://") || value.starts_with("https://")) => Some(
            format!("the Vast.ai base URL must start with http:// or https://, not {value:?}"),
        ),
        BASE_URL_LABEL => None,
        RATE_UNIT_LABEL => value
            .parse::<u64>()
            .err()
            .map(|_| format!("a whole number of milliseconds, not {value:?}")),
        BID_LABEL => value
            .parse::<u32>()
            .err()
            .map(|_| format!("a whole number of cents per hour (30 for $0.30), not {value:?}")),
        _ => Some(format!(
            "unknown Vast.ai label (known: {BASE_URL_LABEL}, {RATE_UNIT_LABEL}, {BID_LABEL})"
        )),
    }
}

/// The provider settings of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `https://console.vast.ai`, or a fake's `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// Milliseconds per documented threshold unit (client pacing).
    pub rate_unit_ms: u64,
}

/// The settings of `plan`'s vastai groups; `None` when it has none.
pub fn from_plan(plan: &RunPlan) -> Result<Option<Settings>, String> {
    let groups: Vec<_> = plan
        .groups
        .iter()
        .filter(|g| g.provider == ProviderKind::Vastai)
        .collect();
    if groups.is_empty() {
        return Ok(None);
    }
    for group in &groups {
        let labels = &group.shape.provider_labels;
        for (key, value) in labels.range(LABEL_PREFIX.to_owned()..) {
            if !key.starts_with(LABEL_PREFIX) {
                break;
            }
            if let Some(problem) = label_problem(key, value) {
                return Err(format!("group {}: {key}: {problem}", group.group_id));
            }
        }
    }
    let agreed = |label: &str| -> Result<Option<String>, String> {
        let values: BTreeSet<&String> = groups
            .iter()
            .filter_map(|g| g.shape.provider_labels.get(label))
            .collect();
        match values.len() {
            0 => Ok(None),
            1 => Ok(values.into_iter().next().map(|v| v.trim().to_owned())),
            _ => Err(format!(
                "the vastai groups disagree on {label} ({}); one run talks to one Vast.ai API",
                values
                    .iter()
                    .map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    };
    let env_url = std::env::var(BASE_URL_ENV)
        .ok()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty());
    let base_url = agreed(BASE_URL_LABEL)?
        .or(env_url)
        .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
    let base_url = base_url.trim_end_matches('/').to_owned();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(format!(
            "the Vast.ai base URL must start with http:// or https://: {base_url}"
        ));
    }
    let rate_unit_ms = match agreed(RATE_UNIT_LABEL)? {
        None => RATE_UNIT_DEFAULT_MS,
        Some(text) => text.parse().map_err(|_| {
            format!("{RATE_UNIT_LABEL} must be a whole number of milliseconds, not {text:?}")
        })?,
    };
    Ok(Some(Settings {
        base_url,
        rate_unit_ms,
    }))
}

/// The files the vast CLI keeps the key in, in the order they are tried.
fn key_files() -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        return vec![];
    };
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".config"));
    vec![
        config.join("vastai").join("vast_api_key"),
        home.join(".vast_api_key"),
    ]
}

/// The account key: `VAST_API_KEY`, else the vast CLI's key file. The error
/// names where it looked, never a key.
pub fn api_key() -> Result<ApiKey, String> {
    if let Some(key) = ApiKey::from_env() {
        return Ok(key);
    }
    for file in key_files() {
        if let Ok(text) = std::fs::read_to_string(&file)
            && !text.trim().is_empty()
        {
            return Ok(ApiKey::new(text.trim()));
        }
    }
    let looked: Vec<String> = key_files()
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    Err(format!(
        "{API_KEY_ENV} is not set and no vast CLI key file was found (looked in {})",
        looked.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_with(labels: &[&[(&str, &str)]]) -> RunPlan {
        let mut plan = RunPlan::local(1);
        let template = plan.groups[0].clone();
        plan.groups.clear();
        for (i, group_labels) in labels.iter().enumerate() {
            let mut group = template.clone();
            group.group_id = core_fsm::ids::GroupId::from(format!("g{i}").as_str());
            group.provider = ProviderKind::Vastai;
            for (k, v) in *group_labels {
                group.shape.provider_labels.insert((*k).into(), (*v).into());
            }
            plan.groups.push(group);
        }
        plan
    }

    #[test]
    fn plan_labels_name_the_api_and_the_pacing() {
        let plan = plan_with(&[&[
            (BASE_URL_LABEL, "http://127.0.0.1:18080/"),
            (RATE_UNIT_LABEL, "10"),
        ]]);
        assert_eq!(
            from_plan(&plan).unwrap(),
            Some(Settings {
                base_url: "http://127.0.0.1:18080".into(),
                rate_unit_ms: 10
            })
        );
        assert_eq!(from_plan(&RunPlan::local(2)).unwrap(), None);
    }

    #[test]
    fn groups_that_disagree_or_bad_values_are_refused() {
        let plan = plan_with(&[
            &[(BASE_URL_LABEL, "http://127.0.0.1:1")],
            &[(BASE_URL_LABEL, "http://127.0.0.1:2")],
        ]);
        let err = from_plan(&plan).unwrap_err();
        assert!(err.contains("disagree"), "{err}");
        let plan = plan_with(&[&[(BASE_URL_LABEL, "ftp://x")]]);
        assert!(from_plan(&plan).unwrap_err().contains("http://"));
        let plan = plan_with(&[&[(RATE_UNIT_LABEL, "fast")]]);
        assert!(from_plan(&plan).unwrap_err().contains("milliseconds"));
        // A bid in dollars would be ignored by the client (on-demand at
        // full price) and a misspelt key silently unread: both refused.
        let plan = plan_with(&[&[(BID_LABEL, "0.30")]]);
        let err = from_plan(&plan).unwrap_err();
        assert!(err.contains(BID_LABEL) && err.contains("cents"), "{err}");
        let plan = plan_with(&[&[("vastai.base_ulr", "http://x")]]);
        let err = from_plan(&plan).unwrap_err();
        assert!(err.contains("unknown Vast.ai label"), "{err}");
        let plan = plan_with(&[&[(BID_LABEL, "30"), ("other.label", "kept")]]);
        assert!(from_plan(&plan).is_ok());
    }
}
