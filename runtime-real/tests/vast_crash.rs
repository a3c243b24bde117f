//! `kill -9` of `drover up` while it rents Vast.ai instances (through the
//! fake, whose instances are real local SSH nodes), then `drover down` from
//! another shell: the fake must report no live instance created by drover.
//! The kill points are events of the fake (the Nth committed create, a
//! create whose answer the fake holds back), never a sleep. And a list that
//! fails during `down` is an error, never an empty fleet: the leases the
//! journal knows are destroyed anyway, the open intent stays open.

mod vast_support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use vast_support::*;

const BOUND: Duration = Duration::from_secs(120);

/// Every instance the fake ever made carries a drover label of run 1.
fn assert_all_drover(fake: &Fake) -> usize {
    let instances = fake.instances();
    for instance in &instances {
        let label = instance["label"].as_str().unwrap();
        let parsed = vastai::label::LeaseLabel::parse(label).expect("a drover label");
        assert_eq!(parsed.run_id.0, 1, "{instance}");
    }
    instances.len()
}

fn down_ok(state: &Path) -> String {
    let out = drover(state, &["down"]);
    let shown = text(&out);
    assert!(out.status.success(), "down failed:\n{shown}");
    shown
}

#[test]
fn kill_9_of_up_after_n_creates_then_down_leaves_no_live_instance() {
    for creates in [1, 2, 3] {
        let dir = scratch(&format!("kill-after-{creates}"));
        let state = dir.join("state");
        let mut fake = Fake::start(&dir);
        let plan = write_plan(&dir, &vast_plan(&fake.url, 3));
        let mut up = Up::start(&state, &plan);
        fake.wait_creates(creates, BOUND);
        up.kill_9();
        let made = assert_all_drover(&fake);
        assert!(made >= creates, "{made} < {creates}");
        let started = Instant::now();
        let shown = down_ok(&state);
        assert_eq!(
            fake.live(),
            Vec::<Value>::new(),
            "live instances after kill -9 at create {creates} and down:\n{shown}"
        );
        eprintln!(
            "timing: kill after {creates} create(s): {made} instance(s), down took {:?}",
            started.elapsed()
        );
        // The machines behind them stop too.
        let up_machines = fake.count("up");
        fake.wait_count("stopped", up_machines, BOUND);
        let mut lines = up.transcript();
        lines.push(shown);
        lines.extend(fake.stop());
        assert_no_key_in_lines(&lines);
        assert_no_key_in_files(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A fake and a `drover up` killed while the fake holds back the answer of
/// a committed create (F5): the journal has that node's intent but no
/// lease, so only a list by label can find its instance.
fn killed_mid_create(name: &str) -> (std::path::PathBuf, Fake, Up) {
    let dir = scratch(name);
    let state = dir.join("state");
    let mut fake = Fake::start(&dir);
    // The answer is held for longer than any bound here, so the kill comes
    // before it however slow the machine.
    fake.add_rule(json!({"scenario": {"kind": "f05_create_lost", "cut": false,
                                      "hold_ms": 3_600_000}, "times": 1}));
    let plan = write_plan(&dir, &vast_plan(&fake.url, 2));
    let mut up = Up::start(&state, &plan);
    // Both machines are up; one create's answer is held back.
    fake.wait_count("up", 2, BOUND);
    up.out.wait(BOUND, "one node ready to bootstrap", |l| {
        l["event"] == "node" && l["stage"] == "BootstrapRunning"
    });
    up.kill_9();
    let status = status(&state);
    let leases = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["lease"].is_string())
        .count();
    assert_eq!(leases, 1, "one lease known, one only intended: {status}");
    (dir, fake, up)
}

#[test]
fn kill_9_while_a_create_answer_is_held_then_down_finds_it_by_label() {
    let (dir, mut fake, up) = killed_mid_create("kill-held");
    let state = dir.join("state");
    assert_eq!(fake.live().len(), 2);
    let shown = down_ok(&state);
    assert_eq!(fake.live(), Vec::<Value>::new(), "{shown}");
    assert_eq!(assert_all_drover(&fake), 2, "nothing created twice");
    let mut lines = up.transcript();
    lines.push(shown);
    lines.extend(fake.stop());
    assert_no_key_in_lines(&lines);
    assert_no_key_in_files(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The journal's open intents (node, nonce), as `down` sees them.
fn open_intents(state: &Path) -> Vec<(String, u64)> {
    let ledger = runtime_real::cli::Ledger::from_state_dir(state).unwrap();
    ledger
        .pending_intents()
        .into_iter()
        .map(|(node, nonce)| (node.as_str().to_owned(), nonce.0))
        .collect()
}

/// The node a live instance's label names.
fn labelled_node(instance: &Value) -> String {
    let label = instance["label"].as_str().unwrap();
    vastai::label::LeaseLabel::parse(label)
        .expect("a drover label")
        .node
        .as_str()
        .to_owned()
}

#[test]
fn a_failed_list_during_down_destroys_the_known_leases_and_keeps_the_intent_open() {
    let (dir, mut fake, up) = killed_mid_create("down-list-fails");
    let state = dir.join("state");
    let intents = open_intents(&state);
    assert_eq!(intents.len(), 1, "one intent without a lease: {intents:?}");
    let (intended, nonce) = intents[0].clone();
    // Every list answers 502 (F21): `down` cannot know the fleet.
    fake.add_rule(
        json!({"scenario": {"kind": "f21_server_error", "status": 502},
                         "endpoint": "list_instances"}),
    );
    let started = Instant::now();
    let out = drover(&state, &["down"]);
    let failed_in = started.elapsed();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("listing the instances") && shown.contains("502"),
        "a clear message: {shown}"
    );
    assert!(
        shown.contains(&format!("{intended} (nonce-{nonce})")) && shown.contains("not resolved"),
        "the message names the open intent: {shown}"
    );
    // The journal's lease is gone; the instance only a list can find stands,
    // and its intent is still open (never taken for gone).
    let live = fake.live();
    assert_eq!(live.len(), 1, "the known lease was destroyed: {shown}");
    assert_eq!(labelled_node(&live[0]), intended, "{live:?}");
    assert_eq!(open_intents(&state), intents, "{shown}");
    // A later `down`, with lists working again, finds the instance by label
    // and destroys it; the intent is resolved.
    fake.clear_rules();
    let second = down_ok(&state);
    assert_eq!(fake.live(), Vec::<Value>::new(), "{second}");
    assert_eq!(open_intents(&state), Vec::new(), "{second}");
    assert_eq!(assert_all_drover(&fake), 2, "nothing created twice");
    eprintln!(
        "timing: a down whose lists fail destroys the known leases and exits 1 after {failed_in:?}"
    );
    let mut lines = up.transcript();
    lines.extend([shown, second]);
    lines.extend(fake.stop());
    assert_no_key_in_lines(&lines);
    assert_no_key_in_files(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
}
