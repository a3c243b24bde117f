//! `drover --json down` that fails: stdout is NDJSON, the last line one
//! object naming the error, the leases it could not destroy and the intents
//! it keeps open; nothing on stderr; exit 1. The state dir is written here
//! (a vastai plan copy, a journal with one known lease and one open intent)
//! and the fake Vast.ai runs in-process, so no `up` and no machine is needed.
//! A `drover down` whose readers closed their pipes still ends with its
//! exit code.

mod vast_support;

use core_fsm::ids::{LeaseId, LogicalNodeId, Nonce, RunId};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{JournalRecord, LeaseFacts};
use runtime_real::journal::Journal;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use vast_support::*;

/// A key the fake does not know: every call is refused (404 `auth_error`).
const WRONG_KEY: &str = "vk-wrong-0b9e4c2a71d35f86";
const LEASE: &str = "vastai:27351986";

/// A state dir as a killed `up` leaves it: `workers-0` has an intent whose
/// create may have happened unseen, `workers-1` a known lease.
fn state_dir(dir: &Path, url: &str) -> std::path::PathBuf {
    let state = dir.join("state");
    std::fs::create_dir_all(state.join("keys")).unwrap();
    let plan = serde_json::to_vec(&vast_plan(url, 2)).unwrap();
    std::fs::write(state.join("plan.json"), plan).unwrap();
    std::fs::write(
        state.join("keys").join("id_ed25519.pub"),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDownJsonTestKeyOnly drover@test\n",
    )
    .unwrap();
    let lease = LeaseFacts {
        provider: ProviderKind::Vastai,
        lease_id: LeaseId::from(LEASE),
        contract_id: "27351986".into(),
        offer_id: Some("18422311".into()),
        host_id: Some("41311".into()),
        nonce: Nonce(2),
        metadata: [("api".to_owned(), url.to_owned())].into(),
    };
    let (mut journal, _) = Journal::open(&state).unwrap();
    for record in [
        JournalRecord::RunStarted { run_id: RunId(1) },
        JournalRecord::LeaseIntent {
            node: LogicalNodeId::from("workers-0"),
            nonce: Nonce(1),
            attempt: 1,
        },
        JournalRecord::LeaseIntent {
            node: LogicalNodeId::from("workers-1"),
            nonce: Nonce(2),
            attempt: 1,
        },
        JournalRecord::LeaseKnown {
            node: LogicalNodeId::from("workers-1"),
            lease: Arc::new(lease),
        },
    ] {
        journal.append(&record).unwrap();
    }
    state
}

/// Every stdout line as JSON; the run must have failed with nothing on stderr.
fn failed_json(out: &std::process::Output) -> Vec<Value> {
    let shown = text(out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(out.stderr.is_empty(), "stderr with --json: {shown}");
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    assert!(!lines.is_empty(), "{shown}");
    lines
}

#[test]
fn down_json_with_every_list_failing_is_json_naming_the_error() {
    let dir = scratch("down-json-lists");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime
        .block_on(vastai::serve(
            "127.0.0.1:0".parse().unwrap(),
            vastai::fake::FakeConfig::fast(KEY),
            Arc::new(vastai::fake::MemoryBackend::default()),
        ))
        .unwrap();
    let state = state_dir(&dir, &fake.base_url());
    let out = command(&state)
        .env("VAST_API_KEY", WRONG_KEY)
        .args(["--json", "down"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let lines = failed_json(&out);
    assert!(
        fake.requests(vastai::limits::Endpoint::ListInstances) >= 1,
        "the list was asked"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "down", "{last}");
    assert_eq!(last["what"], "failed", "{last}");
    let error = last["error"].as_str().unwrap();
    assert!(
        error.contains("listing the instances of run-1") && error.contains("Invalid user key"),
        "{error}"
    );
    assert!(error.contains("workers-0 (nonce-1)"), "{error}");
    assert_eq!(
        last["open_intents"],
        serde_json::json!([{"node": "workers-0", "nonce": 1}])
    );
    let not_destroyed = last["not_destroyed"].as_array().unwrap();
    assert_eq!(not_destroyed.len(), 1, "{last}");
    assert_eq!(not_destroyed[0]["node"], "workers-1");
    assert_eq!(not_destroyed[0]["lease"], LEASE);
    let lease_error = not_destroyed[0]["error"].as_str().unwrap();
    assert!(lease_error.starts_with("destroy failed"), "{lease_error}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains(WRONG_KEY) && !stdout.contains(KEY),
        "a key in {stdout}"
    );
    fake.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn down_json_that_cannot_reach_its_provider_is_json_naming_the_leases() {
    let dir = scratch("down-json-no-key");
    // No key anywhere: the provider cannot be built, nothing is destroyed.
    let state = state_dir(&dir, "http://127.0.0.1:9");
    let out = command(&state)
        .env_remove("VAST_API_KEY")
        .env("HOME", &dir)
        .env_remove("XDG_CONFIG_HOME")
        .args(["--json", "down"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let lines = failed_json(&out);
    assert_eq!(lines.len(), 1, "one object: {lines:?}");
    let report = &lines[0];
    assert_eq!(report["what"], "failed", "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("VAST_API_KEY is not set"),
        "{report}"
    );
    assert_eq!(
        report["not_destroyed"],
        serde_json::json!([{"node": "workers-1", "lease": LEASE, "error": null}])
    );
    assert_eq!(
        report["open_intents"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn down_whose_readers_have_gone_still_ends_with_its_exit_code() {
    // `drover down 2>&1 | head -1` once `head` has gone: every line it
    // writes, on stdout or stderr, fails. It still does all it can and
    // exits 1 naming nothing, where it used to abort (SIGABRT) at its
    // first line on stderr.
    let dir = scratch("down-closed-pipes");
    let state = state_dir(&dir, "http://127.0.0.1:9");
    let (out_reader, out_writer) = std::io::pipe().expect("a pipe");
    let (err_reader, err_writer) = std::io::pipe().expect("a pipe");
    drop((out_reader, err_reader));
    let status = command(&state)
        .env_remove("VAST_API_KEY")
        .env("HOME", &dir)
        .env_remove("XDG_CONFIG_HOME")
        .arg("down")
        .stdin(std::process::Stdio::null())
        .stdout(out_writer)
        .stderr(err_writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "{status}");
    std::fs::remove_dir_all(&dir).unwrap();
}
