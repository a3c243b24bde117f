//! The plan's `[dashboard]` section: where `drover up` serves its live
//! dashboard (see `spec/dashboard.md`).
//!
//! ```toml
//! [dashboard]
//! addr = "127.0.0.1:8787"   # loopback only; port 0 picks a free port
//! enabled = true            # false: no dashboard (as --no-dashboard)
//! ```

use super::reader::{Doc, Table, Value};
use std::net::SocketAddr;
use std::path::Path;

const DASHBOARD: &[&str] = &["addr", "enabled"];

/// What the plan says of the dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DashboardSpec {
    /// Where to listen; `None`: an ephemeral loopback port.
    pub addr: Option<SocketAddr>,
    /// Whether `up` serves it at all.
    pub enabled: bool,
}

impl Default for DashboardSpec {
    fn default() -> DashboardSpec {
        DashboardSpec {
            addr: None,
            enabled: true,
        }
    }
}

/// Reads `[dashboard]` from the root table (absent: the default).
pub(crate) fn read(doc: &mut Doc, root: &mut Table<'_, '_>) -> DashboardSpec {
    match root.take(doc, "dashboard") {
        Some(value) => read_section(doc, value),
        None => DashboardSpec::default(),
    }
}

fn read_section(doc: &mut Doc, value: &Value<'_>) -> DashboardSpec {
    let mut spec = DashboardSpec::default();
    let Some(mut table) = doc.table("dashboard", value, DASHBOARD) else {
        return spec;
    };
    if let Some(addr) = table.string(doc, "addr", false) {
        match parse_loopback(&addr) {
            Ok(addr) => spec.addr = Some(addr),
            Err(reason) => {
                let span = doc.spans.get("dashboard.addr").cloned();
                doc.error(span.unwrap_or(value.span()), "dashboard.addr", reason);
            }
        }
    }
    if let Some(enabled) = table.boolean(doc, "enabled") {
        spec.enabled = enabled;
    }
    table.finish(doc);
    spec
}

/// Parses `ip:port`, which must be a loopback address (the dashboard shows
/// a fleet's logs and submits prompts: it is never served beyond this
/// machine).
pub fn parse_loopback(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|e| format!("`{text}` is not an ip:port address ({e})"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "`{text}` is not a loopback address: the dashboard is served on this machine only (127.0.0.1 or ::1)"
        ));
    }
    Ok(addr)
}

/// The `[dashboard]` section of the plan file at `path`; the file is
/// expected to have passed [`super::load`], whose errors name the line.
pub fn load(path: &Path) -> Result<DashboardSpec, String> {
    super::load_section(path, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_taken() {
        assert_eq!(
            parse_loopback("127.0.0.1:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert!(parse_loopback("[::1]:8080").is_ok());
        let err = parse_loopback("0.0.0.0:8080").unwrap_err();
        assert!(err.contains("not a loopback address"), "{err}");
        let err = parse_loopback("localhost").unwrap_err();
        assert!(err.contains("not an ip:port"), "{err}");
    }

    #[test]
    fn the_section_is_read_and_checked_with_the_plan() {
        let base = crate::plan_toml::to_string(&core_fsm::plan::RunPlan::local(1));
        let good = format!("{base}[dashboard]\naddr = \"127.0.0.1:9999\"\n");
        crate::plan_toml::parse_str(&good, "p.toml").unwrap();
        let bad = format!("{base}[dashboard]\naddr = \"0.0.0.0:1\"\ncolour = 3\n");
        let err = crate::plan_toml::parse_str(&bad, "p.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("dashboard.addr"), "{err}");
        assert!(err.contains("unknown field `colour`"), "{err}");
        let dir = std::env::temp_dir().join(format!("drover-dash-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plan.toml");
        std::fs::write(&path, &good).unwrap();
        let spec = load(&path).unwrap();
        assert_eq!(spec.addr, Some("127.0.0.1:9999".parse().unwrap()));
        assert!(spec.enabled);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
