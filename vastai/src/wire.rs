//! Tolerant readers of Vast.ai's JSON. Real responses vary between versions
//! (numbers sent as strings, fields missing or `null`, `msg` vs `message` vs
//! `detail`), so the client reads fields one by one instead of failing a whole
//! response on one odd field.

use serde_json::Value;

/// A string field; numbers are rendered, anything else is `None`.
pub fn str_field(value: &Value, key: &str) -> Option<String> {
    match value.get(key)? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// An unsigned integer field; numeric strings and integral floats count.
pub fn u64_field(value: &Value, key: &str) -> Option<u64> {
    as_u64(value.get(key)?)
}

/// A float field; numeric strings count.
pub fn f64_field(value: &Value, key: &str) -> Option<f64> {
    match value.get(key)? {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// A boolean field; `0`/`1` count.
pub fn bool_field(value: &Value, key: &str) -> Option<bool> {
    match value.get(key)? {
        Value::Bool(flag) => Some(*flag),
        Value::Number(number) => number.as_u64().map(|n| n != 0),
        _ => None,
    }
}

/// An unsigned integer from a JSON number or numeric string.
pub fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Number(number) => number.as_u64().or_else(|| {
            number
                .as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        }),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// One instance as show-instance or list-instances reports it (§A.5).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceView {
    /// The instance (contract) id.
    pub id: Option<u64>,
    /// Container status; `None` while the contract is being created.
    pub actual_status: Option<String>,
    /// What Vast.ai is trying to do (`running`/`stopped`).
    pub intended_status: Option<String>,
    /// Contract state now.
    pub cur_state: Option<String>,
    /// Contract state next.
    pub next_state: Option<String>,
    /// Free text; carries image-pull and OCI errors.
    pub status_msg: Option<String>,
    /// The label set at create time.
    pub label: Option<String>,
    /// Proxy SSH host (`ssh2281.vast.ai`).
    pub ssh_host: Option<String>,
    /// Proxy SSH port.
    pub ssh_port: Option<u16>,
    /// The host's public address (direct SSH).
    pub public_ipaddr: Option<String>,
    /// The host port mapped to the container's `22/tcp` (direct SSH).
    pub direct_ssh_port: Option<u16>,
    /// The physical machine.
    pub machine_id: Option<u64>,
    /// The host (owner account).
    pub host_id: Option<u64>,
    /// Whether it is an interruptible (bid) instance.
    pub is_bid: Option<bool>,
    /// Price, dollars per hour.
    pub dph_total: Option<f64>,
    /// GPU model.
    pub gpu_name: Option<String>,
}

impl InstanceView {
    /// Reads an instance object.
    pub fn from_value(value: &Value) -> InstanceView {
        InstanceView {
            id: u64_field(value, "id"),
            actual_status: str_field(value, "actual_status"),
            intended_status: str_field(value, "intended_status"),
            cur_state: str_field(value, "cur_state"),
            next_state: str_field(value, "next_state"),
            status_msg: str_field(value, "status_msg"),
            label: str_field(value, "label"),
            ssh_host: str_field(value, "ssh_host").filter(|h| !h.is_empty()),
            ssh_port: u64_field(value, "ssh_port").and_then(|p| u16::try_from(p).ok()),
            public_ipaddr: str_field(value, "public_ipaddr")
                .map(|ip| ip.trim().to_owned())
                .filter(|ip| !ip.is_empty()),
            direct_ssh_port: direct_port(value, "22/tcp"),
            machine_id: u64_field(value, "machine_id"),
            host_id: u64_field(value, "host_id"),
            is_bid: bool_field(value, "is_bid"),
            dph_total: f64_field(value, "dph_total"),
            gpu_name: str_field(value, "gpu_name"),
        }
    }
}

/// The first host port Docker-style `ports` maps `container_port` to:
/// `{"22/tcp":[{"HostIp":"0.0.0.0","HostPort":"40022"}]}`. `ports`, the key
/// or the list may each be missing or `null` (§A.5: "may be None").
pub fn direct_port(instance: &Value, container_port: &str) -> Option<u16> {
    let bindings = instance.get("ports")?.get(container_port)?.as_array()?;
    bindings
        .iter()
        .filter_map(|binding| binding.get("HostPort").and_then(as_u64))
        .find_map(|port| u16::try_from(port).ok().filter(|p| *p != 0))
}

/// A Vast.ai error answer, from any of its shapes: the JSON envelope
/// (`error`, `msg`/`message`/`detail`) or plain text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorBody {
    /// The machine-readable code (`no_such_ask`, `auth_error`), if any.
    pub error: Option<String>,
    /// The human message, or the plain-text body.
    pub msg: String,
    /// `success` as sent, if sent.
    pub success: Option<bool>,
    /// A contract id carried by an error (insufficient bid, F14).
    pub new_contract: Option<u64>,
}

impl ErrorBody {
    /// Reads a response body; never fails.
    pub fn parse(body: &str) -> ErrorBody {
        match serde_json::from_str::<Value>(body) {
            Ok(value) if value.is_object() => ErrorBody {
                error: str_field(&value, "error"),
                msg: ["msg", "message", "detail"]
                    .iter()
                    .find_map(|key| str_field(&value, key))
                    .unwrap_or_default(),
                success: bool_field(&value, "success"),
                new_contract: u64_field(&value, "new_contract"),
            },
            _ => ErrorBody {
                msg: body.trim().chars().take(300).collect(),
                ..ErrorBody::default()
            },
        }
    }

    /// Whether this is the auth failure Vast.ai sends for a bad or revoked key
    /// (often as a 404, F17).
    pub fn is_auth_error(&self) -> bool {
        self.error.as_deref() == Some("auth_error") || self.msg.contains("Invalid user key")
    }

    /// `error` and `msg` in one line, for people.
    pub fn summary(&self) -> String {
        match &self.error {
            Some(code) if !self.msg.is_empty() => format!("{code}: {}", self.msg),
            Some(code) => code.clone(),
            None => self.msg.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn instance_view_tolerates_odd_types() {
        let value = json!({
            "id": "27351986", "actual_status": "running", "ssh_port": "10882",
            "ssh_host": "ssh5.vast.ai", "public_ipaddr": "203.0.113.42 ",
            "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "40022"}], "7447/udp": null},
            "is_bid": 0, "machine_id": 41233.0, "dph_total": "0.33"
        });
        let view = InstanceView::from_value(&value);
        assert_eq!(view.id, Some(27351986));
        assert_eq!(view.ssh_port, Some(10882));
        assert_eq!(view.direct_ssh_port, Some(40022));
        assert_eq!(view.public_ipaddr.as_deref(), Some("203.0.113.42"));
        assert_eq!(view.is_bid, Some(false));
        assert_eq!(view.machine_id, Some(41233));
        assert_eq!(view.dph_total, Some(0.33));
        assert_eq!(
            direct_port(&json!({"ports": {"22/tcp": null}}), "22/tcp"),
            None
        );
        assert_eq!(direct_port(&json!({"ports": null}), "22/tcp"), None);
    }

    #[test]
    fn error_body_shapes() {
        let detail =
            ErrorBody::parse(r#"{"detail":"API requests too frequent endpoint threshold=4.5"}"#);
        assert_eq!(
            detail.msg,
            "API requests too frequent endpoint threshold=4.5"
        );
        let text = ErrorBody::parse("API requests too frequent");
        assert_eq!(text.msg, "API requests too frequent");
        let auth = ErrorBody::parse(r#"{"error":"auth_error","msg":"Invalid user key"}"#);
        assert!(auth.is_auth_error());
        let bid = ErrorBody::parse(
            r#"{"success":false,"error":"invalid_price","message":"low","new_contract":9}"#,
        );
        assert_eq!(
            (bid.new_contract, bid.msg.as_str(), bid.success),
            (Some(9), "low", Some(false))
        );
    }
}
