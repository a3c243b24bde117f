//! The operator's commands (`Start`, `Teardown`), timer ticks, and the
//! reconciler's passes and actions.

use super::{Orchestrator, Phase, Slot};
use crate::bootstrap;
use crate::ids::SessionId;
use crate::node;
use crate::port::{Effect, JournalRecord};
use crate::reconcile::{self, Action, Condition, NodeView};
use crate::time::Instant;

/// Reconcile passes at most per input: a pass's actions can make another
/// pass due (a replacement whose destroy finished at once), never forever.
const RECONCILE_PASSES_MAX: u32 = 4;

impl Orchestrator {
    pub(super) fn on_start(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let Phase::Idle { journaled } = self.phase else {
            self.counters.ignored_commands += 1;
            return;
        };
        self.phase = Phase::Running;
        if !journaled {
            out.push({
                Effect::Persist(JournalRecord::RunStarted {
                    run_id: self.plan.run_id,
                })
            });
        }
        let waiting: Vec<Slot> = self
            .occupied()
            .filter(|(_, n)| n.awaits_start())
            .map(|(slot, _)| slot)
            .collect();
        for slot in waiting {
            let excluded_hosts = self.excluded_hosts();
            self.deliver_node(now, slot, node::Input::Start { excluded_hosts }, out);
        }
        self.expect_restored(now, out);
        self.reconcile_due = true;
    }

    pub(super) fn on_teardown(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let started = match self.phase {
            Phase::Idle { .. } => false,
            Phase::Running => true,
            Phase::TearingDown { started } => started,
        };
        self.phase = Phase::TearingDown { started };
        // A destroyed node may still have work: a stray lease, or restored
        // work a destroy cancels.
        let slots: Vec<Slot> = self
            .occupied()
            .filter(|(_, n)| {
                n.stage() != node::Lifecycle::Destroyed || !n.holds_no_lease() || n.awaits_start()
            })
            .map(|(slot, _)| slot)
            .collect();
        for slot in slots {
            self.deliver_node(now, slot, node::Input::Destroy, out);
        }
    }

    /// Ticks every child whose deadline is due: nodes first, then sessions,
    /// each in id order; children whose deadline is later are not visited.
    pub(super) fn on_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        use crate::Machine as _;
        let due = |at: Option<Instant>| at.is_some_and(|at| at <= now);
        let nodes: Vec<Slot> = (self.nodes.iter())
            .filter(|(_, node)| due(node.next_deadline()))
            .map(|(slot, _)| *slot)
            .collect();
        // Sessions go in id order; one a node's tick ended is skipped.
        let mut sessions: Vec<(SessionId, Slot)> = (self.sessions.iter())
            .filter(|(_, s)| due(s.machine.next_deadline()))
            .map(|(slot, s)| (s.id, *slot))
            .collect();
        sessions.sort_unstable();
        for slot in nodes {
            self.deliver_node(now, slot, node::Input::Tick, out);
        }
        for (id, slot) in sessions {
            self.deliver_session(now, slot, id, bootstrap::Input::Tick, out);
        }
        if self.requeue_at.is_some_and(|at| at <= now) {
            self.requeue_at = None;
            self.reconcile_due = true;
        }
        self.tick_pipeline(now, out);
    }

    /// The ledger's nodes with their slots, in node-id order.
    pub(super) fn occupied(&self) -> impl Iterator<Item = (Slot, &node::Machine)> {
        self.nodes.iter().map(|(slot, machine)| (*slot, machine))
    }

    /// Hosts new leases must avoid, when the policy quarantines.
    fn excluded_hosts(&self) -> Vec<String> {
        match self.reconciler.quarantine_threshold() {
            Some(threshold) => reconcile::excluded_hosts(&self.quarantine, threshold),
            None => Vec::new(),
        }
    }

    #[inline(never)]
    pub(super) fn reconcile(&mut self, now: Instant, out: &mut Vec<Effect>) {
        for _ in 0..RECONCILE_PASSES_MAX {
            if !self.reconcile_due {
                return;
            }
            self.reconcile_due = false;
            if self.phase != Phase::Running {
                return;
            }
            let views: Vec<NodeView> = self.nodes.values().map(view).collect();
            let decision = reconcile::reconcile(
                &self.reconciler,
                &self.desired,
                &views,
                &self.quarantine,
                now,
            );
            self.requeue_at = decision.requeue_at;
            for action in decision.actions {
                self.apply(now, action, out);
            }
        }
    }

    fn apply(&mut self, now: Instant, action: Action, out: &mut Vec<Effect>) {
        let excluded_hosts = self.excluded_hosts();
        match action {
            Action::Create { group, index } => {
                let Some(slot) = self.group_slot(&group, index) else {
                    return;
                };
                let Some(spec) = self.specs[slot.at()].take() else {
                    return;
                };
                let machine = self.new_node(slot, spec);
                self.insert_node(slot, machine);
                self.deliver_node(now, slot, node::Input::Start { excluded_hosts }, out);
            }
            Action::Destroy { node } => match self.slot_of(&node) {
                Some(slot) => self.deliver_node(now, slot, node::Input::Destroy, out),
                None => self.counters.unknown_nodes += 1,
            },
            Action::Replace { node, attempt } => match self.slot_of(&node) {
                Some(slot) => {
                    let input = node::Input::Replace {
                        attempt,
                        excluded_hosts,
                    };
                    self.deliver_node(now, slot, input, out)
                }
                None => self.counters.unknown_nodes += 1,
            },
        }
    }
}

/// The reconciler's coarse view of one node.
fn view(machine: &node::Machine) -> NodeView {
    use node::Lifecycle as S;
    let condition = match machine.stage() {
        S::Dormant => Condition::Ready,
        S::Failed => Condition::Failed {
            at: machine.failed_at().unwrap_or(Instant::ZERO),
        },
        S::Destroying => Condition::Destroying,
        S::Destroyed => Condition::Destroyed,
        _ => Condition::Provisioning,
    };
    NodeView {
        node: machine.node().clone(),
        group: machine.spec().group_id.clone(),
        index: machine.spec().index,
        attempt: machine.attempt(),
        condition,
        host: machine.lease().and_then(|lease| lease.host_id.clone()),
    }
}
