//! `drover down`: destroys every lease the journal knows, whether or not
//! `up` is alive. A live `up` is asked to tear down (SIGTERM) and waited
//! for, with a bound; otherwise the leases are destroyed here, straight from
//! the journal, through the provider, and each release is journaled.
//! Intents whose create may have happened unseen (a crash between intent and
//! answer) are resolved by listing the run's leases by label.

use super::{EXIT_FAILURE, EXIT_OK, Ledger};
use crate::journal::Journal;
use crate::up::control;
use core_fsm::port::{JournalRecord, LeaseFacts, ProviderErrorKind};
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
        eprintln!("drover: {e}; destroying from the journal instead");
    }
    match destroy_from_journal(state_dir, json).await {
        Ok(0) => EXIT_OK,
        Ok(_) => EXIT_FAILURE,
        Err(e) => {
            eprintln!("drover: {e:#}");
            EXIT_FAILURE
        }
    }
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

/// Destroys what the journal still holds; returns how many destroys failed.
async fn destroy_from_journal(state_dir: &Path, json: bool) -> anyhow::Result<usize> {
    if !Journal::path_in(state_dir).exists() {
        say(json, "nothing to destroy: no journal", None);
        return Ok(0);
    }
    let (mut journal, recovered) = Journal::open(state_dir)?;
    let ledger = Ledger::from_records(&recovered.records);
    let providers = crate::up::providers(state_dir)?;
    let mut targets: Vec<(core_fsm::ids::LogicalNodeId, LeaseFacts)> = ledger.standing_leases();
    let pending = ledger.pending_intents();
    if let (Some(run_id), false) = (ledger.run_id, pending.is_empty()) {
        let by_nonce: BTreeMap<_, _> = pending
            .iter()
            .map(|(node, nonce)| (*nonce, node.clone()))
            .collect();
        for provider in providers.values() {
            for lease in provider
                .list_leases(run_id)
                .await
                .map_err(|e| anyhow::anyhow!(e.message))?
            {
                let known = targets.iter().any(|(_, l)| l.lease_id == lease.lease_id);
                if let (Some(node), false) = (by_nonce.get(&lease.nonce), known) {
                    journal.append(&JournalRecord::LeaseKnown {
                        node: node.clone(),
                        lease: lease.clone(),
                    })?;
                    targets.push((node.clone(), lease));
                }
            }
        }
    }
    let mut failures = 0;
    for (node, lease) in targets {
        let Some(provider) = providers.get(&lease.provider) else {
            say(
                json,
                "cannot destroy: provider not in this build",
                Some((&node, &lease)),
            );
            failures += 1;
            continue;
        };
        journal.append(&JournalRecord::DestroyRequested { node: node.clone() })?;
        match provider.destroy_lease(lease.clone()).await {
            Ok(()) => {}
            Err(e) if e.kind == ProviderErrorKind::NotFound => {}
            Err(e) => {
                say(
                    json,
                    &format!("destroy failed: {}", e.message),
                    Some((&node, &lease)),
                );
                failures += 1;
                continue;
            }
        }
        crate::ssh::forget_host(state_dir, &lease.lease_id);
        journal.append(&JournalRecord::LeaseReleased {
            node: node.clone(),
            lease_id: lease.lease_id.clone(),
        })?;
        say(json, "destroyed", Some((&node, &lease)));
    }
    // Intents that found no lease did not take effect: close them.
    for (node, nonce) in
        Ledger::from_records(&crate::journal::Journal::read(state_dir)?.records).pending_intents()
    {
        journal.append(&JournalRecord::IntentAbandoned { node, nonce })?;
    }
    Ok(failures)
}

fn say(json: bool, what: &str, target: Option<(&core_fsm::ids::LogicalNodeId, &LeaseFacts)>) {
    if json {
        let doc = serde_json::json!({
            "event": "down", "what": what,
            "node": target.map(|t| t.0.clone()), "lease": target.map(|t| t.1.lease_id.clone()),
        });
        println!("{doc}");
    } else {
        match target {
            Some((node, lease)) => println!("{node} {}: {what}", lease.lease_id),
            None => println!("{what}"),
        }
    }
}
