//! `drover down`: destroys every lease the journal knows, whether or not
//! `up` is alive. A live `up` is asked to tear down (SIGTERM) and waited
//! for, with a bound; then whatever the journal still holds is torn down
//! here by the orchestrator composite itself, restored from the journal,
//! sent `Teardown` and driven by the one effect loop (`teardown.rs`, with
//! `sink.rs` performing the provider calls): standing leases are destroyed,
//! intents whose create may have happened unseen (a crash between intent
//! and answer) are resolved by listing the run's leases by label. A failed
//! list is an error that keeps those intents open, never an empty fleet.
//!
//! With `--json` everything goes to stdout as NDJSON: one `down` event per
//! lease, and a failed `down` ends with one object naming the errors, the
//! leases the journal still holds and the intents it keeps open; nothing is
//! written to stderr.

mod sink;
mod teardown;

use super::Ledger;
use crate::exit::{EXIT_FAILURE, EXIT_OK};
use crate::journal::Journal;
use crate::up::control;
use core_fsm::ids::{LeaseId, LogicalNodeId};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// How long a live `up` gets to finish its own teardown.
const UP_TEARDOWN_WAIT: Duration = Duration::from_secs(120);

/// Runs `drover down`; returns the exit code.
pub async fn run(state_dir: &Path, json: bool) -> i32 {
    if let Some(pid) = control::running_pid(state_dir)
        && pid != std::process::id()
        && let Err(e) = wait_for_up(pid).await
    {
        let what = "destroying from the journal instead";
        if json {
            let doc = serde_json::json!({"event": "down", "what": what, "error": e});
            crate::stdout::say(&doc.to_string());
        } else {
            crate::stdout::eline!("drover: {e}; {what}");
        }
    }
    let mut errors = Errors::default();
    match teardown::from_journal(state_dir, json, &mut errors).await {
        Ok(true) => return EXIT_OK,
        Ok(false) => {}
        Err(e) => errors.run.push(format!("{e:#}")),
    }
    if json {
        crate::stdout::say(&failure_report(state_dir, &errors).to_string());
    } else {
        // The lease errors were said on stdout, one line per lease.
        for error in &errors.run {
            crate::stdout::eline!("drover: {error}");
        }
    }
    EXIT_FAILURE
}

/// What went wrong: per lease (by lease id), and for the run as a whole
/// (a list that failed, intents kept open, a journal or plan that could
/// not be read).
#[derive(Default)]
struct Errors {
    leases: BTreeMap<String, String>,
    run: Vec<String>,
}

/// The one object a failed `down --json` ends with: the errors, then what
/// the journal still holds (the leases not destroyed, each with its
/// error where one is known, and the intents kept open).
fn failure_report(state_dir: &Path, errors: &Errors) -> serde_json::Value {
    let ledger = Journal::read(state_dir)
        .map(|recovered| Ledger::from_records(&recovered.records))
        .unwrap_or_default();
    let leases: Vec<_> = ledger
        .standing_leases()
        .into_iter()
        .map(|(node, lease)| {
            let error = errors.leases.get(lease.lease_id.as_str());
            serde_json::json!({"node": node, "lease": lease.lease_id, "error": error})
        })
        .collect();
    let intents: Vec<_> = ledger
        .pending_intents()
        .into_iter()
        .map(|(node, nonce)| serde_json::json!({"node": node, "nonce": nonce.0}))
        .collect();
    let all: Vec<String> = errors
        .leases
        .iter()
        .map(|(lease, error)| format!("{lease}: {error}"))
        .chain(errors.run.iter().cloned())
        .collect();
    serde_json::json!({
        "event": "down", "what": "failed", "error": all.join("; "), "errors": all,
        "not_destroyed": leases, "open_intents": intents,
    })
}

/// Signals the running `up` and waits for it to exit.
async fn wait_for_up(pid: u32) -> Result<(), String> {
    control::request_teardown(pid)
        .map_err(|e| format!("cannot signal drover up (pid {pid}): {e}"))?;
    match crate::provider::local::process::wait_exit(pid, UP_TEARDOWN_WAIT).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "drover up (pid {pid}) did not finish its teardown in {UP_TEARDOWN_WAIT:?}"
        )),
        Err(e) => Err(format!("waiting for drover up (pid {pid}): {e}")),
    }
}

/// One `down` line: `NODE LEASE: what` (or `what`); with `--json`, one
/// `{"event":"down","what","node","lease"}` object.
fn say(json: bool, what: &str, target: Option<(&LogicalNodeId, &LeaseId)>) {
    if json {
        let doc = serde_json::json!({
            "event": "down", "what": what,
            "node": target.map(|t| t.0.clone()), "lease": target.map(|t| t.1.clone()),
        });
        crate::stdout::say(&doc.to_string());
    } else {
        match target {
            Some((node, lease)) => crate::stdout::say(&format!("{node} {lease}: {what}")),
            None => crate::stdout::say(what),
        };
    }
}
