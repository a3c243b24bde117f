//! The fake's instances and what Vast.ai says about them: a pure function
//! of the instance, its scenario and the fake clock.

use super::Timings;
use super::backend::{MachineAddr, MachineSpec};
use super::catalog::OfferSpec;
use super::scenario::{Rule, Scenario, When};
use crate::limits::Endpoint;
use core_fsm::rng::DetRng;
use serde_json::{Value, json};

/// Epoch seconds of fake time 0 (2026-01-01).
pub const EPOCH_BASE_S: u64 = 1_767_225_600;

/// The machine behind an instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Machine {
    Starting,
    Up(MachineAddr),
    Failed(String),
}

/// One fake instance.
#[derive(Clone, Debug)]
pub(crate) struct FakeInstance {
    pub id: u64,
    pub offer: OfferSpec,
    pub label: String,
    pub image: String,
    pub onstart: String,
    pub extra_env: Vec<(String, String)>,
    pub runtype: String,
    pub disk_gb: u64,
    pub price: Option<f64>,
    pub created_ms: u64,
    pub contract_ms: u64,
    pub scenario: Option<Scenario>,
    pub double_rent_loser: bool,
    pub insufficient_bid: bool,
    pub destroyed: bool,
    pub user_stopped: bool,
    pub machine: Machine,
    pub authorized_keys: Vec<String>,
    pub stop_sent: bool,
}

/// What Vast.ai says about an instance at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Status {
    pub actual: Option<&'static str>,
    pub intended: &'static str,
    pub cur: &'static str,
    pub next: &'static str,
    pub msg: String,
    pub ssh: bool,
    pub direct: bool,
}

impl Status {
    fn plain(actual: Option<&'static str>, msg: impl Into<String>) -> Status {
        Status {
            actual,
            intended: "running",
            cur: "running",
            next: "running",
            msg: msg.into(),
            ssh: false,
            direct: false,
        }
    }

    fn stopped(msg: impl Into<String>) -> Status {
        Status {
            actual: Some("stopped"),
            intended: "stopped",
            cur: "stopped",
            next: "stopped",
            msg: msg.into(),
            ssh: false,
            direct: false,
        }
    }

    /// A state from which the machine is never coming back.
    pub fn terminal(&self) -> bool {
        matches!(self.actual, Some("exited" | "offline" | "stopped"))
    }
}

const PULL_ERRORS: [&str; 3] = [
    "Error response from daemon: manifest for vastai/test:self-test-cuda-99 not found",
    "pull access denied for private/image, repository does not exist or may require authorization",
    "unauthorized: authentication required",
];

impl FakeInstance {
    /// What Vast.ai says now; `None` when the instance is invisible or gone.
    pub fn status(&self, now_ms: u64, t: &Timings) -> Option<Status> {
        if self.destroyed {
            return None;
        }
        let age = now_ms.saturating_sub(self.created_ms);
        let scenario = self.scenario.as_ref();
        if let Some(Scenario::F04CreateInvisible { delay_ms }) = scenario
            && age < *delay_ms
        {
            return None;
        }
        if self.insufficient_bid {
            return Some(Status::stopped("bid below the offer's minimum bid"));
        }
        if self.user_stopped {
            return Some(Status::stopped(""));
        }
        if let Some(late) = self.late_event(age, scenario) {
            return late;
        }
        let loading_at = t.creating_ms + t.created_ms;
        let running_at = loading_at + t.loading_ms;
        if age < t.creating_ms {
            return Some(Status::plain(None, ""));
        }
        match scenario {
            Some(Scenario::F10OciFailure) => {
                return Some(Status::plain(
                    Some("created"),
                    "Error: container failed to start: OCI runtime create failed: runc create failed: unable to start container process",
                ));
            }
            Some(Scenario::F09ImagePullFailure) if age >= loading_at => {
                let mut status = Status::plain(
                    Some(if self.id & 1 == 0 {
                        "loading"
                    } else {
                        "created"
                    }),
                    PULL_ERRORS[(self.id % 3) as usize],
                );
                status.intended = "stopped";
                return Some(status);
            }
            _ => {}
        }
        if age < loading_at {
            return Some(Status::plain(Some("created"), ""));
        }
        if age < running_at || matches!(scenario, Some(Scenario::F06StuckLoading)) {
            return Some(Status::plain(
                Some("loading"),
                format!("Pulling image {}", self.image),
            ));
        }
        self.running_status(age, running_at, t)
    }

    /// Events that override the timeline once their time has come (F12, F13, F19).
    fn late_event(&self, age: u64, scenario: Option<&Scenario>) -> Option<Option<Status>> {
        match scenario? {
            Scenario::F12Offline { after_ms } if age >= *after_ms => Some(Some(Status::plain(
                Some("offline"),
                "machine disconnected from Vast servers",
            ))),
            Scenario::F13Outbid { after_ms } if age >= *after_ms => Some(Some(Status::stopped(""))),
            Scenario::F19ContractExpiry {
                after_ms,
                delete_after_ms,
            } if age >= *after_ms => {
                if age >= after_ms.saturating_add(*delete_after_ms) {
                    Some(None)
                } else {
                    Some(Some(Status::stopped("contract ended")))
                }
            }
            _ => None,
        }
    }

    fn running_status(&self, age: u64, running_at: u64, t: &Timings) -> Option<Status> {
        let scenario = self.scenario.as_ref();
        match &self.machine {
            Machine::Starting => return Some(Status::plain(Some("loading"), "starting container")),
            Machine::Failed(e) => {
                return Some(Status::plain(
                    Some("exited"),
                    format!("container failed to start: {e}"),
                ));
            }
            Machine::Up(_) => {}
        }
        if self.double_rent_loser || matches!(scenario, Some(Scenario::F03DoubleRent)) {
            return Some(Status::plain(
                Some("exited"),
                format!(
                    "Error response from daemon: driver failed programming external connectivity on endpoint C.{}: Bind for 0.0.0.0:40022 failed: port is already allocated",
                    self.id
                ),
            ));
        }
        if let Some(Scenario::F11Exited { after_ms }) = scenario
            && age >= running_at.saturating_add(*after_ms)
        {
            return Some(Status::plain(
                Some("exited"),
                "container exited with code 1",
            ));
        }
        let late = match scenario {
            Some(Scenario::F07SshLate { delay_ms }) => *delay_ms,
            _ => 0,
        };
        let mut status = Status::plain(
            Some("running"),
            format!("success, running {}/ssh", self.image),
        );
        status.ssh = age >= running_at + t.ssh_after_running_ms + late;
        status.direct = !matches!(scenario, Some(Scenario::F08NoDirectPort));
        Some(status)
    }

    /// The instance as show-instance and list-instances send it (§A.5).
    pub fn render(&self, status: &Status, now_ms: u64) -> Value {
        let start = EPOCH_BASE_S + self.created_ms / 1000;
        let contract_s = match &self.scenario {
            Some(Scenario::F19ContractExpiry { after_ms, .. }) => after_ms / 1000,
            _ => self.contract_ms / 1000,
        };
        let addr = match &self.machine {
            Machine::Up(addr) if status.ssh => Some(addr),
            _ => None,
        };
        let ports = match addr {
            Some(addr) if status.direct => {
                json!({"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": addr.direct.1.to_string()}]})
            }
            // F8 in both shapes seen in the wild: the key missing, or null.
            Some(_) if self.id & 1 == 0 => {
                json!({"8080/tcp": [{"HostIp": "0.0.0.0", "HostPort": "48080"}]})
            }
            Some(_) => json!({"22/tcp": null}),
            None => Value::Null,
        };
        let dph = self
            .price
            .unwrap_or(self.offer.dph_base + self.disk_gb as f64 * self.offer.storage_cost / 720.0);
        json!({
            "id": self.id, "machine_id": self.offer.machine_id, "host_id": self.offer.host_id,
            "bundle_id": self.offer.id * 50, "actual_status": status.actual,
            "intended_status": status.intended, "cur_state": status.cur, "next_state": status.next,
            "status_msg": status.msg, "label": self.label, "image_uuid": self.image,
            "image_runtype": format!("ssh {}", self.runtype), "image_args": [], "onstart": self.onstart,
            "extra_env": self.extra_env.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "ssh_host": addr.map(|a| a.proxy.0.clone()), "ssh_port": addr.map(|a| a.proxy.1),
            "ssh_idx": addr.map(|_| "5"),
            "public_ipaddr": addr.map_or_else(|| "203.0.113.42".to_owned(), |a| a.direct.0.clone()),
            "ports": ports, "direct_port_start": 40000, "direct_port_end": 40099,
            "local_ipaddrs": "10.2.202.31 172.17.0.1 \n",
            "start_date": start as f64, "end_date": (start + contract_s) as f64,
            "duration": contract_s as f64,
            "uptime_mins": if status.actual == Some("running") { now_ms.saturating_sub(self.created_ms) / 60_000 } else { 0 },
            "dph_total": dph, "dph_base": self.offer.dph_base, "storage_cost": self.offer.storage_cost,
            "is_bid": self.price.is_some(), "min_bid": self.offer.min_bid,
            "gpu_name": self.offer.gpu_name, "num_gpus": self.offer.num_gpus, "gpu_ram": self.offer.gpu_ram_mb,
            "gpu_util": null, "gpu_temp": null, "cpu_util": null, "mem_usage": null, "disk_usage": null,
            "disk_space": self.disk_gb, "reliability2": self.offer.reliability, "cuda_max_good": 12.8,
            "driver_version": "570.124.04", "geolocation": self.offer.geolocation,
        })
    }

    /// Whether the instance still holds its offer: not destroyed, not in a
    /// terminal state, not deleted (an F4 instance is live while invisible).
    pub fn is_live(&self, now_ms: u64, t: &Timings) -> bool {
        match self.status(now_ms, t) {
            Some(status) => !status.terminal(),
            None => {
                !self.destroyed
                    && matches!(self.scenario, Some(Scenario::F04CreateInvisible { .. }))
            }
        }
    }

    /// What the backend is asked to start.
    pub fn machine_spec(&self) -> MachineSpec {
        MachineSpec {
            instance_id: self.id,
            label: self.label.clone(),
            image: self.image.clone(),
            onstart: self.onstart.clone(),
            env: self
                .extra_env
                .iter()
                .filter(|(k, _)| !k.starts_with('-'))
                .cloned()
                .collect(),
            authorized_keys: self.authorized_keys.clone(),
            disk_gb: self.disk_gb,
        }
    }
}

/// The rule-matching state shared by create-time and request-level rules.
pub(crate) fn fire(
    rules: &mut [Rule],
    rng: &mut DetRng,
    label: Option<&str>,
    endpoint: Option<Endpoint>,
) -> Option<Scenario> {
    for rule in rules.iter_mut().filter(|r| r.live()) {
        let level_ok = match endpoint {
            Some(e) => {
                rule.scenario.is_request_level() && rule.endpoint.is_none_or(|want| want == e)
            }
            None => !rule.scenario.is_request_level(),
        };
        let when_ok = match &rule.when {
            When::Always => true,
            When::LabelContains(text) => label.is_some_and(|l| l.contains(text.as_str())),
            When::Rate {
                numerator,
                denominator,
            } => *denominator > 0 && rng.ratio(*numerator, *denominator),
        };
        if !(level_ok && when_ok) {
            continue;
        }
        if rule.skip > 0 {
            rule.skip -= 1;
            continue;
        }
        if let Some(times) = rule.times.as_mut() {
            *times -= 1;
        }
        return Some(rule.scenario.clone());
    }
    None
}
