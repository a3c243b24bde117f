//! A static group's `[[group.host]]`: the machines read, one per node,
//! and checked per group and across the plan.

use crate::plan_toml::reader::{Doc, Value};
use crate::provider::static_hosts::hosts::{self, StaticHost};
use core_fsm::ids::LeaseId;
use core_fsm::plan::{DesiredShape, NodeGroupSpec, ProviderKind};
use std::collections::BTreeMap;
use toml::de::DeValue;

const HOST: &[&str] = &["host", "port", "user", "key_file"];

/// `[[group.host]]`: the machines of a static group, one per node; `None`
/// when it is not a list of tables (reported; nothing more to check).
pub(super) fn read_hosts(
    doc: &mut Doc,
    path: &str,
    value: &Value<'_>,
    user: &str,
) -> Option<Vec<StaticHost>> {
    let DeValue::Array(items) = value.get_ref() else {
        let reason = "expected [[group.host]] tables, found a single table or value";
        doc.error(value.span(), path, reason);
        return None;
    };
    let mut hosts = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let Some(mut table) = doc.table(&path, item, HOST) else {
            continue;
        };
        let host = table.string(doc, "host", true).unwrap_or_default();
        let port = table.integer(doc, "port", false, u64::from(u16::MAX));
        let user = table.string(doc, "user", false).unwrap_or(user.to_owned());
        let key_file = table.string(doc, "key_file", true).unwrap_or_default();
        for (key, text) in [("host", &host), ("user", &user)] {
            let field = format!("{path}.{key}");
            // A user defaulted from boot.ssh_user is checked there.
            if let Some(span) = doc.spans.get(&field).cloned()
                && let Err(reason) = hosts::check_name(key, text)
            {
                doc.error(span, &field, reason);
            }
        }
        if port == Some(0) {
            let field = format!("{path}.port");
            let span = doc.spans[&field].clone();
            doc.error(span, &field, "must be 1..=65535");
        }
        if key_file.trim().is_empty() && doc.spans.contains_key(&format!("{path}.key_file")) {
            let field = format!("{path}.key_file");
            let span = doc.spans[&field].clone();
            doc.error(span, &field, "must not be empty");
        }
        table.finish(doc);
        hosts.push(StaticHost {
            host,
            port: port
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(hosts::DEFAULT_PORT),
            user,
            key_file,
        });
    }
    Some(hosts)
}

/// A static group lists one host per node; no other group lists any; the
/// labels `[[group.host]]` becomes are not written by hand.
pub(super) fn check_hosts(
    doc: &mut Doc,
    path: &str,
    (provider, count): (ProviderKind, u32),
    hosts: Option<&[StaticHost]>,
    shape: &DesiredShape,
) {
    for key in shape.provider_labels.keys() {
        if key.starts_with(hosts::LABEL_PREFIX) {
            let field = format!("{path}.shape.provider_labels.{key}");
            let span = doc.spans.get(&field).cloned().unwrap_or(0..0);
            doc.error(
                span,
                &field,
                "reserved: list static hosts as [[group.host]]",
            );
        }
    }
    let host_path = format!("{path}.host");
    match (provider, hosts) {
        (ProviderKind::Static, None) => {
            let span = doc.spans.get(path).cloned().unwrap_or(0..0);
            let reason = "missing field `host`: a static group lists one [[group.host]] per node";
            doc.error(span, &host_path, reason);
        }
        (ProviderKind::Static, Some(hosts)) if hosts.len() != count as usize => {
            let field = format!("{path}.count");
            let span = doc.spans.get(&field).cloned().unwrap_or(0..0);
            let reason = format!(
                "a static group has one [[group.host]] per node; {} listed",
                hosts.len()
            );
            doc.error(span, &field, reason);
        }
        (ProviderKind::Static, Some(_)) | (_, None) => {}
        (_, Some(_)) => {
            let span = doc.spans[&host_path].clone();
            doc.error(span, &host_path, "only a static group lists hosts");
        }
    }
}

/// No machine is listed twice in the plan (its lease id would be shared).
pub(crate) fn check_unique_hosts(doc: &mut Doc, groups: &[NodeGroupSpec]) {
    let mut seen: BTreeMap<LeaseId, String> = BTreeMap::new();
    for (g, group) in groups.iter().enumerate() {
        let Ok(hosts) = hosts::from_labels(&group.shape.provider_labels) else {
            continue;
        };
        for (h, host) in hosts.iter().enumerate() {
            let field = format!("group[{g}].host[{h}]");
            if let Some(first) = seen.insert(host.lease_id(), field.clone()) {
                let span = doc.spans.get(&field).cloned().unwrap_or(0..0);
                let reason = format!("{host} is listed twice (first at {first})");
                doc.error(span, &field, reason);
            }
        }
    }
}
