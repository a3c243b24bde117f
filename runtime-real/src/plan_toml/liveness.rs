//! The plan's `[liveness]` section: how long an agent may be silent after
//! its handoff before membership calls it Suspect, then Dead (see
//! `spec/pipeline.md`).
//!
//! ```toml
//! [liveness]
//! suspect_after = "2s"   # default 2 s; agents heartbeat each second
//! dead_after = "5s"      # default 5 s; a Dead node is failed (and replaced
//!                        # under `replacement = "bounded"`)
//! ```
//!
//! A slow or lossy network wants longer bounds: a false death tears down a
//! rented node. Both must be at least the heartbeat period (1 s), and
//! `suspect_after` shorter than `dead_after`.

use super::reader::{Doc, Table, Value};
use core_fsm::membership::Config;
use core_fsm::time::Duration;
use std::path::Path;

const LIVENESS: &[&str] = &["suspect_after", "dead_after"];

/// The agents' heartbeat period (`drover-agent`'s default).
pub const HEARTBEAT: Duration = Duration(1_000);

/// Membership's bounds when the plan says nothing: a killed node is Dead
/// within 5 s.
pub fn default_config() -> Config {
    Config {
        suspect_after: Duration::from_secs(2),
        dead_after: Duration::from_secs(5),
        rejoin_grace: crate::retry::core(crate::transport::REJOIN_WITHIN),
        ..Config::default()
    }
}

/// Reads `[liveness]` from the root table (absent: the default).
pub(crate) fn read(doc: &mut Doc, root: &mut Table<'_, '_>) -> Config {
    match root.take(doc, "liveness") {
        Some(value) => read_section(doc, value),
        None => default_config(),
    }
}

fn read_section(doc: &mut Doc, value: &Value<'_>) -> Config {
    let mut config = default_config();
    let Some(mut table) = doc.table("liveness", value, LIVENESS) else {
        return config;
    };
    let suspect = table.duration(doc, "suspect_after", false);
    let dead = table.duration(doc, "dead_after", false);
    table.finish(doc);
    for (key, got) in [("suspect_after", suspect), ("dead_after", dead)] {
        if let Some(d) = got
            && d < HEARTBEAT
        {
            let path = format!("liveness.{key}");
            let span = doc.spans.get(&path).cloned().unwrap_or(value.span());
            let reason = format!(
                "{} ms is shorter than the agents' heartbeat period ({} ms): every agent would look silent",
                d.as_millis(),
                HEARTBEAT.as_millis()
            );
            doc.error(span, &path, reason);
            return config;
        }
    }
    config.suspect_after = suspect.unwrap_or(config.suspect_after);
    config.dead_after = dead.unwrap_or(config.dead_after);
    if config.suspect_after >= config.dead_after {
        let path = "liveness.dead_after";
        let span = doc.spans.get(path).cloned().unwrap_or(value.span());
        let reason = format!(
            "dead_after ({} ms) must be longer than suspect_after ({} ms)",
            config.dead_after.as_millis(),
            config.suspect_after.as_millis()
        );
        doc.error(span, path, reason);
        return default_config();
    }
    config
}

/// The `[liveness]` section of the plan file at `path`; the file is
/// expected to have passed [`super::load`], whose errors name the line.
pub fn load(path: &Path) -> Result<Config, String> {
    super::load_section(path, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<(), String> {
        let base = crate::plan_toml::to_string(&core_fsm::plan::RunPlan::local(1));
        crate::plan_toml::parse_str(&format!("{base}{extra}"), "p.toml")
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_bounds_are_read_and_checked_with_the_plan() {
        parse("[liveness]\nsuspect_after = \"3s\"\ndead_after = \"20s\"\n").unwrap();
        let err = parse("[liveness]\nsuspect_after = \"500ms\"\n").unwrap_err();
        assert!(err.contains("liveness.suspect_after"), "{err}");
        assert!(err.contains("heartbeat period"), "{err}");
        let err = parse("[liveness]\nsuspect_after = \"6s\"\n").unwrap_err();
        assert!(err.contains("liveness.dead_after"), "{err}");
        assert!(
            err.contains("must be longer than suspect_after (6000 ms)"),
            "{err}"
        );
        let err = parse("[liveness]\ndead = \"6s\"\n").unwrap_err();
        assert!(err.contains("unknown field `dead`"), "{err}");
        // Every error names the line and column.
        assert!(err.contains("p.toml:"), "{err}");
    }

    #[test]
    fn load_gives_the_plan_bounds_or_the_default() {
        let dir = std::env::temp_dir().join(format!("drover-live-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plan.toml");
        let base = crate::plan_toml::to_string(&core_fsm::plan::RunPlan::local(1));
        std::fs::write(&path, &base).unwrap();
        assert_eq!(load(&path).unwrap(), default_config());
        std::fs::write(&path, format!("{base}[liveness]\ndead_after = \"30s\"\n")).unwrap();
        let config = load(&path).unwrap();
        assert_eq!(config.dead_after, Duration::from_secs(30));
        assert_eq!(config.suspect_after, Duration::from_secs(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
