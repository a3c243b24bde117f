//! `cargo xtask tidy` as a test, plus proof that its checks can fail.

use xtask::tidy;

#[test]
fn core_fsm_is_tidy() {
    let findings = tidy::check(&xtask::workspace_root()).expect("tidy runs");
    let text: Vec<String> = findings.iter().map(|f| f.to_string()).collect();
    assert!(
        text.is_empty(),
        "core-fsm is not tidy:\n{}",
        text.join("\n")
    );
}

#[test]
fn forbidden_sources_are_found() {
    let text = "use std::collections::HashMap;\n// HashMap in a comment is fine\nlet t = std::time::Instant::now();\nasync fn f() {}\nif n.awaits_start() {}\nx.await;\n";
    let found = tidy::source_findings("x.rs", text);
    let locations: Vec<&str> = found.iter().map(|f| f.location.as_str()).collect();
    assert_eq!(locations, ["x.rs:1", "x.rs:3", "x.rs:4", "x.rs:6"]);
}

#[test]
fn reading_the_environment_is_found() {
    let text = "let v = std::env::var(\"X\");\nuse std::env;\nlet w = env::var_os(\"Y\");\nlet envelope = 1;\n";
    let found = tidy::source_findings("x.rs", text);
    let locations: Vec<&str> = found.iter().map(|f| f.location.as_str()).collect();
    assert_eq!(locations, ["x.rs:1", "x.rs:1", "x.rs:2", "x.rs:3"]);
}

#[test]
fn arc_is_allowed_and_the_rest_of_std_sync_is_not() {
    let text = "use std::sync::Arc;\nuse std::sync::Mutex;\nuse std::sync::{Arc, Mutex};\nlet n = std::sync::atomic::AtomicU64::new(0);\n";
    let found = tidy::source_findings("x.rs", text);
    let locations: Vec<&str> = found.iter().map(|f| f.location.as_str()).collect();
    assert_eq!(locations, ["x.rs:2", "x.rs:3", "x.rs:4"]);
}

#[test]
fn unsafe_is_found() {
    // An `unsafe` block, fn or impl is found; the lint's name is not.
    let text = "// unsafe in a comment is fine\nunsafe { v.set_len(1) };\n#[allow(unsafe_code)]\nunsafe fn f() {}\n";
    let found = tidy::source_findings("core-fsm/src/node/machine.rs", text);
    let locations: Vec<&str> = found.iter().map(|f| f.location.as_str()).collect();
    assert_eq!(
        locations,
        [
            "core-fsm/src/node/machine.rs:2",
            "core-fsm/src/node/machine.rs:4"
        ]
    );
    let composite = "core-fsm/src/orchestrator/routing.rs";
    assert_eq!(
        tidy::source_findings(composite, text).len(),
        2,
        "no file is exempt"
    );
}

#[test]
fn forbidden_dependencies_are_found() {
    let tree = "core-fsm v0.1.0 (/w/core-fsm)\nserde v1.0.0\ntokio v1.0.0\nrand v0.10.0\n";
    let found = tidy::dependency_findings(tree);
    assert_eq!(found.len(), 2);
    assert!(found[0].message.contains("tokio"));
    assert!(found[1].message.contains("rand"));
}

#[test]
fn a_machine_feeder_that_reads_a_datastream_frame_is_found() {
    // A planted read in the pipeline host, a tail read in the sink, and a
    // use of the archive's records; the writer API, comments and longer
    // names are not reads.
    let host = "let lines = crate::datastream::read(&dir, &node)?;\n\
        hub.event(channel::PROMPT, None, text);\n\
        // parse_line in a comment is fine\n\
        let n = reparse_line_count;\n\
        if let Some(l) = datastream::parse_line(&t) { input(l) }\n";
    let found = tidy::frame_read_findings("runtime-real/src/pipeline/host.rs", host);
    let locations: Vec<&str> = found.iter().map(|f| f.location.as_str()).collect();
    assert_eq!(
        locations,
        [
            "runtime-real/src/pipeline/host.rs:1",
            "runtime-real/src/pipeline/host.rs:5"
        ]
    );
    assert!(found[0].message.contains("`datastream::read`"), "{found:?}");
    let sink = "let seqs = crate::up::seqs::last_seqs(&path)?;\nlet r: archive::Record = x;\n";
    let found = tidy::frame_read_findings("runtime-real/src/up/sink.rs", sink);
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn only_the_named_frame_read_is_allowed_and_only_where_it_is_named() {
    let text = "super::seqs::raise_from_datastream(state_dir, &mut machine);\n";
    assert!(tidy::frame_read_findings("runtime-real/src/up/wiring.rs", text).is_empty());
    let found = tidy::frame_read_findings("runtime-real/src/up/sink.rs", text);
    assert_eq!(found.len(), 1, "{found:?}");
}

#[test]
fn every_machine_feeder_exists() {
    // A feeder renamed away would silently leave the check.
    let root = xtask::workspace_root();
    for feeder in tidy::MACHINE_FEEDERS {
        assert!(root.join(feeder).exists(), "{feeder} is missing");
    }
}
