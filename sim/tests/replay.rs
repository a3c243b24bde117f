//! Every committed trace in `traces/` replays (from its explicit plan, not
//! its seed) and its transcript is an insta snapshot: a change of behaviour
//! on any of them shows up here.

use std::path::PathBuf;

fn traces() -> Vec<PathBuf> {
    let dir = sim::cli::default_trace_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("traces/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "trace"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn committed_traces_replay_as_snapshots() {
    let paths = traces();
    assert!(paths.len() >= 2, "at least two committed traces");
    for path in paths {
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let replay = sim::cli::replay(&path).unwrap_or_else(|e| panic!("{e}"));
        insta::assert_snapshot!(name, replay.text());
    }
}

#[test]
fn replay_is_deterministic() {
    for path in traces() {
        let a = sim::cli::replay(&path).expect("replays");
        let b = sim::cli::replay(&path).expect("replays");
        assert_eq!(a.outcome.digest, b.outcome.digest, "{}", path.display());
        assert_eq!(a.outcome.transcript, b.outcome.transcript);
    }
}

#[test]
fn hand_picked_traces_pass_and_known_bugs_still_fail() {
    for path in traces() {
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let replay = sim::cli::replay(&path).expect("replays");
        if name.starts_with("known-") {
            assert!(
                replay.outcome.violation.is_some(),
                "{name}: fixed? move it out of KNOWN"
            );
        } else {
            assert_eq!(replay.outcome.violation, None, "{name}");
        }
    }
}
