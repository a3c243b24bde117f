//! `SPEC.md` is joined from the parts in `spec/`, kept beside the code they
//! describe. `cargo xtask spec` writes it; a test checks it is current, so
//! the contract cannot silently fall behind its parts.

use std::fs;
use std::path::Path;

/// The parts, in reading order: principles, then what decides, then what
/// tests the deciders, then what binds them to the world.
pub const PARTS: &[&str] = &[
    "00-overview.md",
    "plan-boot-reconcile.md",
    "provisioning.md",
    "run-machines.md",
    "simulation.md",
    "madsim.md",
    "runtime.md",
    "control-plane.md",
    "datastream.md",
    "vastai.md",
    "worker.md",
    "pipeline.md",
    "docker.md",
    "dashboard.md",
];

/// The text `SPEC.md` must have.
pub fn render(root: &Path) -> Result<String, String> {
    let mut out = String::new();
    for (index, part) in PARTS.iter().enumerate() {
        let path = root.join("spec").join(part);
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = if index == 0 {
            text
        } else {
            nest_headings(&text)
        };
        out.push_str(text.trim_end());
        out.push_str("\n\n");
    }
    Ok(out)
}

/// Demotes every heading by one level when the part starts at level one, so
/// each part sits under the specification's own title. Code fences are left
/// alone.
pub fn nest_headings(text: &str) -> String {
    let top_level = text
        .lines()
        .find(|l| l.starts_with('#'))
        .is_some_and(|l| l.starts_with("# "));
    if !top_level {
        return text.to_string();
    }
    let mut in_fence = false;
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if !in_fence && line.starts_with('#') {
            out.push('#');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Parts in `spec/` that `PARTS` does not list (a new part must be placed).
pub fn unlisted_parts(root: &Path) -> Result<Vec<String>, String> {
    let dir = root.join("spec");
    let mut unlisted = Vec::new();
    for entry in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let name = entry
            .map_err(|e| e.to_string())?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".md") && !PARTS.contains(&name.as_str()) {
            unlisted.push(name);
        }
    }
    unlisted.sort();
    Ok(unlisted)
}
