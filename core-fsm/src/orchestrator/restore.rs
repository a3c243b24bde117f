//! Rebuilding the composite from the journal after a restart, and the
//! plan's specs in slot order.

use super::{Config, Orchestrator, Slot};
use crate::ids::{GroupId, LogicalNodeId};
use crate::node;
use crate::plan::{LogicalNodeSpec, RunPlan};
use crate::port::JournalRecord;
use crate::reconcile;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Orchestrator {
    /// A composite rebuilt from `journal` after a restart; `Start` resumes
    /// each node: an open intent is resolved by listing leases, a known
    /// lease of a node that was not ready is bootstrapped again, a ready
    /// node is kept, a requested destroy is finished.
    ///
    /// A journaled node the plan no longer has (its group was removed or
    /// shrunk) is restored too, as a node to destroy: its lease, open
    /// intent or stray leases must not outlive the run.
    ///
    /// The operator's `DesiredSet` records replace the plan's counts, in
    /// journal order; a node destroyed before a count wanted its index
    /// again is forgotten but for its log numbers (a new node takes its
    /// id: `Start` provisions it, continuing them).
    pub fn restore(mut config: Config, journal: &[JournalRecord]) -> Orchestrator {
        let mut fold = node::JournalFold::default();
        for record in journal {
            if let JournalRecord::DesiredSet { group, count } = record {
                let before = (config.plan.groups.iter())
                    .find(|g| &g.group_id == group)
                    .map_or(*count, |g| g.count);
                super::scale::set_plan_count(&mut config.plan, group, *count);
                // A node wanted again starts a new story under its id; only
                // its log numbers carry over.
                for index in before..*count {
                    let id = crate::plan::node_id(group, index);
                    if let Some(old) = fold.nodes.get_mut(&id) {
                        *old = node::Journaled {
                            log_seqs: old.log_seqs,
                            ..node::Journaled::default()
                        };
                    }
                }
            }
            fold.apply(record);
        }
        let (run_journaled, mut folds) = (fold.run_id.is_some(), fold.nodes);
        let planned = crate::plan::expand(&config.plan);
        let mut unplanned = Vec::new();
        let mut retired = BTreeMap::new();
        for (id, fold) in &mut folds {
            if planned.iter().any(|spec| &spec.node_id == id) {
                continue;
            }
            if let Some(spec) = unplanned_spec(&config.plan, id, fold) {
                fold.destroy_requested = true;
                fold.replace = None;
                unplanned.push(spec);
            } else {
                // Nothing to destroy, so no slot; a count that wants it
                // again makes a node that continues its log numbers.
                retired.insert(id.clone(), fold.log_seqs);
            }
        }
        let unplanned_count = unplanned.len();
        // Draws after a restart must differ from the first life's: the
        // journal's length names the life.
        let mut orchestrator = Orchestrator::build(config, journal.len() as u64, unplanned);
        orchestrator.phase = super::Phase::Idle {
            journaled: run_journaled,
        };
        orchestrator.retired = retired;
        orchestrator.counters.unplanned_journal_nodes = unplanned_count as u64;
        for (id, fold) in folds {
            let Some(slot) = orchestrator.slot_of(&id) else {
                continue;
            };
            let Some(spec) = orchestrator.specs[slot.at()].take() else {
                continue;
            };
            if let (Some(lease), Some(_)) = (&fold.lease, &fold.failed)
                && let Some(host) = &lease.host_id
            {
                orchestrator.quarantine.record_failure(host);
            }
            let rng = orchestrator.node_rng(&id);
            let machine = node::Machine::restore(orchestrator.node_config, spec, rng, &fold);
            orchestrator.insert_node(slot, machine);
        }
        orchestrator
    }
}

/// A spec for a journaled node the plan lacks, if it has anything to
/// destroy: its group's spec if the group is still planned (it shrank),
/// else the first group's, named after the node. The provider is the
/// journaled lease's when one is known (an open intent is listed at the
/// plan's provider).
fn unplanned_spec(
    plan: &RunPlan,
    id: &LogicalNodeId,
    fold: &node::Journaled,
) -> Option<LogicalNodeSpec> {
    if fold.standing_lease().is_none() && !fold.intent_open && fold.strays.is_empty() {
        return None;
    }
    let (group, index) = match id.as_str().rsplit_once('-') {
        Some((group, index)) => (group, index.parse().unwrap_or(0)),
        None => (id.as_str(), 0),
    };
    let like = plan
        .groups
        .iter()
        .find(|g| g.group_id.as_str() == group)
        .or(plan.groups.first())?;
    let provider = fold
        .lease
        .as_ref()
        .or(fold.strays.first())
        .map_or(like.provider, |lease| lease.provider);
    Some(LogicalNodeSpec {
        run_id: plan.run_id,
        node_id: id.clone(),
        group_id: crate::ids::GroupId::from(group),
        index,
        role: like.role.clone(),
        provider,
        shape: Arc::new(like.shape.clone()),
        boot: Arc::new(like.boot.clone()),
        join: Arc::new(like.join.clone()),
    })
}

/// The plan's specs in node-id order, one per id (the last one wins, as in
/// a map, should an invalid plan repeat an id).
pub(super) fn slotted(mut specs: Vec<LogicalNodeSpec>) -> Vec<LogicalNodeSpec> {
    specs.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    if specs
        .windows(2)
        .all(|pair| pair[0].node_id != pair[1].node_id)
    {
        // Every id once (as in any valid plan): nothing to drop.
        return specs;
    }
    let mut out: Vec<LogicalNodeSpec> = Vec::with_capacity(specs.len());
    for spec in specs {
        match out.last_mut() {
            Some(last) if last.node_id == spec.node_id => *last = spec,
            _ => out.push(spec),
        }
    }
    out
}

/// The slots of each wanted group's nodes, by index: `{group}-{index}` for
/// every index below the group's wanted count. Without `check_ids`, every
/// spec is taken to be planned (named `{group}-{index}`, as expansion names
/// them).
pub(super) fn group_slots(
    specs: &[LogicalNodeSpec],
    desired: &reconcile::Desired,
    check_ids: bool,
) -> Vec<(GroupId, Vec<Slot>)> {
    let mut found: BTreeMap<GroupId, Vec<Option<Slot>>> = desired
        .groups
        .iter()
        .map(|(group, count)| (group.clone(), vec![None; *count as usize]))
        .collect();
    for (n, spec) in (0u32..).zip(specs) {
        let is_planned =
            !check_ids || crate::plan::is_node_id(&spec.node_id, &spec.group_id, spec.index);
        if let Some(slots) = found.get_mut(&spec.group_id)
            && let Some(entry) = slots.get_mut(spec.index as usize)
            && is_planned
        {
            *entry = Some(Slot(n));
        }
    }
    // A wanted node always has a spec (the plan expands into them), so
    // every entry is found; the prefix that is keeps the index exact.
    found
        .into_iter()
        .map(|(group, slots)| (group, slots.into_iter().map_while(|s| s).collect()))
        .collect()
}
