//! `cargo xtask tidy`: core-fsm stays pure, and the datastream stays
//! observational.
//!
//! Three checks, all cheap enough to run as a test:
//! - core-fsm's normal dependency tree holds serde (with its derive),
//!   smol_str and arrayvec only (an allowlist, so a new dependency is a
//!   deliberate change here);
//! - core-fsm's sources use no wall clock, OS randomness, environment,
//!   threads, I/O, async or unordered maps, and no `unsafe` (the crate root
//!   also forbids it: this check names the line);
//! - no code that builds machine inputs or drives a machine (core-fsm, the
//!   driver, the orchestrator's effect sides in runtime-real) calls the
//!   datastream's reader API ([`FRAME_READERS`]): the run's decisions come
//!   from control reports, never from a frame read back
//!   (`spec/datastream.md` DS4).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates allowed in core-fsm's normal dependency tree.
pub const ALLOWED_CRATES: &[&str] = &[
    "core-fsm",
    "serde",
    "serde_core",
    "serde_derive",
    "smol_str",
    "arrayvec",
    "proc-macro2",
    "quote",
    "syn",
    "unicode-ident",
];

/// Source patterns core-fsm must not contain, with why.
pub const FORBIDDEN_PATTERNS: &[(&str, &str)] = &[
    ("Instant::now", "wall clock: time is a parameter"),
    ("SystemTime", "wall clock: time is a parameter"),
    ("thread_rng", "OS randomness: use DetRng"),
    ("rand::", "OS randomness: use DetRng"),
    ("getrandom", "OS randomness: use DetRng"),
    ("Uuid::new_v4", "random ids: use counters"),
    ("std::fs", "I/O: the effect loop does I/O"),
    ("std::net", "I/O: the effect loop does I/O"),
    ("std::io", "I/O: the effect loop does I/O"),
    ("std::process", "processes: the runtime starts them"),
    ("std::env", "the environment: configuration is an input"),
    ("env::", "the environment: configuration is an input"),
    ("std::thread", "threads: machines are single-threaded"),
    ("std::sync", "threads: machines are single-threaded"),
    ("tokio", "async runtime: machines are sans-IO"),
    ("madsim", "async runtime: machines are sans-IO"),
    ("async fn", "async: machines are sans-IO"),
    (".await", "async: machines are sans-IO"),
    ("HashMap", "unordered iteration: use BTreeMap"),
    ("HashSet", "unordered iteration: use BTreeSet"),
];

/// One problem tidy found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Where.
    pub location: String,
    /// What and why.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Runs every check; an empty list means tidy.
pub fn check(root: &Path) -> Result<Vec<Finding>, String> {
    let mut findings = check_dependencies(root)?;
    findings.extend(check_sources(&root.join("core-fsm/src"))?);
    findings.extend(check_frame_reads(root)?);
    Ok(findings)
}

/// The datastream's reader API: every function and type that reads a
/// written frame back, with what it reads.
pub const FRAME_READERS: &[(&str, &str)] = &[
    ("datastream::read", "a node's datastream file"),
    ("parse_line", "a datastream line"),
    ("archive::read", "the frame archive"),
    ("archive::Record", "a frame archive record"),
    ("last_seqs", "the seqs of a datastream file's tail"),
    ("last_position", "an agent's last forwarded line"),
    ("last_position_in", "an agent's last forwarded line"),
    ("raise_from_datastream", "the seqs of the datastream files"),
    ("dashboard::watch", "the dashboard's datastream follower"),
];

/// The code that feeds machines (relative to the workspace root; a folder
/// means every `.rs` file under it): it may write frames, never read one.
pub const MACHINE_FEEDERS: &[&str] = &[
    "core-fsm/src",
    "driver/src",
    "runtime-real/src/up.rs",
    "runtime-real/src/up/sink.rs",
    "runtime-real/src/up/wiring.rs",
    "runtime-real/src/up/ports.rs",
    "runtime-real/src/pipeline.rs",
    "runtime-real/src/pipeline/host.rs",
    "runtime-real/src/pipeline/node.rs",
    "runtime-real/src/pipeline/worker.rs",
    "runtime-real/src/transport/agent.rs",
    "runtime-real/src/transport/control.rs",
];

/// Frame reads in [`MACHINE_FEEDERS`] that are allowed, with why: (file,
/// reader, reason).
pub const FRAME_READS_ALLOWED: &[(&str, &str, &str)] = &[(
    "runtime-real/src/up/wiring.rs",
    "raise_from_datastream",
    "a restarted `up` numbers its log records above the lines the datastream \
     already holds (spec/provisioning.md, \"Log sequence numbers\"); the seqs only \
     number records, no transition branches on them",
)];

/// Scans [`MACHINE_FEEDERS`] for [`FRAME_READERS`].
pub fn check_frame_reads(root: &Path) -> Result<Vec<Finding>, String> {
    let mut files = Vec::new();
    for feeder in MACHINE_FEEDERS {
        let path = root.join(feeder);
        if path.is_dir() {
            collect_rs(&path, &mut files)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        } else {
            files.push(path);
        }
    }
    files.sort();
    let mut findings = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let name = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        findings.extend(frame_read_findings(&name, &text));
    }
    Ok(findings)
}

/// Findings in one source text of a machine feeder named `name` (relative
/// to the workspace root). Comment lines are skipped, as are reads
/// [`FRAME_READS_ALLOWED`] names for this file.
pub fn frame_read_findings(name: &str, text: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for (reader, what) in FRAME_READERS {
            let allowed = FRAME_READS_ALLOWED
                .iter()
                .any(|(file, allowed, _)| *file == name && allowed == reader);
            if !allowed && contains_identifier(code, reader) {
                findings.push(Finding {
                    location: format!("{name}:{}", index + 1),
                    message: format!(
                        "`{reader}` reads {what} back: code that feeds a machine never reads a \
                         datastream frame (observational only, spec/datastream.md DS4)"
                    ),
                });
            }
        }
    }
    findings
}

/// Whether `pattern` occurs in `code` as a whole identifier path: not
/// preceded or followed by an identifier character (so `last_seqs` is not
/// found in `last_seqs_total`, nor `parse_line` in `reparse_line`).
fn contains_identifier(code: &str, pattern: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(pattern).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + pattern.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// core-fsm's normal dependency tree against the allowlist.
pub fn check_dependencies(root: &Path) -> Result<Vec<Finding>, String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(root)
        .args([
            "tree",
            "-p",
            "core-fsm",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .output()
        .map_err(|e| format!("cannot run cargo tree: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(dependency_findings(&String::from_utf8_lossy(&out.stdout)))
}

/// Findings for a `cargo tree --prefix none` listing.
pub fn dependency_findings(tree: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    for line in tree.lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        if !ALLOWED_CRATES.contains(&name) {
            findings.push(Finding {
                location: "core-fsm/Cargo.toml".into(),
                message: format!("dependency `{name}` is not allowed in core-fsm (serde, smol_str, arrayvec only)"),
            });
        }
    }
    findings.dedup();
    findings
}

/// Scans every `.rs` file under `dir`.
pub fn check_sources(dir: &Path) -> Result<Vec<Finding>, String> {
    let mut files = Vec::new();
    collect_rs(dir, &mut files).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    files.sort();
    let mut findings = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        findings.extend(source_findings(&file.display().to_string(), &text));
    }
    Ok(findings)
}

/// Paths that contain a forbidden pattern but are allowed, with why:
/// `std::sync::Arc` shares immutable values (ids, specs) so that a clone
/// copies a pointer; it locks nothing and makes the machines' values `Send`
/// for the runtime's tasks. `Mutex`, atomics, channels and the rest of
/// `std::sync` stay forbidden.
pub const ALLOWED_PATHS: &[&str] = &["std::sync::Arc;"];

/// Findings in one source text. Comment lines are skipped: the rule is about
/// code, and docs may name what they avoid.
pub fn source_findings(name: &str, text: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = ALLOWED_PATHS
            .iter()
            .fold(code.to_owned(), |code, allowed| code.replace(allowed, ""));
        let code = code.as_str();
        for (pattern, why) in FORBIDDEN_PATTERNS {
            if contains_token(code, pattern) {
                findings.push(Finding {
                    location: format!("{name}:{}", index + 1),
                    message: format!("`{pattern}` is forbidden in core-fsm ({why})"),
                });
            }
        }
        if contains_token(code, "unsafe") {
            findings.push(Finding {
                location: format!("{name}:{}", index + 1),
                message: "`unsafe` is forbidden in core-fsm".into(),
            });
        }
    }
    findings
}

/// Whether `pattern` occurs in `code` not followed by an identifier
/// character (so `.awaits_start()` is not `.await`, `HashMapLike` is flagged
/// only if it really starts with a forbidden name and ends there).
fn contains_token(code: &str, pattern: &str) -> bool {
    code.match_indices(pattern).any(|(at, _)| {
        let next = code[at + pattern.len()..].chars().next();
        let pattern_ends_in_word = pattern.ends_with(|c: char| c.is_alphanumeric() || c == '_');
        !pattern_ends_in_word || !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}
