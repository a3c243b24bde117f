//! Plan files: the TOML form of a `core_fsm::plan::RunPlan`, read with
//! precise errors. Every problem of a file is reported at once, each with the
//! file, line and column, the dotted field path and the reason: TOML syntax,
//! wrong types, unknown or missing fields, and the rules of
//! `core_fsm::plan::validate` (placed at the line of the offending field).
//!
//! ```toml
//! run_id = 42
//!
//! [[group]]
//! name = "workers"
//! role = "worker"
//! count = 2
//! provider = "vastai"            # local | static | docker | vastai
//!
//! [group.shape]
//! image = "ghcr.io/acme/worker:sha123"
//! disk_gb = 80
//! min_reliability = 0.98          # fraction -> 980 per mille
//!
//! [group.boot]
//! ssh_user = "root"
//! start_command = "drover-agent --join ${ORCH_ADDR} --node ${LOGICAL_NODE_ID} --token ${JOIN_TOKEN}"
//!
//! [group.boot.timeouts]
//! join_timeout = "120s"
//! ```
//!
//! The full shape is in `spec/control-plane.md` ("Plan files").

pub mod dashboard;
mod duration;
pub mod liveness;
pub mod observability;
mod pipeline;
mod reader;
mod schema;
mod write;

pub use write::to_string;

use crate::pipeline::spec::PipelineSpec;
use core_fsm::plan::{PlanError, RunPlan, validate};
use reader::Doc;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use toml::de::DeTable;

/// One problem of a plan file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
    /// Dotted path of the field in the file: `group[0].boot.start_command`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// Why a plan file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanFileError {
    /// The file could not be read.
    Read {
        /// The file.
        file: String,
        /// The I/O error.
        message: String,
    },
    /// The file has problems; all of them, in file order.
    Invalid {
        /// The file.
        file: String,
        /// The problems.
        diagnostics: Vec<Diagnostic>,
    },
}

impl fmt::Display for PlanFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanFileError::Read { file, message } => write!(f, "{file}: {message}"),
            PlanFileError::Invalid { file, diagnostics } => {
                for (i, d) in diagnostics.iter().enumerate() {
                    if i > 0 {
                        writeln!(f)?;
                    }
                    let field = if d.field.is_empty() {
                        "(document)"
                    } else {
                        &d.field
                    };
                    write!(f, "{file}:{}:{}: {field}: {}", d.line, d.column, d.reason)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for PlanFileError {}

/// Reads, parses and validates the plan at `path` for a command; the
/// error lists every problem, one per line.
pub fn load(path: &Path) -> Result<RunPlan, String> {
    load_full(path).map(|(plan, _)| plan)
}

/// [`load`], with the plan's pipeline sections.
pub fn load_full(path: &Path) -> Result<(RunPlan, Option<PipelineSpec>), String> {
    parse_full(path).map_err(|e| match e {
        PlanFileError::Read { .. } => e.to_string(),
        PlanFileError::Invalid { .. } => format!("invalid plan:\n{e}"),
    })
}

/// Reads and checks the plan file at `path`.
pub fn parse(path: &Path) -> Result<RunPlan, PlanFileError> {
    parse_full(path).map(|(plan, _)| plan)
}

/// [`parse`], with the plan's pipeline sections.
pub fn parse_full(path: &Path) -> Result<(RunPlan, Option<PipelineSpec>), PlanFileError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| PlanFileError::Read {
        file: file.clone(),
        message: err.to_string(),
    })?;
    let (mut plan, mut pipeline) = parse_str_full(&text, &file)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    resolve_key_files(&mut plan, dir);
    if let Some(spec) = &mut pipeline {
        pipeline::resolve(spec, dir);
    }
    Ok((plan, pipeline))
}

/// Static hosts' `key_file`s as absolute paths: `~/` is the home folder, a
/// relative path is relative to the plan file's folder (so `drover down`
/// from another folder finds the same key through the plan copy).
fn resolve_key_files(plan: &mut RunPlan, plan_dir: &Path) {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    for group in &mut plan.groups {
        for (key, value) in &mut group.shape.provider_labels {
            if !key.starts_with("static.key_file.") {
                continue;
            }
            let resolved = match (value.strip_prefix("~/"), &home) {
                (Some(rest), Some(home)) => home.join(rest),
                _ if Path::new(value.as_str()).is_absolute() => continue,
                _ => std::path::absolute(plan_dir.join(value.as_str()))
                    .unwrap_or_else(|_| plan_dir.join(value.as_str())),
            };
            *value = resolved.display().to_string();
        }
    }
}

/// Checks plan text; `file_name` is only used in errors.
pub fn parse_str(text: &str, file_name: &str) -> Result<RunPlan, PlanFileError> {
    parse_str_full(text, file_name).map(|(plan, _)| plan)
}

/// [`parse_str`], with the plan's pipeline sections.
pub fn parse_str_full(
    text: &str,
    file_name: &str,
) -> Result<(RunPlan, Option<PipelineSpec>), PlanFileError> {
    let invalid = |diagnostics| PlanFileError::Invalid {
        file: file_name.to_owned(),
        diagnostics,
    };
    let (root, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        // A damaged document would only add guesses to the real problem.
        let found = syntax
            .iter()
            .map(|err| {
                let span = err.span().unwrap_or(0..0);
                (
                    span,
                    Diagnostic {
                        line: 0,
                        column: 0,
                        field: String::new(),
                        reason: first_line(err.message()),
                    },
                )
            })
            .collect();
        return Err(invalid(place(text, found)));
    }
    let mut doc = Doc::new();
    let (plan, pipeline) = schema::read_plan(&mut doc, root.get_ref());
    let structural: Vec<String> = doc
        .diagnostics
        .iter()
        .map(|(_, d)| d.field.clone())
        .collect();
    if let Err(errors) = validate(&plan) {
        for error in errors {
            let field = toml_path(&error);
            // A field already reported (or inside or around one) carries a
            // placeholder value; its rule error would be noise.
            if structural.iter().any(|s| related(s, &field)) {
                continue;
            }
            let span = span_of(&doc, &field);
            doc.error(span, &field, in_file_terms(&error.reason));
        }
    }
    if doc.diagnostics.is_empty() {
        Ok((plan, pipeline))
    } else {
        Err(invalid(place(text, doc.diagnostics)))
    }
}

/// Turns spans into lines and columns, sorted by position (stable, so
/// errors at one place keep the order they were found in).
fn place(text: &str, mut found: Vec<(Range<usize>, Diagnostic)>) -> Vec<Diagnostic> {
    found.sort_by_key(|(span, _)| span.start);
    found
        .into_iter()
        .map(|(span, mut d)| {
            let (line, column) = line_column(text, span.start);
            d.line = line;
            d.column = column;
            d
        })
        .collect()
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or("").trim().to_owned()
}

/// The file's path of a rule error's field: `groups[1].group_id` is
/// `group[1].name`, per-mille and cent fields have their file names.
fn toml_path(error: &PlanError) -> String {
    let renames = [
        ("groups", "group"),
        ("group_id", "name"),
        ("min_reliability_per_mille", "min_reliability"),
        ("max_price_cents_per_hour", "max_price_usd_per_hour"),
    ];
    error
        .field
        .split('.')
        .map(|segment| {
            let (name, index) = segment
                .find('[')
                .map_or((segment, ""), |i| segment.split_at(i));
            let name = renames
                .iter()
                .find(|(from, _)| *from == name)
                .map_or(name, |(_, to)| to);
            format!("{name}{index}")
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A rule's reason in the file's terms: `groups[0]` is `group[0]` and
/// durations are written as the file writes them (`600000ms` is `10m`).
fn in_file_terms(reason: &str) -> String {
    let reason = reason.replace("groups[", "group[");
    let mut out = String::with_capacity(reason.len());
    let mut rest = reason.as_str();
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        let (before, from_digits) = rest.split_at(start);
        out.push_str(before);
        let digits = from_digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(from_digits.len());
        let (number, after) = from_digits.split_at(digits);
        let is_word_start = !before.ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let unit_ends = after
            .strip_prefix("ms")
            .is_some_and(|tail| !tail.starts_with(|c: char| c.is_alphanumeric()));
        match number.parse::<u64>() {
            Ok(ms) if is_word_start && unit_ends => {
                out.push_str(&duration::format_duration(
                    core_fsm::time::Duration::from_millis(ms),
                ));
                rest = &after[2..];
            }
            _ => {
                out.push_str(number);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The span of `field`, or of its nearest ancestor present in the file (a
/// defaulted timeout points at its table; a plan with no group at line 1).
fn span_of(doc: &Doc, field: &str) -> Range<usize> {
    let mut path = field;
    loop {
        if let Some(span) = doc.spans.get(path) {
            return span.clone();
        }
        match path.rfind(['.', '[']) {
            Some(cut) => path = &path[..cut],
            None => return 0..0,
        }
    }
}

/// Whether one path is the other or lies inside it.
fn related(a: &str, b: &str) -> bool {
    let inside = |outer: &str, inner: &str| {
        inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with(['.', '[']))
    };
    inside(a, b) || inside(b, a)
}

/// One section of the plan file at `path`, read by `read` from the root
/// table; the file is expected to have passed [`load`], whose errors name
/// the line. The first diagnostic, if any, is the error.
pub(crate) fn load_section<T>(
    path: &std::path::Path,
    read: impl FnOnce(&mut reader::Doc, &mut reader::Table<'_, '_>) -> T,
) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let root = toml::de::DeTable::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut doc = reader::Doc::new();
    let mut table = reader::Table::new("", 0..0, root.get_ref(), schema::ROOT);
    let section = read(&mut doc, &mut table);
    match doc.diagnostics.first() {
        None => Ok(section),
        Some((_, d)) => Err(format!("{}: {}: {}", path.display(), d.field, d.reason)),
    }
}
