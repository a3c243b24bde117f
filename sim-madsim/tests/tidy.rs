//! The madsim rules of STYLE.md, checked on this crate's sources (a plain
//! test: it runs in every build): every `select!` is `biased;`, no
//! `HashMap`/`HashSet` at all, and no wall clock inside the simulated nodes.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the source folder is readable") {
        let path = entry.expect("a readable entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn all_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    sources(&root.join("src"), &mut paths);
    sources(&root.join("tests"), &mut paths);
    paths.sort();
    assert!(paths.len() > 10, "found the sources: {paths:?}");
    paths
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            (
                name,
                std::fs::read_to_string(&p).expect("a readable source"),
            )
        })
        .collect()
}

/// Lines that are code, not comments (good enough for these patterns).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
}

#[test]
fn every_select_is_biased() {
    let mut selects = 0;
    for (name, text) in all_sources() {
        if name.ends_with("tests/tidy.rs") {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in code_lines(&text) {
            if line.contains("select! {") {
                selects += 1;
                let next = lines.get(i + 1).map_or("", |l| l.trim());
                assert_eq!(
                    next,
                    "biased;",
                    "{name}:{}: select! without `biased;`",
                    i + 1
                );
            }
        }
    }
    assert!(selects >= 2, "the inbox and the supervisor select");
}

#[test]
fn no_hash_collections_and_no_wall_clock_in_the_nodes() {
    // The battery runner and the comparison time themselves, outside any
    // runtime; everything else runs inside madsim.
    let wall_clock_allowed = [
        "src/backend.rs",
        "src/compare.rs",
        "src/run.rs",
        "tests/tidy.rs",
    ];
    for (name, text) in all_sources() {
        for (i, line) in code_lines(&text) {
            for banned in ["HashMap", "HashSet"] {
                let hit = line.contains(banned) && name != "tests/tidy.rs";
                assert!(
                    !hit,
                    "{name}:{}: {banned} (iteration order escapes the seed)",
                    i + 1
                );
            }
            let wall = (line.contains("Instant::now")
                && !line.contains("madsim::time::Instant::now"))
                || line.contains("SystemTime")
                || line.contains("thread_rng");
            let allowed = wall_clock_allowed.iter().any(|a| name.ends_with(a));
            assert!(
                !wall || allowed,
                "{name}:{}: wall clock or OS randomness",
                i + 1
            );
        }
    }
}
