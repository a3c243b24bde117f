//! The operator's `SetDesired { group, count }`: a group's wanted count
//! changes, and the reconciler does the rest (R3 creates the new indexes,
//! R4 destroys the group's tail). The count is journaled (`DesiredSet`), so
//! a restart resumes the same pool.
//!
//! Slots are the plan's nodes in node-id order; a node that scaling brings
//! in for the first time gets a new slot at the end (every existing slot,
//! route and deadline keeps its number), and the ids past `sorted_len` are
//! searched one by one (there are at most the operator's additions).
//!
//! An index wanted again whose node was destroyed (a -1, then a +1) is a
//! fresh node under the same id: the destroyed record is dropped (R7: the
//! reconciler re-creates only a slot without a record), its log numbers
//! carry over to the new node, and its generator is drawn afresh, so its
//! nonces differ from the destroyed node's.

use super::{Orchestrator, Slot};
use crate::ids::{GroupId, LogicalNodeId};
use crate::node;
use crate::plan::{GROUP_COUNT_MAX, LogicalNodeSpec, PLAN_NODES_MAX, RunPlan};
use crate::port::{Effect, JournalRecord, LogSeqs};
use crate::time::Instant;
use std::sync::Arc;

/// Why a `SetDesired` was refused (the composite counts it; a runtime asks
/// [`Orchestrator::scale_refusal`] first to tell the operator why).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleRefusal {
    /// The plan has no such group.
    UnknownGroup,
    /// The count is above `GROUP_COUNT_MAX`, or the plan would ask for more
    /// than `PLAN_NODES_MAX` nodes in all.
    TooMany,
    /// Teardown began: nothing is reconciled any more.
    TearingDown,
    /// A node the new count wants again is still going (its lease not yet
    /// destroyed); it can be wanted again once it is gone.
    StillGoing(LogicalNodeId),
}

impl std::fmt::Display for ScaleRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScaleRefusal::UnknownGroup => write!(f, "the run has no such group"),
            ScaleRefusal::TooMany => write!(
                f,
                "at most {GROUP_COUNT_MAX} nodes per group and {PLAN_NODES_MAX} in all"
            ),
            ScaleRefusal::TearingDown => write!(f, "the run is being torn down"),
            ScaleRefusal::StillGoing(node) => {
                write!(
                    f,
                    "`{node}` is still being destroyed; try again once it is gone"
                )
            }
        }
    }
}

impl Orchestrator {
    /// The group's wanted count now (the plan's, or the operator's last
    /// `SetDesired`), `None` for a group the run does not have.
    pub fn desired_count(&self, group: &GroupId) -> Option<u32> {
        self.desired.groups.get(group).copied()
    }

    /// Why `SetDesired { group, count }` would be refused now, if it would.
    pub fn scale_refusal(&self, group: &GroupId, count: u32) -> Option<ScaleRefusal> {
        if self.desired_count(group).is_none() {
            return Some(ScaleRefusal::UnknownGroup);
        }
        if let super::Phase::TearingDown { .. } = self.phase {
            return Some(ScaleRefusal::TearingDown);
        }
        let others: u64 = (self.desired.groups.iter())
            .filter(|(g, _)| *g != group)
            .map(|(_, c)| u64::from(*c))
            .sum();
        if count > GROUP_COUNT_MAX || others + u64::from(count) > u64::from(PLAN_NODES_MAX) {
            return Some(ScaleRefusal::TooMany);
        }
        let wanted_now = self.group_slots_of(group).len() as u32;
        for index in wanted_now..count {
            let id = crate::plan::node_id(group, index);
            if let Some(slot) = self.slot_of(&id)
                && let Some(machine) = self.nodes.get(&slot)
                && !is_gone(machine, self.sessions.contains_key(&slot))
            {
                return Some(ScaleRefusal::StillGoing(id));
            }
        }
        None
    }

    pub(super) fn on_set_desired(
        &mut self,
        now: Instant,
        group: GroupId,
        count: u32,
        out: &mut Vec<Effect>,
    ) {
        if self.scale_refusal(&group, count).is_some() {
            self.counters.ignored_commands += 1;
            return;
        }
        if self.desired_count(&group) == Some(count) {
            return;
        }
        out.push(Effect::Persist(JournalRecord::DesiredSet {
            group: group.clone(),
            count,
        }));
        let dropped = self.set_count(&group, count);
        // A replacement begun before the shrink would journal a new intent
        // once its old lease is gone (R4 leaves `Destroying` nodes alone):
        // an explicit destroy cancels it, as it would an operator's.
        for slot in dropped {
            if self
                .nodes
                .get(&slot)
                .is_some_and(node::Machine::is_replacing)
            {
                self.deliver_node(now, slot, node::Input::Destroy, out);
            }
        }
        self.reconcile_due = true;
    }

    fn group_slots_of(&self, group: &GroupId) -> &[Slot] {
        match self.group_slots.binary_search_by(|(g, _)| g.cmp(group)) {
            Ok(at) => &self.group_slots[at].1,
            Err(_) => &[],
        }
    }

    /// Makes `count` the group's wanted count: the plan, the reconciler's
    /// desired pool and the group index follow. Returns the slots no
    /// longer wanted.
    fn set_count(&mut self, group: &GroupId, count: u32) -> Vec<Slot> {
        set_plan_count(&mut self.plan, group, count);
        self.desired.groups.insert(group.clone(), count);
        let at = (self.group_slots.binary_search_by(|(g, _)| g.cmp(group)))
            .expect("a known group is indexed");
        let wanted_now = self.group_slots[at].1.len() as u32;
        if count <= wanted_now {
            return self.group_slots[at].1.split_off(count as usize);
        }
        for index in wanted_now..count {
            let spec = spec_of(&self.plan, group, index).expect("a known group");
            let slot = match self.slot_of(&spec.node_id) {
                Some(slot) => {
                    self.drop_gone(slot);
                    self.specs[slot.at()] = Some(spec);
                    slot
                }
                None => self.push_slot(spec),
            };
            self.group_slots[at].1.push(slot);
        }
        Vec::new()
    }

    /// A new slot at the end for a node the run never had.
    fn push_slot(&mut self, spec: LogicalNodeSpec) -> Slot {
        let slot = Slot(u32::try_from(self.ids.len()).expect("fewer than 2^32 nodes"));
        if let Some(seqs) = self.retired.remove(&spec.node_id) {
            self.revivals += 1;
            self.revived.insert(slot, (self.revivals, seqs));
        }
        self.ids.push(spec.node_id.clone());
        self.specs.push(Some(spec));
        slot
    }

    /// Drops the record of a destroyed node that is wanted again, keeping
    /// what its successor must continue: its log numbers, and a fresh
    /// generator draw.
    fn drop_gone(&mut self, slot: Slot) {
        let Some(machine) = self.nodes.remove(&slot) else {
            return;
        };
        self.revivals += 1;
        let seqs = machine.log_seqs();
        self.revived.insert(slot, (self.revivals, seqs));
        // A late answer to the old node is nobody's now (counted as
        // unknown), never the new node's.
        self.routes
            .retain(|_, owner| *owner != super::Owner::Node(slot));
    }

    /// A node manager for the slot's spec: a revived one continues its
    /// predecessor's log numbers and draws from its own generator.
    pub(super) fn new_node(&mut self, slot: Slot, spec: LogicalNodeSpec) -> node::Machine {
        let mut rng = self.node_rng(&spec.node_id);
        let revived: Option<(u64, LogSeqs)> = self.revived.remove(&slot);
        if let Some((generation, _)) = revived {
            rng = rng.derive(generation);
        }
        let mut machine = node::Machine::new(self.node_config, spec, rng);
        if let Some((_, seqs)) = revived {
            machine.raise_log_seqs(seqs);
        }
        machine
    }

    /// The slot of an id past the sorted prefix (a node scaling added).
    pub(super) fn added_slot(&self, id: &LogicalNodeId) -> Option<Slot> {
        let at = self.ids[self.sorted_len..].iter().position(|i| i == id)?;
        Some(Slot(
            u32::try_from(self.sorted_len + at).expect("fewer than 2^32 nodes"),
        ))
    }
}

/// Whether a node is gone for good: destroyed, holding no lease, no work
/// left, no session.
pub(super) fn is_gone(machine: &node::Machine, has_session: bool) -> bool {
    machine.stage() == node::Lifecycle::Destroyed
        && machine.holds_no_lease()
        && !machine.awaits_start()
        && !machine.in_flight()
        && !has_session
}

pub(super) fn set_plan_count(plan: &mut RunPlan, group: &GroupId, count: u32) {
    if let Some(g) = plan.groups.iter_mut().find(|g| &g.group_id == group) {
        g.count = count;
    }
}

/// The spec of node `index` of a planned group.
pub(super) fn spec_of(plan: &RunPlan, group: &GroupId, index: u32) -> Option<LogicalNodeSpec> {
    let g = plan.groups.iter().find(|g| &g.group_id == group)?;
    Some(LogicalNodeSpec {
        run_id: plan.run_id,
        node_id: crate::plan::node_id(group, index),
        group_id: group.clone(),
        index,
        role: g.role.clone(),
        provider: g.provider,
        shape: Arc::new(g.shape.clone()),
        boot: Arc::new(g.boot.clone()),
        join: Arc::new(g.join.clone()),
    })
}
