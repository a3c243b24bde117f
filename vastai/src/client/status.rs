//! Status classification: what one show-instance answer means for drover
//! (§A.5 of `shared/reference/vastai-api.md`). A pure function of the
//! instance view, so the table in `spec/vastai.md` is tested row by row.

use crate::wire::InstanceView;
use core_fsm::port::{EndpointStatus, SshEndpoint};
use serde::{Deserialize, Serialize};

/// Which SSH endpoint to use when an instance publishes both (§A.5, §A.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SshRoute {
    /// `public_ipaddr:ports["22/tcp"]` when mapped, else `ssh_host:ssh_port`
    /// (the official CLI's choice).
    PreferDirect,
    /// `ssh_host:ssh_port` when published, else the direct mapping (the SDK's).
    PreferProxy,
    /// Only the proxy gateway.
    ProxyOnly,
    /// Only the direct mapping.
    DirectOnly,
}

/// Why an instance will never become reachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// The image could not be pulled (manifest missing, access denied).
    ImagePull,
    /// The container runtime could not create the container.
    OciRuntime,
    /// The container exited (entrypoint or onstart died, port bind lost).
    Exited,
    /// The host disconnected from Vast.ai.
    Offline,
    /// An interruptible instance was outbid and paused.
    Outbid,
    /// An interruptible create's bid was too low; the instance was made stopped.
    InsufficientBid,
    /// Vast.ai stopped it (contract ended, stopped, frozen).
    Stopped,
}

impl FailureReason {
    /// Every reason, in a fixed order.
    pub const ALL: [FailureReason; 7] = [
        FailureReason::ImagePull,
        FailureReason::OciRuntime,
        FailureReason::Exited,
        FailureReason::Offline,
        FailureReason::Outbid,
        FailureReason::InsufficientBid,
        FailureReason::Stopped,
    ];

    /// The code that starts `EndpointStatus::Failed.reason` (`image_pull`).
    pub fn code(self) -> &'static str {
        match self {
            FailureReason::ImagePull => "image_pull",
            FailureReason::OciRuntime => "oci_runtime",
            FailureReason::Exited => "exited",
            FailureReason::Offline => "offline",
            FailureReason::Outbid => "outbid",
            FailureReason::InsufficientBid => "insufficient_bid",
            FailureReason::Stopped => "stopped",
        }
    }

    /// The typed reason back from a `Failed.reason` text (`code: detail`).
    pub fn from_reason_text(text: &str) -> Option<FailureReason> {
        let code = text.split(':').next()?.trim();
        FailureReason::ALL.into_iter().find(|r| r.code() == code)
    }
}

/// What one look at an instance says, with a typed failure reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Not reachable yet; poll again.
    Pending {
        /// Vast.ai's status words.
        detail: String,
    },
    /// Reachable over SSH.
    Ready(SshEndpoint),
    /// Never going to be reachable.
    Failed {
        /// Why, typed.
        reason: FailureReason,
        /// Vast.ai's words.
        detail: String,
    },
    /// Vast.ai no longer knows the instance.
    Gone,
}

impl Observation {
    /// The port-level status; a failure's reason reads `code: detail`.
    pub fn into_endpoint_status(self) -> EndpointStatus {
        match self {
            Observation::Pending { detail } => EndpointStatus::Pending { detail },
            Observation::Ready(endpoint) => EndpointStatus::Ready(endpoint),
            Observation::Failed { reason, detail } => EndpointStatus::Failed {
                reason: format!("{}: {detail}", reason.code()),
            },
            Observation::Gone => EndpointStatus::Gone,
        }
    }
}

/// Classifies one instance view (the table in `spec/vastai.md`).
pub fn classify(view: &InstanceView, route: SshRoute, ssh_user: &str) -> Observation {
    let msg = view.status_msg.clone().unwrap_or_default();
    let actual = view.actual_status.as_deref().unwrap_or("").trim();
    let failed = |reason, detail: String| Observation::Failed { reason, detail };
    // Checked first: an outbid instance may report any container status.
    if is_state(&view.cur_state, "stopped")
        && is_state(&view.intended_status, "stopped")
        && is_state(&view.next_state, "stopped")
    {
        let reason = if view.is_bid == Some(false) {
            FailureReason::Stopped
        } else {
            FailureReason::Outbid
        };
        return failed(reason, describe(actual, &msg));
    }
    if actual != "running" {
        if is_oci_failure(&msg) {
            return failed(FailureReason::OciRuntime, msg);
        }
        if is_pull_failure(&msg) {
            return failed(FailureReason::ImagePull, msg);
        }
    }
    let stopping = is_state(&view.intended_status, "stopped");
    match actual {
        "" => Observation::Pending {
            detail: describe("creating", &msg),
        },
        "exited" => failed(FailureReason::Exited, describe(actual, &msg)),
        "offline" => failed(FailureReason::Offline, describe(actual, &msg)),
        "stopped" | "frozen" => failed(FailureReason::Stopped, describe(actual, &msg)),
        _ if stopping => failed(
            FailureReason::Stopped,
            describe(&format!("{actual}, intended stopped"), &msg),
        ),
        "running" => match pick_endpoint(view, route) {
            Some((host, port)) => Observation::Ready(SshEndpoint {
                host: host.into(),
                port,
                user: ssh_user.into(),
            }),
            None => Observation::Pending {
                detail: describe("running, SSH endpoint not published yet", &msg),
            },
        },
        // created, loading, scheduling, restarting, rebooting, unknown, and
        // any status Vast.ai adds later: wait (the node manager's endpoint
        // timeout bounds the wait).
        other => Observation::Pending {
            detail: describe(other, &msg),
        },
    }
}

/// The SSH endpoint `route` picks from a view, if one is published.
pub fn pick_endpoint(view: &InstanceView, route: SshRoute) -> Option<(String, u16)> {
    let direct = match (&view.public_ipaddr, view.direct_ssh_port) {
        (Some(ip), Some(port)) => Some((ip.clone(), port)),
        _ => None,
    };
    let proxy = match (&view.ssh_host, view.ssh_port) {
        (Some(host), Some(port)) if port != 0 => Some((host.clone(), port)),
        _ => None,
    };
    match route {
        SshRoute::PreferDirect => direct.or(proxy),
        SshRoute::PreferProxy => proxy.or(direct),
        SshRoute::ProxyOnly => proxy,
        SshRoute::DirectOnly => direct,
    }
}

fn is_state(state: &Option<String>, want: &str) -> bool {
    state.as_deref().map(str::trim) == Some(want)
}

fn describe(status: &str, msg: &str) -> String {
    if msg.trim().is_empty() {
        status.to_owned()
    } else {
        format!("{status} ({})", msg.trim())
    }
}

/// The container runtime failed (§A.12 F10).
pub fn is_oci_failure(msg: &str) -> bool {
    msg.contains("OCI runtime")
}

/// The image could not be pulled (§A.5 `status_msg` examples, F9).
pub fn is_pull_failure(msg: &str) -> bool {
    let lower = msg.to_ascii_lowercase();
    (lower.contains("manifest") && (lower.contains("not found") || lower.contains("unknown")))
        || lower.contains("pull access denied")
        || lower.contains("unauthorized: authentication required")
        || lower.contains("repository does not exist")
        || lower.contains("error pulling image")
        || lower.contains("docker_build() error")
}
