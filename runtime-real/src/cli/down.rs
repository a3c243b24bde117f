//! `drover down`: destroys every lease the journal knows, whether or not
//! `up` is alive. A live `up` is asked to tear down (SIGTERM) and waited
//! for, with a bound; otherwise the leases are destroyed here, straight from
//! the journal, through their providers, in parallel, and each release is
//! journaled. Only then are intents whose create may have happened unseen (a
//! crash between intent and answer) resolved by listing the run's leases by
//! label, so a provider that cannot list delays only what only a list can
//! find. A failed list is an error that keeps those intents open, never an
//! empty fleet.
//!
//! With `--json` everything goes to stdout as NDJSON: one `down` event per
//! lease, and a failed `down` ends with one object naming the errors, the
//! leases the journal still holds and the intents it keeps open; nothing is
//! written to stderr.

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
        let what = "destroying from the journal instead";
        if json {
            println!(
                "{}",
                serde_json::json!({"event": "down", "what": what, "error": e})
            );
        } else {
            eprintln!("drover: {e}; {what}");
        }
    }
    let mut errors = Errors::default();
    let failures = match destroy_from_journal(state_dir, json, &mut errors).await {
        Ok(failures) => failures,
        Err(e) => {
            errors.run.push(format!("{e:#}"));
            1
        }
    };
    if failures == 0 {
        return EXIT_OK;
    }
    if json {
        println!("{}", failure_report(state_dir, &errors));
    } else {
        // The lease errors were said as they came, on stdout.
        for error in &errors.run {
            eprintln!("drover: {error}");
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

/// Destroys what the journal still holds, then resolves the open intents;
/// returns how many steps failed (destroys, and lists that could not be
/// read). Known leases go first, so a provider that cannot list leaves no
/// lease standing that the journal already names.
async fn destroy_from_journal(
    state_dir: &Path,
    json: bool,
    errors: &mut Errors,
) -> anyhow::Result<usize> {
    if !Journal::path_in(state_dir).exists() {
        say(json, "nothing to destroy: no journal", None);
        return Ok(0);
    }
    let (mut journal, recovered) = Journal::open(state_dir)?;
    let ledger = Ledger::from_records(&recovered.records);
    let providers = crate::up::providers(state_dir)?;
    let known = ledger.standing_leases();
    let mut failures = destroy_all(
        state_dir,
        json,
        &mut journal,
        &providers,
        known.clone(),
        errors,
    )
    .await?;
    let pending = ledger.pending_intents();
    let Some(run_id) = ledger.run_id.filter(|_| !pending.is_empty()) else {
        return Ok(failures);
    };
    let mut found = resolve_intents(&mut journal, &providers, run_id, &pending, &known).await?;
    let unfound = pending.len() > found.leases.len();
    if unfound && found.list_errors.is_empty() {
        // A create the provider accepted just before `up` died may land a
        // moment after the list: look once more before giving an intent up.
        tokio::time::sleep(INTENT_GRACE).await;
        let seen: Vec<_> = known.iter().chain(&found.leases).cloned().collect();
        let again = resolve_intents(&mut journal, &providers, run_id, &pending, &seen).await?;
        found.leases.extend(again.leases);
        found.list_errors.extend(again.list_errors);
    }
    failures += destroy_all(
        state_dir,
        json,
        &mut journal,
        &providers,
        found.leases,
        errors,
    )
    .await?;
    if !found.list_errors.is_empty() {
        // A list that failed saw nothing: an intent it did not find may
        // still have its instance, so every open intent stays open.
        let open = Ledger::from_records(&Journal::read(state_dir)?.records).pending_intents();
        let names: Vec<String> = open
            .iter()
            .map(|(node, nonce)| format!("{node} ({nonce})"))
            .collect();
        let failed_lists = found.list_errors.len();
        errors.run.extend(found.list_errors);
        errors.run.push(format!(
            "{} open intent(s) not resolved, kept open for the next `drover down`: {}",
            open.len(),
            names.join(", "),
        ));
        return Ok(failures + failed_lists);
    }
    // Every list answered: intents that found no lease did not take effect.
    for (node, nonce) in Ledger::from_records(&Journal::read(state_dir)?.records).pending_intents()
    {
        journal.append(&JournalRecord::IntentAbandoned { node, nonce })?;
    }
    Ok(failures)
}

/// How long `down` waits before listing again for intents the first list
/// did not find (a create in flight when `up` died).
const INTENT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

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
    errors: &mut Errors,
) -> anyhow::Result<usize> {
    let mut failures = 0;
    // One task per lease the journal names: bounded by the run's nodes.
    let mut running = tokio::task::JoinSet::new();
    for (node, lease) in targets {
        let Some(provider) = providers.get(&lease.provider).cloned() else {
            let what = "cannot destroy: provider not in this build";
            say(json, what, Some((&node, &lease)));
            errors
                .leases
                .insert(lease.lease_id.to_string(), what.to_owned());
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
                let what = format!("destroy failed: {}", e.message);
                say(json, &what, Some((&node, &lease)));
                errors.leases.insert(lease.lease_id.to_string(), what);
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
