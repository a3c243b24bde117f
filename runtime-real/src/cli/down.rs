//! `drover down`: destroys every lease the journal knows, whether or not
//! `up` is alive. A live `up` is asked to tear down (SIGTERM) and waited
//! for, with a bound; otherwise the leases are destroyed here, straight from
//! the journal, through their providers, in parallel, and each release is
//! journaled. Only then are intents whose create may have happened unseen (a
//! crash between intent and answer) resolved by listing the run's leases by
//! label, so a provider that cannot list delays only what only a list can
//! find. A failed list is an error that keeps those intents open, never an
//! empty fleet.

use super::Ledger;
use crate::exit::{EXIT_FAILURE, EXIT_OK};
use crate::journal::Journal;
use crate::provider::Providers;
use crate::up::control;
use core_fsm::ids::{LogicalNodeId, Nonce, RunId};
use core_fsm::port::{JournalRecord, LeaseFacts, ProviderErrorKind};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
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

/// Destroys what the journal still holds, then resolves the open intents;
/// returns how many steps failed (destroys, and lists that could not be
/// read). Known leases go first, so a provider that cannot list leaves no
/// lease standing that the journal already names.
async fn destroy_from_journal(state_dir: &Path, json: bool) -> anyhow::Result<usize> {
    if !Journal::path_in(state_dir).exists() {
        say(json, "nothing to destroy: no journal", None);
        return Ok(0);
    }
    let (mut journal, recovered) = Journal::open(state_dir)?;
    let ledger = Ledger::from_records(&recovered.records);
    let providers = crate::up::providers(state_dir)?;
    let known = ledger.standing_leases();
    let mut failures =
        destroy_all(state_dir, json, &mut journal, &providers, known.clone()).await?;
    let pending = ledger.pending_intents();
    let Some(run_id) = ledger.run_id.filter(|_| !pending.is_empty()) else {
        return Ok(failures);
    };
    let found = resolve_intents(&mut journal, &providers, run_id, &pending, &known).await?;
    failures += destroy_all(state_dir, json, &mut journal, &providers, found.leases).await?;
    if !found.list_errors.is_empty() {
        // A list that failed saw nothing: an intent it did not find may
        // still have its instance, so every open intent stays open.
        let open = Ledger::from_records(&Journal::read(state_dir)?.records).pending_intents();
        let names: Vec<String> = open
            .iter()
            .map(|(node, nonce)| format!("{node} ({nonce})"))
            .collect();
        eprintln!(
            "drover: {}\ndrover: {} open intent(s) not resolved, kept open for the next `drover down`: {}",
            found.list_errors.join("\ndrover: "),
            open.len(),
            names.join(", "),
        );
        return Ok(failures + found.list_errors.len());
    }
    // Every list answered: intents that found no lease did not take effect.
    for (node, nonce) in Ledger::from_records(&Journal::read(state_dir)?.records).pending_intents()
    {
        journal.append(&JournalRecord::IntentAbandoned { node, nonce })?;
    }
    Ok(failures)
}

/// The leases the lists found for open intents, and the lists that failed.
struct Found {
    leases: Vec<(LogicalNodeId, Arc<LeaseFacts>)>,
    list_errors: Vec<String>,
}

/// Lists the run's leases on every provider; a lease whose nonce is an open
/// intent's (and that the journal did not know) is journaled `LeaseKnown`.
async fn resolve_intents(
    journal: &mut Journal,
    providers: &Providers,
    run_id: RunId,
    pending: &[(LogicalNodeId, Nonce)],
    known: &[(LogicalNodeId, Arc<LeaseFacts>)],
) -> anyhow::Result<Found> {
    let by_nonce: BTreeMap<_, _> = pending.iter().map(|(node, nonce)| (*nonce, node)).collect();
    let mut found = Found {
        leases: Vec::new(),
        list_errors: Vec::new(),
    };
    for provider in providers.values() {
        let listed = match provider.list_leases(run_id).await {
            Ok(listed) => listed,
            Err(e) => {
                // The provider's message names itself and its API.
                found.list_errors.push(e.message);
                continue;
            }
        };
        for lease in listed {
            let seen = known
                .iter()
                .chain(&found.leases)
                .any(|(_, l)| l.lease_id == lease.lease_id);
            if let (Some(node), false) = (by_nonce.get(&lease.nonce), seen) {
                journal.append(&JournalRecord::LeaseKnown {
                    node: (*node).clone(),
                    lease: lease.clone(),
                })?;
                found.leases.push(((*node).clone(), lease));
            }
        }
    }
    Ok(found)
}

/// Destroys `targets` in parallel: each destroy is journaled
/// (`DestroyRequested`) before it starts and its release (`LeaseReleased`)
/// as soon as it ends; returns how many failed.
async fn destroy_all(
    state_dir: &Path,
    json: bool,
    journal: &mut Journal,
    providers: &Providers,
    targets: Vec<(LogicalNodeId, Arc<LeaseFacts>)>,
) -> anyhow::Result<usize> {
    let mut failures = 0;
    // One task per lease the journal names: bounded by the run's nodes.
    let mut running = tokio::task::JoinSet::new();
    for (node, lease) in targets {
        let Some(provider) = providers.get(&lease.provider).cloned() else {
            say(
                json,
                "cannot destroy: provider not in this build",
                Some((&node, &lease)),
            );
            failures += 1;
            continue;
        };
        journal.append(&JournalRecord::DestroyRequested { node: node.clone() })?;
        running.spawn(async move {
            let outcome = provider.destroy_lease(lease.clone()).await;
            (node, lease, outcome)
        });
    }
    while let Some(done) = running.join_next().await {
        let (node, lease, outcome) = done?;
        match outcome {
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
    Ok(failures)
}

fn say(json: bool, what: &str, target: Option<(&LogicalNodeId, &LeaseFacts)>) {
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
