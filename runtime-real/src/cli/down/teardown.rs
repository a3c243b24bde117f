//! `down`'s teardown: the orchestrator composite restored from the journal,
//! sent `Teardown` and driven by the one effect loop (`driver`) over the
//! real ports (tokio clock, input channel, the journal as its disk) and
//! [`DownSink`], until it is torn down or has nothing left in flight, within
//! a bound. The composite's own rules decide everything: each standing
//! lease is destroyed (bounded retries), each open intent is resolved by
//! listing the run's leases by nonce (a lease found is journaled and
//! destroyed; after `list_misses_max` clean misses, spaced by the create
//! timeout, the intent is abandoned; a failed list is retried and never
//! read as an empty fleet), each stray lease is destroyed.

use super::sink::DownSink;
use super::{Errors, say};
use crate::cli::Ledger;
use crate::journal::Journal;
use crate::up::ports::Leases;
use core_fsm::orchestrator::{Config, Orchestrator};
use core_fsm::plan::RunPlan;
use core_fsm::port::{Input, JournalRecord};
use driver::Driver;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Inputs that may wait in the channel (answers of the destroys and lists
/// in flight: a few per node).
const INPUT_QUEUE_MAX: usize = 1024;
/// What `down` allows its destroys and their retries, beyond what an open
/// intent's clean misses take (see [`bound`]).
const DESTROY_BOUND: Duration = Duration::from_secs(300);

/// Tears down what the journal in `state_dir` still holds; whether the
/// composite ended torn down (every lease destroyed, every intent resolved).
/// What failed is said per lease and added to `errors`.
pub(super) async fn from_journal(
    state_dir: &Path,
    json: bool,
    errors: &mut Errors,
) -> anyhow::Result<bool> {
    if !Journal::path_in(state_dir).exists() {
        say(json, "nothing to destroy: no journal", None);
        return Ok(true);
    }
    let (journal, recovered) = Journal::open(state_dir)?;
    let plan_copy = crate::provider::plan_copy_in(state_dir).map_err(anyhow::Error::msg)?;
    let providers =
        crate::provider::for_plan(state_dir, plan_copy.as_ref()).map_err(anyhow::Error::msg)?;
    let plan = plan_of(plan_copy, &recovered.records);
    let bound = bound(&plan);
    // `down` creates nothing, so it draws no nonce: any seed will do.
    let config = Config {
        plan,
        seed: 0,
        membership: None,
    };
    let machine = Orchestrator::restore(config, &recovered.records);
    // Each release is said once it is durable.
    let leases = Arc::new(Leases::new(move |node, lease| {
        say(json, "destroyed", Some((node, lease)));
    }));
    leases.restore(&recovered.records);
    let (tx, rx) = mpsc::channel(INPUT_QUEUE_MAX);
    let sink = DownSink::new(state_dir.to_owned(), providers, tx, json);
    let failures = sink.failures();
    let ports = crate::up::ports::orchestrator_ports(journal, leases, rx, sink);
    let mut driver = Driver::new(machine, ports);
    driver.step(Input::Teardown).await?;
    let ended = tokio::time::timeout(bound, driver.run_until(at_rest)).await;
    match ended {
        Ok(outcome) => {
            outcome?;
        }
        Err(_) => errors.run.push(format!(
            "the teardown did not finish in {bound:?}; run `drover down` again"
        )),
    }
    let (machine, _) = driver.into_parts();
    if machine.is_torn_down() {
        return Ok(true);
    }
    // What the journal still holds, with what failed for it.
    let failures = std::mem::take(&mut *failures.lock().expect("failures"));
    let ledger = Ledger::from_records(&Journal::read(state_dir)?.records);
    for (node, lease) in ledger.standing_leases() {
        if let Some(error) = failures.destroys.get(&lease.lease_id) {
            let what = format!("destroy failed: {error}");
            say(json, &what, Some((&node, &lease.lease_id)));
            errors.leases.insert(lease.lease_id.to_string(), what);
        }
    }
    let open = ledger.pending_intents();
    if !open.is_empty() {
        // A failed list saw nothing: the intents it did not find may still
        // have their instances.
        errors.run.extend(failures.lists.into_values());
        let names: Vec<String> = open
            .iter()
            .map(|(node, nonce)| format!("{node} ({nonce})"))
            .collect();
        errors.run.push(format!(
            "{} open intent(s) not resolved, kept open for the next `drover down`: {}",
            open.len(),
            names.join(", "),
        ));
    }
    if errors.leases.is_empty() && errors.run.is_empty() {
        errors
            .run
            .push("the journal still holds leases after the teardown".to_owned());
    }
    Ok(false)
}

/// Torn down, or nothing left in flight: every destroy and list answered
/// and no retry pending (those whose retries are spent stay failed; the
/// next `down` tries them again).
fn at_rest(machine: &Orchestrator) -> bool {
    machine.is_torn_down() || machine.nodes().all(|node| !node.in_flight())
}

/// The plan the composite is restored with: the plan copy `up` left, or,
/// without one, a plan of no node (every journaled node is then restored as
/// one to destroy, through its lease's provider); the run is the journal's.
fn plan_of(copy: Option<RunPlan>, records: &[JournalRecord]) -> RunPlan {
    let mut plan = copy.unwrap_or_else(|| RunPlan::local(0));
    if let Some(JournalRecord::RunStarted { run_id }) = records.first() {
        plan.run_id = *run_id;
    }
    plan
}

/// How long `down` drives the composite: [`DESTROY_BOUND`], plus what the
/// composite gives an open intent before it abandons it (`list_misses_max`
/// clean lists, spaced by the slowest group's create timeout).
fn bound(plan: &RunPlan) -> Duration {
    let create = plan
        .groups
        .iter()
        .map(|g| g.boot.timeouts.lease_create_timeout.as_millis())
        .max()
        .unwrap_or(0);
    let misses = u64::from(core_fsm::node::Config::default().list_misses_max);
    DESTROY_BOUND + Duration::from_millis(create.saturating_mul(misses))
}
