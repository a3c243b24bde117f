//! The fake's scenario switches: every real-world behaviour of §A.12
//! (F1-F21), chosen per instance (a label, an env switch, or a rule) or per
//! request (a rule), at a seeded integer rate when wanted.
//!
//! F16 (deprecated v0 list), F17 (bad key as 404), F18 (destroy of a gone
//! instance) and F3 (two creates on one offer) are always on: they are how
//! the API behaves, not faults. F20 is the config toggle
//! [`super::FakeConfig::account_keys_reach_existing`].

use crate::limits::Endpoint;
use serde::{Deserialize, Serialize};

/// One behaviour of §A.12.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Scenario {
    /// F1: `null` -> `created` -> `loading` -> `running`, SSH at running.
    #[serde(rename = "f01_happy_path")]
    F01HappyPath,
    /// F2: the create answers 404 `no_such_ask` (410 when `status_410`).
    #[serde(rename = "f02_offer_gone")]
    F02OfferGone {
        /// Answer 410 (`cancel_unavail`) instead of 404.
        #[serde(default)]
        status_410: bool,
    },
    /// F3: this create loses a double rent: it ends `exited` with a docker
    /// port-bind `status_msg` where it would have become running.
    #[serde(rename = "f03_double_rent")]
    F03DoubleRent,
    /// F4: the new contract is absent from show and list for `delay_ms`.
    #[serde(rename = "f04_create_invisible")]
    F04CreateInvisible {
        /// How long it stays invisible.
        delay_ms: u64,
    },
    /// F5: the create is committed, then its answer is lost.
    #[serde(rename = "f05_create_lost")]
    F05CreateLost {
        /// Cut the connection mid-answer instead of never answering in time.
        #[serde(default)]
        cut: bool,
        /// How long the answer is held back (default: the fake's
        /// `create_hang_ms`).
        #[serde(default)]
        hold_ms: Option<u64>,
    },
    /// F6: stays `loading` for ever (a slow image pull).
    #[serde(rename = "f06_stuck_loading")]
    F06StuckLoading,
    /// F7: `running` with no SSH fields for `delay_ms`.
    #[serde(rename = "f07_ssh_late")]
    F07SshLate {
        /// How long after running the SSH fields appear.
        delay_ms: u64,
    },
    /// F8: no `ports["22/tcp"]`; only the proxy `ssh_host:ssh_port`.
    #[serde(rename = "f08_no_direct_port")]
    F08NoDirectPort,
    /// F9: the image cannot be pulled: `intended_status` flips to `stopped`.
    #[serde(rename = "f09_image_pull_failure")]
    F09ImagePullFailure,
    /// F10: `created` with an `OCI runtime create failed` message.
    #[serde(rename = "f10_oci_failure")]
    F10OciFailure,
    /// F11: `exited` `after_ms` after running (onstart or entrypoint died).
    #[serde(rename = "f11_exited")]
    F11Exited {
        /// Time from running to exited.
        after_ms: u64,
    },
    /// F12: the host goes `offline` `after_ms` after the create.
    #[serde(rename = "f12_offline")]
    F12Offline {
        /// Time from create to offline.
        after_ms: u64,
    },
    /// F13: outbid `after_ms` after the create: cur/intended/next `stopped`.
    #[serde(rename = "f13_outbid")]
    F13Outbid {
        /// Time from create to the interruption.
        after_ms: u64,
    },
    /// F14: the create errors *with* `new_contract`; the instance exists, stopped.
    #[serde(rename = "f14_insufficient_bid")]
    F14InsufficientBid,
    /// F15: answer 429 (a random one of the four body shapes, no `Retry-After`).
    #[serde(rename = "f15_rate_limit_storm")]
    F15RateLimitStorm,
    /// F19: the contract ends `after_ms` after the create (the instance stops)
    /// and the instance is deleted `delete_after_ms` later.
    #[serde(rename = "f19_contract_expiry")]
    F19ContractExpiry {
        /// Time from create to contract end.
        after_ms: u64,
        /// Time from contract end to deletion (Vast.ai: up to 48 h).
        delete_after_ms: u64,
    },
    /// F21: answer 502, 503 or 504 (`status` fixes one).
    #[serde(rename = "f21_server_error")]
    F21ServerError {
        /// The status; a seeded choice of 502/503/504 when absent.
        #[serde(default)]
        status: Option<u16>,
    },
}

impl Scenario {
    /// Whether it acts on every request (F15, F21) rather than on a create.
    pub fn is_request_level(&self) -> bool {
        matches!(
            self,
            Scenario::F15RateLimitStorm | Scenario::F21ServerError { .. }
        )
    }

    /// Parses the short form used in labels and env switches:
    /// `f07_ssh_late` or `f07_ssh_late:5000` (the number is the scenario's
    /// time parameter in ms; F19 takes `after:delete_after`).
    pub fn parse_short(text: &str) -> Option<Scenario> {
        let mut parts = text.trim().split(':');
        let name = parts.next()?.trim().to_ascii_lowercase();
        let first: Option<u64> = parts.next().and_then(|n| n.trim().parse().ok());
        let second: Option<u64> = parts.next().and_then(|n| n.trim().parse().ok());
        let ms = first.unwrap_or(0);
        let code = name.get(..3)?;
        Some(match code {
            "f01" => Scenario::F01HappyPath,
            "f02" => Scenario::F02OfferGone {
                status_410: ms == 410,
            },
            "f03" => Scenario::F03DoubleRent,
            "f04" => Scenario::F04CreateInvisible {
                delay_ms: first.unwrap_or(30_000),
            },
            "f05" => Scenario::F05CreateLost {
                cut: name.contains("cut"),
                hold_ms: first,
            },
            "f06" => Scenario::F06StuckLoading,
            "f07" => Scenario::F07SshLate {
                delay_ms: first.unwrap_or(12_000),
            },
            "f08" => Scenario::F08NoDirectPort,
            "f09" => Scenario::F09ImagePullFailure,
            "f10" => Scenario::F10OciFailure,
            "f11" => Scenario::F11Exited { after_ms: ms },
            "f12" => Scenario::F12Offline { after_ms: ms },
            "f13" => Scenario::F13Outbid { after_ms: ms },
            "f14" => Scenario::F14InsufficientBid,
            "f15" => Scenario::F15RateLimitStorm,
            "f19" => Scenario::F19ContractExpiry {
                after_ms: ms,
                delete_after_ms: second.unwrap_or(48 * 3_600_000),
            },
            "f21" => Scenario::F21ServerError {
                status: first.and_then(|s| u16::try_from(s).ok()),
            },
            _ => return None,
        })
    }
}

/// When a rule applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Every time.
    Always,
    /// Creates whose label contains this text (create-time scenarios only).
    LabelContains(String),
    /// With probability `numerator / denominator`, drawn from the fake's seed.
    Rate {
        /// Numerator.
        numerator: u64,
        /// Denominator (positive).
        denominator: u64,
    },
}

/// A scenario switch: `POST /_fake/scenario` takes one as JSON, e.g.
/// `{"scenario":{"kind":"f07_ssh_late","delay_ms":5000},"when":{"label_contains":"workers-1"},"times":1}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// What happens.
    pub scenario: Scenario,
    /// To which creates or requests.
    #[serde(default = "always")]
    pub when: When,
    /// Request-level scenarios: only this endpoint (any when absent).
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    /// Matching occurrences to let pass before the rule fires.
    #[serde(default)]
    pub skip: u32,
    /// How many times it fires; unlimited when absent.
    #[serde(default)]
    pub times: Option<u32>,
}

fn always() -> When {
    When::Always
}

impl Rule {
    /// A rule that always fires.
    pub fn always(scenario: Scenario) -> Rule {
        Rule {
            scenario,
            when: When::Always,
            endpoint: None,
            skip: 0,
            times: None,
        }
    }

    /// Fires at most `times` times.
    pub fn times(mut self, times: u32) -> Rule {
        self.times = Some(times);
        self
    }

    /// Only for `endpoint`.
    pub fn on(mut self, endpoint: Endpoint) -> Rule {
        self.endpoint = Some(endpoint);
        self
    }

    /// Lets `skip` matching occurrences pass first.
    pub fn after(mut self, skip: u32) -> Rule {
        self.skip = skip;
        self
    }

    /// Only when `when` holds.
    pub fn when(mut self, when: When) -> Rule {
        self.when = when;
        self
    }

    /// Whether the rule has firings left.
    pub fn live(&self) -> bool {
        self.times != Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_forms_and_json() {
        assert_eq!(
            Scenario::parse_short("f07_ssh_late:5000"),
            Some(Scenario::F07SshLate { delay_ms: 5000 })
        );
        assert_eq!(
            Scenario::parse_short("F06"),
            Some(Scenario::F06StuckLoading)
        );
        assert_eq!(Scenario::parse_short("f16"), None);
        let held = |hold_ms| Scenario::F05CreateLost {
            cut: false,
            hold_ms,
        };
        assert_eq!(Scenario::parse_short("f05_create_lost"), Some(held(None)));
        assert_eq!(
            Scenario::parse_short("f05_create_lost:600000"),
            Some(held(Some(600_000)))
        );
        let lost: Scenario =
            serde_json::from_str(r#"{"kind":"f05_create_lost","hold_ms":90000}"#).unwrap();
        assert_eq!(lost, held(Some(90_000)));
        let rule: Rule = serde_json::from_str(
            r#"{"scenario":{"kind":"f07_ssh_late","delay_ms":5000},"when":{"label_contains":"workers-1"},"times":1}"#,
        )
        .unwrap();
        assert_eq!(rule.when, When::LabelContains("workers-1".into()));
        assert_eq!(rule.times, Some(1));
        let storm: Rule = serde_json::from_str(
            r#"{"scenario":{"kind":"f15_rate_limit_storm"},"endpoint":"show_instance"}"#,
        )
        .unwrap();
        assert_eq!(storm.endpoint, Some(Endpoint::ShowInstance));
        assert!(storm.scenario.is_request_level());
    }
}
