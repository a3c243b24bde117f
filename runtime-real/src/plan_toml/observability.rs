//! The plan's `[observability]` section: `frame_log = PATH`, the frame
//! archive `drover up` writes every datastream line to
//! (`spec/datastream.md`, "The frame archive"). A relative path is
//! relative to the plan file's folder.

use super::reader::{Doc, Table};
use std::path::{Path, PathBuf};
use toml::de::DeTable;

const OBSERVABILITY: &[&str] = &["frame_log"];

/// Checks the section while the whole plan is read (its errors are the
/// plan's, with file, line and column).
pub(crate) fn check(doc: &mut Doc, root: &mut Table<'_, '_>) {
    let Some(value) = root.take(doc, "observability") else {
        return;
    };
    let Some(mut table) = doc.table("observability", value, OBSERVABILITY) else {
        return;
    };
    if let Some(path) = table.string(doc, "frame_log", false)
        && path.trim().is_empty()
    {
        let span = doc
            .spans
            .get("observability.frame_log")
            .cloned()
            .unwrap_or(0..0);
        doc.error(
            span,
            "observability.frame_log",
            "an empty path; leave the field out to write no archive",
        );
    }
    table.finish(doc);
}

/// The frame archive a plan file names, if any: read from the file at
/// `plan_path`, which `super::load` has accepted.
pub fn frame_log(plan_path: &Path) -> Result<Option<PathBuf>, String> {
    let shown = plan_path.display();
    let text = std::fs::read_to_string(plan_path).map_err(|e| format!("{shown}: {e}"))?;
    let (root, syntax) = DeTable::parse_recoverable(&text);
    if let Some(err) = syntax.first() {
        return Err(format!("{shown}: {}", err.message()));
    }
    let mut doc = Doc::new();
    let mut table = Table::new("", 0..0, root.get_ref(), &["observability"]);
    let Some(value) = table.take(&mut doc, "observability") else {
        return Ok(None);
    };
    let Some(mut section) = doc.table("observability", value, OBSERVABILITY) else {
        return Ok(None);
    };
    let Some(path) = section.string(&mut doc, "frame_log", false) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    if path.is_absolute() {
        return Ok(Some(path));
    }
    let dir = plan_path.parent().unwrap_or(Path::new("."));
    Ok(Some(dir.join(path)))
}
