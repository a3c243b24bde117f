//! The machines of a `static` group: one [`StaticHost`] per node, listed in
//! the plan file as `[[group.host]]` tables and carried in the `RunPlan` as
//! provider labels (`static.host.<i>` = `user@host:port`,
//! `static.key_file.<i>` = the private key's path), so the core's plan type
//! needs no provider-specific field.

use core_fsm::ids::{LeaseId, LogicalNodeId};
use core_fsm::plan::{NodeGroupSpec, ProviderKind, RunPlan, node_id};
use std::collections::BTreeMap;
use std::fmt;

/// The label prefix reserved for static hosts.
pub const LABEL_PREFIX: &str = "static.";
/// The SSH port when the plan names none.
pub const DEFAULT_PORT: u16 = 22;

/// One machine the user already has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticHost {
    /// Host name or IP address (no brackets).
    pub host: String,
    /// The SSH port.
    pub port: u16,
    /// The SSH user.
    pub user: String,
    /// The private key drover signs in with (OpenSSH format, unencrypted).
    pub key_file: String,
}

impl StaticHost {
    /// The lease id of a reservation of this machine: `static:<host>:<port>`.
    pub fn lease_id(&self) -> LeaseId {
        LeaseId::new(format!("static:{}:{}", self.host, self.port))
    }

    /// `user@host:port` (an IPv6 host in brackets).
    fn address(&self) -> String {
        if self.host.contains(':') {
            format!("{}@[{}]:{}", self.user, self.host, self.port)
        } else {
            format!("{}@{}:{}", self.user, self.host, self.port)
        }
    }

    /// Why `host` or `user` cannot be used, if so.
    pub fn check(&self) -> Result<(), String> {
        check_name("host", &self.host)?;
        check_name("user", &self.user)?;
        if self.port == 0 {
            return Err("port must be 1..=65535".to_owned());
        }
        if self.key_file.trim().is_empty() {
            return Err("key_file must not be empty".to_owned());
        }
        Ok(())
    }
}

impl fmt::Display for StaticHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address())
    }
}

/// A host or user name: not empty, and free of whitespace, `@`, `/`,
/// quotes and brackets (it goes into an address and a lease id).
pub fn check_name(what: &str, text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    let bad = |c: char| c.is_whitespace() || c.is_control() || "@/'\"[]`$\\".contains(c);
    if text.chars().any(bad) {
        return Err(format!(
            "{what} `{text}` holds a character not allowed in it"
        ));
    }
    Ok(())
}

/// Writes `hosts` into a group's provider labels (replacing any there).
pub fn to_labels(labels: &mut BTreeMap<String, String>, hosts: &[StaticHost]) {
    labels.retain(|key, _| !key.starts_with(LABEL_PREFIX));
    for (index, host) in hosts.iter().enumerate() {
        labels.insert(format!("static.host.{index}"), host.address());
        labels.insert(format!("static.key_file.{index}"), host.key_file.clone());
    }
}

/// Reads the hosts of a group from its labels, in index order (their
/// names are not checked here: [`of_plan`] does).
pub fn from_labels(labels: &BTreeMap<String, String>) -> Result<Vec<StaticHost>, String> {
    let mut addresses = BTreeMap::new();
    let mut keys = BTreeMap::new();
    for (key, value) in labels {
        let Some(rest) = key.strip_prefix(LABEL_PREFIX) else {
            continue;
        };
        let (kind, index) = rest
            .split_once('.')
            .and_then(|(kind, i)| Some((kind, i.parse::<usize>().ok()?)))
            .ok_or_else(|| format!("unknown static label `{key}`"))?;
        match kind {
            "host" => addresses.insert(index, value.clone()),
            "key_file" => keys.insert(index, value.clone()),
            _ => return Err(format!("unknown static label `{key}`")),
        };
    }
    let mut hosts = Vec::new();
    for index in 0..addresses.len().max(keys.len()) {
        let address = addresses
            .get(&index)
            .ok_or_else(|| format!("static host {index} has no address"))?;
        let key_file = keys
            .get(&index)
            .ok_or_else(|| format!("static host {index} has no key_file"))?;
        hosts.push(parse_address(address, key_file)?);
    }
    Ok(hosts)
}

fn parse_address(text: &str, key_file: &str) -> Result<StaticHost, String> {
    let bad = || format!("`{text}` is not user@host:port");
    let (user, rest) = text.split_once('@').ok_or_else(bad)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok(StaticHost {
        host: host.to_owned(),
        port: port.parse().map_err(|_| bad())?,
        user: user.to_owned(),
        key_file: key_file.to_owned(),
    })
}

/// The host of every node of `plan`'s static groups, after checking that
/// each such group lists one host per node and no machine is listed twice.
pub fn of_plan(plan: &RunPlan) -> Result<BTreeMap<LogicalNodeId, StaticHost>, String> {
    let mut nodes = BTreeMap::new();
    let mut seen: BTreeMap<LeaseId, LogicalNodeId> = BTreeMap::new();
    for group in &plan.groups {
        for (node, host) in of_group(group)? {
            if let Some(other) = seen.insert(host.lease_id(), node.clone()) {
                return Err(format!("{other} and {node} both use {host}"));
            }
            nodes.insert(node, host);
        }
    }
    Ok(nodes)
}

fn of_group(group: &NodeGroupSpec) -> Result<Vec<(LogicalNodeId, StaticHost)>, String> {
    let hosts = from_labels(&group.shape.provider_labels)
        .map_err(|e| format!("group {}: {e}", group.group_id))?;
    for host in &hosts {
        host.check()
            .map_err(|e| format!("group {}: {host}: {e}", group.group_id))?;
    }
    if group.provider != ProviderKind::Static {
        if !hosts.is_empty() {
            return Err(format!(
                "group {} lists hosts but its provider is not static",
                group.group_id
            ));
        }
        return Ok(Vec::new());
    }
    if hosts.len() != group.count as usize {
        return Err(format!(
            "static group {} has count {} but lists {} host(s)",
            group.group_id,
            group.count,
            hosts.len()
        ));
    }
    Ok(hosts
        .into_iter()
        .enumerate()
        .map(|(i, host)| (node_id(&group.group_id, i as u32), host))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str, port: u16) -> StaticHost {
        StaticHost {
            host: h.to_owned(),
            port,
            user: "root".to_owned(),
            key_file: "/k".to_owned(),
        }
    }

    #[test]
    fn hosts_round_trip_through_labels() {
        let hosts: Vec<StaticHost> = (0..12)
            .map(|i| host(&format!("10.0.0.{i}"), 22))
            .chain([host("::1", 2222)])
            .collect();
        let mut labels = BTreeMap::new();
        labels.insert("team".to_owned(), "ml".to_owned());
        to_labels(&mut labels, &hosts);
        assert_eq!(labels["static.host.12"], "root@[::1]:2222");
        assert_eq!(from_labels(&labels).unwrap(), hosts);
        assert_eq!(hosts[12].lease_id().as_str(), "static:::1:2222");
        labels.remove("static.key_file.3");
        assert!(from_labels(&labels).unwrap_err().contains("key_file"));
    }

    #[test]
    fn names_are_checked() {
        assert!(host("a b", 22).check().is_err());
        assert!(host("a@b", 22).check().is_err());
        assert!(host("", 22).check().is_err());
        assert!(host("gpu-1.example", 0).check().is_err());
        assert!(host("gpu-1.example", 22).check().is_ok());
    }
}
