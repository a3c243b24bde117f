//! The plan file text of a `RunPlan`: what `parse_str` reads back to the
//! same plan (a property test holds the two together).

use super::duration::format_duration;
use crate::provider::docker::container::GPUS_LABEL;
use crate::provider::static_hosts::hosts;
use core_fsm::plan::{ProviderKind, ReplacementPolicy, RunPlan, TimeoutPolicy};
use std::fmt::Write;

/// Writes `plan` as plan-file text.
pub fn to_string(plan: &RunPlan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "run_id = {}", plan.run_id.0);
    if let ReplacementPolicy::Bounded {
        attempts_max,
        backoff_base,
        backoff_max,
        quarantine_after_failures,
    } = plan.replacement
    {
        out.push_str("\n[replacement]\npolicy = \"bounded\"\n");
        let _ = writeln!(out, "attempts_max = {attempts_max}");
        let _ = writeln!(out, "backoff_base = \"{}\"", format_duration(backoff_base));
        let _ = writeln!(out, "backoff_max = \"{}\"", format_duration(backoff_max));
        let _ = writeln!(
            out,
            "quarantine_after_failures = {quarantine_after_failures}"
        );
    }
    for group in &plan.groups {
        out.push_str("\n[[group]]\n");
        let _ = writeln!(out, "name = {}", quote(group.group_id.as_str()));
        let _ = writeln!(out, "role = {}", quote(group.role.as_str()));
        let _ = writeln!(out, "count = {}", group.count);
        let _ = writeln!(out, "provider = \"{}\"", provider_name(group.provider));
        write_shape(&mut out, &group.shape);
        let boot = &group.boot;
        out.push_str("\n[group.boot]\n");
        let _ = writeln!(out, "ssh_user = {}", quote(&boot.ssh_user));
        let _ = writeln!(out, "verify_commands = {}", list(&boot.verify_commands));
        let _ = writeln!(out, "start_command = {}", quote(&boot.start_command));
        let _ = writeln!(out, "stdout_sources = {}", list(&boot.stdout_sources));
        let _ = writeln!(out, "stderr_sources = {}", list(&boot.stderr_sources));
        write_timeouts(&mut out, &boot.timeouts);
        out.push_str("\n[group.join]\n");
        let _ = writeln!(
            out,
            "orchestrator_addr = {}",
            quote(&group.join.orchestrator_addr)
        );
        let _ = writeln!(
            out,
            "join_token_ref = {}",
            quote(&group.join.join_token_ref)
        );
        write_hosts(&mut out, &group.shape);
    }
    out
}

fn write_shape(out: &mut String, shape: &core_fsm::plan::DesiredShape) {
    out.push_str("\n[group.shape]\n");
    let _ = writeln!(out, "image = {}", quote(&shape.image));
    let _ = writeln!(out, "disk_gb = {}", shape.disk_gb);
    if let Some(gpu) = &shape.gpu_name {
        let _ = writeln!(out, "gpu_name = {}", quote(gpu));
    }
    let integers = [
        ("min_gpu_ram_mb", shape.min_gpu_ram_mb),
        ("min_down_mbps", shape.min_down_mbps.map(u64::from)),
        ("min_up_mbps", shape.min_up_mbps.map(u64::from)),
    ];
    for (key, value) in integers {
        if let Some(value) = value {
            let _ = writeln!(out, "{key} = {value}");
        }
    }
    let decimals = [
        ("min_reliability", shape.min_reliability_per_mille, 1000),
        ("min_compute_capability", shape.min_compute_capability, 100),
        (
            "max_price_usd_per_hour",
            shape.max_price_cents_per_hour,
            100,
        ),
    ];
    for (key, value, scale) in decimals {
        if let Some(value) = value {
            let _ = writeln!(out, "{key} = {}", decimal(value, scale));
        }
    }
    let _ = writeln!(out, "require_verified = {}", shape.require_verified);
    if let Some(gpus) = shape.provider_labels.get(GPUS_LABEL) {
        let _ = writeln!(out, "gpus = {}", quote(gpus));
    }
    // Static hosts are written as `[[group.host]]` tables, and a docker
    // group's GPUs as `gpus`, not as labels.
    let labels: Vec<_> = shape
        .provider_labels
        .iter()
        .filter(|(key, _)| !key.starts_with(hosts::LABEL_PREFIX) && *key != GPUS_LABEL)
        .collect();
    if !labels.is_empty() {
        out.push_str("\n[group.shape.provider_labels]\n");
        for (key, value) in labels {
            let _ = writeln!(out, "{} = {}", quote(key), quote(value));
        }
    }
}

fn write_hosts(out: &mut String, shape: &core_fsm::plan::DesiredShape) {
    // A plan that did not come from a file may hold unreadable labels; they
    // are written as they are (and the reader will say what is wrong).
    let Ok(hosts) = hosts::from_labels(&shape.provider_labels) else {
        return;
    };
    for host in hosts {
        out.push_str("\n[[group.host]]\n");
        let _ = writeln!(out, "host = {}", quote(&host.host));
        let _ = writeln!(out, "port = {}", host.port);
        let _ = writeln!(out, "user = {}", quote(&host.user));
        let _ = writeln!(out, "key_file = {}", quote(&host.key_file));
    }
}

fn write_timeouts(out: &mut String, t: &TimeoutPolicy) {
    out.push_str("\n[group.boot.timeouts]\n");
    let all = t.named();
    for (key, value) in all {
        let _ = writeln!(out, "{key} = \"{}\"", format_duration(value));
    }
}

fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Local => "local",
        ProviderKind::Static => "static",
        ProviderKind::Docker => "docker",
        ProviderKind::Vastai => "vastai",
    }
}

/// `value / scale` as an exact decimal: 980/1000 is `0.98`, 45/100 `0.45`,
/// 7/1 `7.0` (always with a point, so it reads as the same number).
fn decimal(value: u32, scale: u32) -> String {
    let digits = scale.ilog10() as usize;
    let whole = value / scale;
    let fraction = value % scale;
    let fraction = format!("{fraction:0digits$}");
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{whole}.0")
    } else {
        format!("{whole}.{fraction}")
    }
}

/// A TOML basic string: quotes, backslashes and control characters escaped.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn list(items: &[impl AsRef<str>]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal(980, 1000), "0.98");
        assert_eq!(decimal(1000, 1000), "1.0");
        assert_eq!(decimal(5, 1000), "0.005");
        assert_eq!(decimal(860, 100), "8.6");
        assert_eq!(decimal(45, 100), "0.45");
    }
}
