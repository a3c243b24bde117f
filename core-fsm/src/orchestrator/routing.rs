//! Routing: answers to their owners by operation id, child effects to the
//! world (recording routes) or to a sibling child (a node's session, a
//! session's node), depth first and in order.

use super::{Orchestrator, Owner, Session, Slot};
use crate::Machine as _;
use crate::bootstrap;
use crate::ids::{AgentId, LeaseId, LogicalNodeId, OpId, SessionId};
use crate::node;
use crate::plan::ReplacementPolicy;
use crate::port::{Effect, Input};
use crate::time::Instant;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Orchestrator {
    /// Routes an answer by its operation id.
    pub(super) fn route_answer(&mut self, now: Instant, answer: Input, out: &mut Vec<Effect>) {
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
            | Input::SetDesired { .. }
            | Input::AgentJoined { .. }
            | Input::AgentLost { .. }
            | Input::Pipeline(_) => {
                unreachable!("route_answer is given answers only")
            }
        }
    }

    fn answer_node(&mut self, now: Instant, op: OpId, input: node::Input, out: &mut Vec<Effect>) {
        let Some(&Owner::Node(slot)) = self.routes.get(&op) else {
            self.counters.unknown_ops += 1;
            return;
        };
        self.routes.remove(&op);
        self.deliver_node(now, slot, input, out);
    }

    fn answer_session(
        &mut self,
        now: Instant,
        op: OpId,
        last: bool,
        input: bootstrap::Input,
        out: &mut Vec<Effect>,
    ) {
        let Some(&Owner::Session(slot)) = self.routes.get(&op) else {
            self.counters.unknown_ops += 1;
            return;
        };
        let session = (self.sessions.get_mut(&slot)).expect("O4: a routed session is live");
        let id = session.id;
        if last {
            // Answered: the session's end has no route left to drop for it.
            session.ops.retain(|o| *o != op);
            self.routes.remove(&op);
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
        out: &mut Vec<Effect>,
    ) {
        match self.slot_of(&id) {
            Some(slot)
                if self
                    .nodes
                    .get(&slot)
                    .is_some_and(|m| m.expects_join(&lease_id)) =>
            {
                self.deliver_node(now, slot, node::Input::AgentJoined { lease_id, agent }, out)
            }
            _ => self.counters.ignored_joins += 1,
        }
    }

    /// Runs one input through a node manager, then routes its effects in
    /// order: to the world (recording routes), or to its session.
    pub(super) fn deliver_node(
        &mut self,
        now: Instant,
        slot: Slot,
        input: node::Input,
        out: &mut Vec<Effect>,
    ) {
        let Some(machine) = self.nodes.get_mut(&slot) else {
            self.counters.unknown_nodes += 1;
            return;
        };
        let (ignored, strays) = (machine.ignored(), machine.stray_leases());
        machine.swap_ids(&mut self.ops, &mut self.session_ids);
        let effects = machine.handle(now, input);
        machine.swap_ids(&mut self.ops, &mut self.session_ids);
        self.counters.ignored_by_nodes += machine.ignored() - ignored;
        self.counters.stray_leases += machine.stray_leases() - strays;
        for effect in effects {
            self.node_effect(now, slot, effect, out);
        }
        if let Some(agent) = self.dead_ready_agent(slot) {
            let reason = super::DEAD_REASON.to_owned();
            self.deliver_node(now, slot, node::Input::AgentLost { agent, reason }, out);
        }
    }

    /// Routes one node effect.
    fn node_effect(
        &mut self,
        now: Instant,
        slot: Slot,
        effect: node::Effect,
        out: &mut Vec<Effect>,
    ) {
        let mut changes = Changes::default();
        let id = &self.ids[slot.at()];
        let Some(effect) = emit_node(out, &mut self.routes, slot, id, &mut changes, effect) else {
            return self.node_changed(slot, changes);
        };
        match effect {
            node::Effect::StartBootstrap {
                session,
                endpoint,
                lease_id,
                log_seqs,
            } => {
                let spec = self.slot_machine(slot).spec();
                let probe = Arc::clone(&self.probe_command);
                let mut config =
                    bootstrap::Config::with_probe(session, spec, lease_id, endpoint, probe);
                config.log_seqs = log_seqs;
                let machine = bootstrap::Machine::new(config);
                let session_entry = Session {
                    id: session,
                    machine,
                    ops: Vec::new(),
                };
                let before = self.sessions.insert(slot, session_entry);
                assert!(before.is_none(), "O2: one session per node");
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
            other => unreachable!("emit_node routes {other:?}"),
        }
    }

    /// Feeds the quarantine and schedules a reconcile pass when a node
    /// reached a stage the reconciler acts on.
    fn node_changed(&mut self, slot: Slot, changes: Changes) {
        if changes.failed == 0 && !changes.ended {
            return;
        }
        if changes.failed > 0 {
            let host = (self.slot_machine(slot).lease()).and_then(|lease| lease.host_id.clone());
            if let Some(host) = host {
                for _ in 0..changes.failed {
                    self.quarantine.record_failure(&host);
                }
            }
        }
        let replaces = matches!(
            self.reconciler.replacement,
            ReplacementPolicy::Bounded { .. }
        );
        if replaces && changes.ended {
            self.reconcile_due = true;
        }
    }

    /// Runs one input through session `id` of the node in `slot`, then
    /// routes its effects in order: to the world (recording routes), an
    /// observation to its node, its end to the composite. A session that
    /// has ended ignores the input.
    pub(super) fn deliver_session(
        &mut self,
        now: Instant,
        slot: Slot,
        id: SessionId,
        input: bootstrap::Input,
        out: &mut Vec<Effect>,
    ) {
        let Some(session) = self.sessions.get_mut(&slot).filter(|s| s.id == id) else {
            self.counters.ignored_by_sessions += 1;
            return;
        };
        let ignored = session.machine.ignored();
        session.machine.swap_ids(&mut self.ops);
        let effects = session.machine.handle(now, input);
        session.machine.swap_ids(&mut self.ops);
        self.counters.ignored_by_sessions += session.machine.ignored() - ignored;
        for effect in effects {
            self.session_effect(now, id, slot, effect, out);
        }
    }

    /// Routes one session effect.
    fn session_effect(
        &mut self,
        now: Instant,
        id: SessionId,
        node: Slot,
        effect: bootstrap::Effect,
        out: &mut Vec<Effect>,
    ) {
        let routes = &mut self.routes;
        let ops = self.sessions.get_mut(&node).map(|s| &mut s.ops);
        let Some(effect) = emit_session(out, routes, ops, node, id, effect) else {
            return;
        };
        match effect {
            bootstrap::Effect::Observed(observation) => {
                self.deliver_node(now, node, node::Input::BootstrapObserved(observation), out)
            }
            bootstrap::Effect::Finished(outcome) => {
                let session = self.sessions.remove(&node);
                let ops = session.expect("a finishing session exists").ops;
                for op in &ops {
                    self.routes.remove(op);
                }
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
            other => unreachable!("emit_session routes {other:?}"),
        }
    }
}

/// What a node's stage changes ask of the composite after its step.
#[derive(Default)]
struct Changes {
    /// Changes to `Failed` (each counts against the lease's host).
    failed: u32,
    /// Whether it reached a stage a replacement acts on.
    ended: bool,
}

/// Routes a node effect bound for the world: records the route of an
/// operation and pushes the port effect. A stage change goes out as
/// `NodeChanged` and is noted in `changes`. An effect for a sibling
/// (a session to start, tell or cancel) is handed back.
fn emit_node(
    out: &mut Vec<Effect>,
    routes: &mut BTreeMap<OpId, Owner>,
    slot: Slot,
    id: &LogicalNodeId,
    changes: &mut Changes,
    effect: node::Effect,
) -> Option<node::Effect> {
    let owner = Owner::Node(slot);
    match effect {
        node::Effect::Persist(record) => out.push(Effect::Persist(record)),
        node::Effect::CreateLease { op, request } => {
            routes.insert(op, owner);
            out.push(Effect::CreateLease { op, request });
        }
        node::Effect::LookupEndpoint { op, lease } => {
            routes.insert(op, owner);
            out.push(Effect::LookupEndpoint { op, lease });
        }
        node::Effect::ListLeases {
            op,
            run_id,
            provider,
        } => {
            routes.insert(op, owner);
            out.push(Effect::ListLeases {
                op,
                run_id,
                provider,
            });
        }
        node::Effect::DestroyLease { op, lease } => {
            routes.insert(op, owner);
            out.push(Effect::DestroyLease { op, lease });
        }
        node::Effect::Changed {
            stage,
            ready,
            failed_reason,
        } => {
            changes.failed += u32::from(stage == node::Lifecycle::Failed);
            changes.ended |= matches!(stage, node::Lifecycle::Failed | node::Lifecycle::Destroyed);
            out.push(Effect::NodeChanged {
                node: id.clone(),
                stage,
                ready,
                failed_reason,
            });
        }
        sibling @ (node::Effect::StartBootstrap { .. }
        | node::Effect::ConvergenceObserved { .. }
        | node::Effect::CancelBootstrap { .. }) => return Some(sibling),
    }
    None
}

/// Routes a session effect bound for the world: records the route of an
/// operation (also in the session's own list, `ops`, while it lives) and
/// pushes the port effect. An observation for the node and the session's
/// end are handed back.
fn emit_session(
    out: &mut Vec<Effect>,
    routes: &mut BTreeMap<OpId, Owner>,
    ops: Option<&mut Vec<OpId>>,
    slot: Slot,
    id: SessionId,
    effect: bootstrap::Effect,
) -> Option<bootstrap::Effect> {
    let route = |op: OpId| {
        routes.insert(op, Owner::Session(slot));
        ops.expect("a routing session exists").push(op);
    };
    match effect {
        bootstrap::Effect::SshConnect {
            op,
            endpoint,
            lease_id,
        } => {
            route(op);
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
            route(op);
            out.push(Effect::SshExec {
                op,
                session: id,
                command,
                purpose,
                join,
            });
        }
        bootstrap::Effect::SshClose { op } => {
            route(op);
            out.push(Effect::SshClose { op, session: id });
        }
        bootstrap::Effect::RevokeJoin(binding) => out.push(Effect::RevokeJoin(binding)),
        bootstrap::Effect::Log(record) => out.push(Effect::Log(record)),
        sibling @ (bootstrap::Effect::Observed(_) | bootstrap::Effect::Finished(_)) => {
            return Some(sibling);
        }
    }
    None
}
