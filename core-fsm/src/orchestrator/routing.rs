//! Routing: answers to their owners by operation id, child effects to the
//! world (recording routes) or to a sibling child (a node's session, a
//! session's node), depth first and in order.

use super::{Orchestrator, Owner, Session, Slot};
use crate::bootstrap;
use crate::ids::{AgentId, LeaseId, LogicalNodeId, OpId, SessionId};
use crate::node;
use crate::plan::ReplacementPolicy;
use crate::port::{Effect, Input};
use crate::time::Instant;
use std::sync::Arc;

type Out = Vec<Effect>;

impl Orchestrator {
    /// Routes an answer by its operation id.
    pub(super) fn route_answer(&mut self, now: Instant, answer: Input, out: &mut Out) {
        match answer {
            Input::LeaseCreated { op, result } => {
                self.answer_node(now, op, node::Input::LeaseCreated { op, result }, out)
            }
            Input::EndpointLooked { op, result } => {
                self.answer_node(now, op, node::Input::EndpointLooked { op, result }, out)
            }
            Input::LeaseDestroyed { op, result } => {
                self.answer_node(now, op, node::Input::LeaseDestroyed { op, result }, out)
            }
            Input::LeasesListed { op, result } => {
                self.answer_node(now, op, node::Input::LeasesListed { op, result }, out)
            }
            Input::SshConnected { op, result } => self.answer_session(
                now,
                op,
                true,
                bootstrap::Input::SshConnected { op, result },
                out,
            ),
            Input::SshOutput { op, stream, line } => self.answer_session(
                now,
                op,
                false,
                bootstrap::Input::SshOutput { op, stream, line },
                out,
            ),
            Input::SshExited { op, result } => self.answer_session(
                now,
                op,
                true,
                bootstrap::Input::SshExited { op, result },
                out,
            ),
            Input::SshClosed { op } => {
                self.answer_session(now, op, true, bootstrap::Input::SshClosed { op }, out)
            }
            Input::Tick
            | Input::Start
            | Input::Teardown
            | Input::Destroy { .. }
            | Input::AgentJoined { .. } => {
                unreachable!("route_answer is given answers only")
            }
        }
    }

    fn answer_node(&mut self, now: Instant, op: OpId, input: node::Input, out: &mut Out) {
        let Some(&Owner::Node(slot)) = self.routes.get(op.0) else {
            self.counters.unknown_ops += 1;
            return;
        };
        self.routes.remove(op.0);
        self.deliver_node(now, slot, input, out);
    }

    fn answer_session(
        &mut self,
        now: Instant,
        op: OpId,
        last: bool,
        input: bootstrap::Input,
        out: &mut Out,
    ) {
        let Some(&Owner::Session(slot, id)) = self.routes.get(op.0) else {
            self.counters.unknown_ops += 1;
            return;
        };
        if last {
            self.routes.remove(op.0);
        }
        self.deliver_session(now, slot, id, input, out);
    }

    /// A join goes to the node its token was minted for, if that node
    /// expects one for that lease; anything else is ignored and counted.
    pub(super) fn on_joined(
        &mut self,
        now: Instant,
        id: LogicalNodeId,
        lease_id: LeaseId,
        agent: AgentId,
        out: &mut Out,
    ) {
        match self.slot_of(&id) {
            Some(slot)
                if self.nodes[slot.at()]
                    .as_ref()
                    .is_some_and(|m| m.expects_join(&lease_id)) =>
            {
                self.deliver_node(now, slot, node::Input::AgentJoined { lease_id, agent }, out)
            }
            _ => self.counters.ignored_joins += 1,
        }
    }

    /// Runs one input through a node manager and wraps its effects.
    pub(super) fn deliver_node(
        &mut self,
        now: Instant,
        slot: Slot,
        input: node::Input,
        out: &mut Out,
    ) {
        let Some(machine) = self.nodes[slot.at()].as_mut() else {
            self.counters.unknown_nodes += 1;
            return;
        };
        let mut effects = self.node_buffers.pop().unwrap_or_default();
        let (ignored, strays) = (machine.ignored(), machine.stray_leases());
        machine.swap_ids(&mut self.ops, &mut self.session_ids);
        machine.step(now, input, &mut effects);
        machine.swap_ids(&mut self.ops, &mut self.session_ids);
        self.counters.ignored_by_nodes += machine.ignored() - ignored;
        self.counters.stray_leases += machine.stray_leases() - strays;
        self.sync_node(slot);
        for effect in effects.drain(..) {
            self.node_effect(now, slot, effect, out);
        }
        self.node_buffers.push(effects);
    }

    fn node_effect(&mut self, now: Instant, slot: Slot, effect: node::Effect, out: &mut Out) {
        let owner = || Owner::Node(slot);
        match effect {
            node::Effect::Persist(record) => out.push(Effect::Persist(record)),
            node::Effect::CreateLease { op, request } => {
                self.routes.insert(op.0, owner());
                out.push(Effect::CreateLease { op, request });
            }
            node::Effect::LookupEndpoint { op, lease } => {
                self.routes.insert(op.0, owner());
                out.push(Effect::LookupEndpoint { op, lease });
            }
            node::Effect::ListLeases {
                op,
                run_id,
                provider,
            } => {
                self.routes.insert(op.0, owner());
                out.push(Effect::ListLeases {
                    op,
                    run_id,
                    provider,
                });
            }
            node::Effect::DestroyLease { op, lease } => {
                self.routes.insert(op.0, owner());
                out.push(Effect::DestroyLease { op, lease });
            }
            node::Effect::StartBootstrap {
                session,
                endpoint,
                lease_id,
                log_seqs,
            } => {
                let spec = &self.slot_machine(slot).record().desired;
                let probe = Arc::clone(&self.probe_command);
                let mut config =
                    bootstrap::Config::with_probe(session, spec, lease_id, endpoint, probe);
                config.log_seqs = log_seqs;
                let machine = bootstrap::Machine::new(config);
                let ops = (self.spare_op_lists.pop()).unwrap_or_else(|| Vec::with_capacity(8));
                let entry = &mut self.sessions[slot.at()];
                assert!(entry.is_none(), "O2: one session per node");
                *entry = Some(Session {
                    id: session,
                    machine,
                    ops,
                });
                self.live_sessions += 1;
                self.deliver_session(now, slot, session, bootstrap::Input::Start, out);
            }
            node::Effect::ConvergenceObserved { session, agent } => self.deliver_session(
                now,
                slot,
                session,
                bootstrap::Input::ConvergenceObserved { agent },
                out,
            ),
            node::Effect::CancelBootstrap { session } => {
                self.deliver_session(now, slot, session, bootstrap::Input::Cancel, out)
            }
            node::Effect::Changed {
                stage,
                ready,
                failed_reason,
            } => {
                self.node_changed(slot, stage);
                out.push(Effect::NodeChanged {
                    node: self.ids[slot.at()].clone(),
                    stage,
                    ready,
                    failed_reason,
                });
            }
        }
    }

    /// Feeds the quarantine and schedules a reconcile pass when a node
    /// reaches a stage the reconciler acts on.
    fn node_changed(&mut self, slot: Slot, stage: node::Stage) {
        if stage == node::Stage::Failed {
            let host = self
                .slot_machine(slot)
                .record()
                .lease
                .as_ref()
                .and_then(|lease| lease.host_id.clone());
            if let Some(host) = host {
                self.quarantine.record_failure(&host);
            }
        }
        let replaces = matches!(
            self.reconciler.replacement,
            ReplacementPolicy::Bounded { .. }
        );
        if replaces && matches!(stage, node::Stage::Failed | node::Stage::Destroyed) {
            self.reconcile_due = true;
        }
    }

    /// Runs one input through session `id` of the node in `slot`, and
    /// wraps its effects. A session that has ended ignores it.
    pub(super) fn deliver_session(
        &mut self,
        now: Instant,
        slot: Slot,
        id: SessionId,
        input: bootstrap::Input,
        out: &mut Out,
    ) {
        let Some(session) = self.sessions[slot.at()].as_mut().filter(|s| s.id == id) else {
            self.counters.ignored_by_sessions += 1;
            return;
        };
        let mut effects = self.session_buffers.pop().unwrap_or_default();
        let ignored = session.machine.ignored();
        session.machine.swap_ids(&mut self.ops);
        session.machine.step(now, input, &mut effects);
        session.machine.swap_ids(&mut self.ops);
        self.counters.ignored_by_sessions += session.machine.ignored() - ignored;
        self.sync_session(slot);
        for effect in effects.drain(..) {
            self.session_effect(now, id, slot, effect, out);
        }
        self.session_buffers.push(effects);
    }

    fn session_effect(
        &mut self,
        now: Instant,
        id: SessionId,
        node: Slot,
        effect: bootstrap::Effect,
        out: &mut Out,
    ) {
        match effect {
            bootstrap::Effect::SshConnect {
                op,
                endpoint,
                lease_id,
            } => {
                self.route_session(op, node, id);
                out.push(Effect::SshConnect {
                    op,
                    session: id,
                    endpoint,
                    lease_id,
                });
            }
            bootstrap::Effect::SshExec {
                op,
                command,
                purpose,
                join,
            } => {
                self.route_session(op, node, id);
                out.push(Effect::SshExec {
                    op,
                    session: id,
                    command,
                    purpose,
                    join,
                });
            }
            bootstrap::Effect::SshClose { op } => {
                self.route_session(op, node, id);
                out.push(Effect::SshClose { op, session: id });
            }
            bootstrap::Effect::RevokeJoin(binding) => out.push(Effect::RevokeJoin(binding)),
            bootstrap::Effect::Log(record) => out.push(Effect::Log(record)),
            bootstrap::Effect::Observed(observation) => {
                self.deliver_node(now, node, node::Input::BootstrapObserved(observation), out)
            }
            bootstrap::Effect::Finished(outcome) => {
                let mut session = self.sessions[node.at()]
                    .take()
                    .expect("a finishing session exists");
                self.live_sessions -= 1;
                self.sync_session(node);
                for op in session.ops.drain(..) {
                    self.routes.remove(op.0);
                }
                self.spare_op_lists.push(session.ops);
                let input = match outcome {
                    bootstrap::Outcome::Converged => node::Input::BootstrapClosed,
                    bootstrap::Outcome::Failed { stage, reason } => node::Input::BootstrapFailed {
                        reason: format!("bootstrap {stage:?}: {reason}"),
                    },
                    // The node asked for the cancel and has moved on.
                    bootstrap::Outcome::Cancelled => return,
                };
                self.deliver_node(now, node, input, out);
            }
        }
    }

    fn route_session(&mut self, op: OpId, slot: Slot, id: SessionId) {
        self.routes.insert(op.0, Owner::Session(slot, id));
        self.sessions[slot.at()]
            .as_mut()
            .expect("a routing session exists")
            .ops
            .push(op);
    }
}
