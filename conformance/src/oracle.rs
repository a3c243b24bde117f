//! The invariant oracle: world-level safety guarantees, checked after every
//! step from observations alone, so the same oracle judges every backend.
//! It lives outside the machines (TigerBeetle's checkers live outside the
//! replicas): it sees what the world saw, never the machines' insides.
//!
//! The invariants (W1..W10) are listed in `spec/simulation.md`.

mod handoff;

use crate::backend::Violation;
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, Nonce, OpId, SessionId};
use core_fsm::port::{Effect, Input, JournalRecord, LeaseFacts, LogSeqs, LogStream};
use std::collections::{BTreeMap, BTreeSet};

/// Something the world saw.
#[derive(Clone, Copy, Debug)]
pub enum Observation<'a> {
    /// Incarnation `inc` of the orchestrator was started (1 = first boot).
    Started {
        /// The incarnation.
        inc: u32,
    },
    /// The running incarnation was killed; its connections dropped.
    Crashed,
    /// An input was handed to the orchestrator.
    Delivered(&'a Input),
    /// The orchestrator emitted an effect (in order, for the last input).
    Emitted(&'a Effect),
    /// The journal made a record durable.
    Synced(&'a JournalRecord),
    /// A create request reached the provider; `created` is the lease it made.
    CreateReceived {
        /// The intent's nonce.
        nonce: Nonce,
        /// The lease, if the create took effect.
        created: Option<&'a LeaseFacts>,
    },
    /// The provider destroyed a lease.
    LeaseGone(&'a LeaseId),
    /// An SSH connection of `session` to `lease` is open.
    ConnectionOpened {
        /// The session.
        session: SessionId,
        /// The lease it is connected to.
        lease: &'a LeaseId,
    },
    /// The connection of `session` is closed (close, reset or crash).
    ConnectionClosed(SessionId),
}

#[derive(Clone, Debug)]
enum OpInfo {
    Session(SessionId),
    Other,
}

#[derive(Clone, Debug, Default)]
struct SessionFacts {
    lease: Option<LeaseId>,
    outputs: u64,
    close_emitted: bool,
    closed_delivered: bool,
}

/// Per-incarnation bookkeeping; dropped on a crash.
#[derive(Clone, Debug, Default)]
struct Incarnation {
    number: u32,
    ops: BTreeMap<OpId, OpInfo>,
    sessions: BTreeMap<SessionId, SessionFacts>,
    teardown: bool,
    /// The last log number of each (node, stream) in this incarnation.
    log_seq: BTreeMap<(LogicalNodeId, LogStream), u64>,
    /// The numbers the synced journal named when this incarnation started:
    /// a restored node continues from them.
    log_base: BTreeMap<LogicalNodeId, LogSeqs>,
    logs: BTreeMap<(LogicalNodeId, LeaseId), u64>,
    logs_after_close: BTreeMap<(LogicalNodeId, LeaseId), u64>,
    closed_leases: BTreeSet<LeaseId>,
    /// (node, lease) pairs seen ready in this incarnation.
    ready: BTreeSet<(LogicalNodeId, LeaseId)>,
    /// The lease each node was last seen ready on in this incarnation.
    ready_lease: BTreeMap<LogicalNodeId, LeaseId>,
}

/// The oracle of one run.
#[derive(Clone, Debug, Default)]
pub struct Oracle {
    step: u64,
    at_ms: u64,
    inc: Incarnation,
    created: BTreeMap<LeaseId, LeaseFacts>,
    creates_by_nonce: BTreeMap<Nonce, u32>,
    learned: BTreeSet<LeaseId>,
    gone: BTreeSet<LeaseId>,
    synced_intents: BTreeSet<Nonce>,
    abandoned: BTreeSet<Nonce>,
    joins: BTreeSet<(LogicalNodeId, LeaseId, AgentId)>,
    open: BTreeMap<SessionId, LeaseId>,
    /// The last log numbers each node's synced `NodeReady`/`NodeFailed`
    /// records name.
    synced_log_seqs: BTreeMap<LogicalNodeId, LogSeqs>,
    /// Each group's desired count by the operator's last synced
    /// `DesiredSet` (groups never scaled are absent).
    synced_desired: BTreeMap<core_fsm::ids::GroupId, u32>,
}

type Checked = Result<(), Violation>;

impl Oracle {
    /// A fresh oracle.
    pub fn new() -> Oracle {
        Oracle::default()
    }

    /// Sets the step and time later violations are reported at.
    pub fn at(&mut self, step: u64, at_ms: u64) {
        self.step = step;
        self.at_ms = at_ms;
    }

    fn fail(&self, id: &'static str, message: String) -> Checked {
        Err(Violation {
            id,
            step: self.step,
            at_ms: self.at_ms,
            message,
        })
    }

    /// Leases the provider holds that were never destroyed.
    pub fn live_leases(&self) -> Vec<&LeaseFacts> {
        self.created
            .iter()
            .filter(|(id, _)| !self.gone.contains(*id))
            .map(|(_, l)| l)
            .collect()
    }

    /// Feeds one observation.
    pub fn observe(&mut self, obs: Observation<'_>) -> Checked {
        match obs {
            Observation::Started { inc } => {
                self.inc = Incarnation {
                    number: inc,
                    log_base: self.synced_log_seqs.clone(),
                    ..Incarnation::default()
                };
                Ok(())
            }
            Observation::Crashed => {
                self.inc = Incarnation::default();
                self.open.clear();
                Ok(())
            }
            Observation::Delivered(input) => self.delivered(input),
            Observation::Emitted(effect) => self.emitted(effect),
            Observation::Synced(record) => self.synced(record),
            Observation::CreateReceived { nonce, created } => self.create_received(nonce, created),
            Observation::LeaseGone(id) => {
                self.gone.insert(id.clone());
                Ok(())
            }
            Observation::ConnectionOpened { session, lease } => {
                self.open.insert(session, lease.clone());
                Ok(())
            }
            Observation::ConnectionClosed(session) => {
                self.open.remove(&session);
                Ok(())
            }
        }
    }

    fn create_received(&mut self, nonce: Nonce, created: Option<&LeaseFacts>) -> Checked {
        if !self.synced_intents.contains(&nonce) {
            return self.fail(
                "W4",
                format!("a create with {nonce} reached the provider before its intent was durable"),
            );
        }
        if self.abandoned.contains(&nonce) {
            return self.fail(
                "W3",
                format!("a create with {nonce} after its intent was abandoned"),
            );
        }
        let Some(lease) = created else { return Ok(()) };
        let count = self.creates_by_nonce.entry(nonce).or_insert(0);
        *count += 1;
        if *count > 1 {
            return self.fail(
                "W1",
                format!(
                    "a second lease ({}) created for intent {nonce}",
                    lease.lease_id
                ),
            );
        }
        self.created.insert(lease.lease_id.clone(), lease.clone());
        Ok(())
    }

    fn synced(&mut self, record: &JournalRecord) -> Checked {
        match record {
            JournalRecord::LeaseIntent { nonce, node, .. } => {
                self.synced_intents.insert(*nonce);
                return self.wanted(node);
            }
            JournalRecord::DesiredSet { group, count } => {
                self.synced_desired.insert(group.clone(), *count);
            }
            JournalRecord::IntentAbandoned { nonce, .. } => {
                self.abandoned.insert(*nonce);
                if let Some(lease) = self.created.values().find(|l| l.nonce == *nonce)
                    && !self.gone.contains(&lease.lease_id)
                {
                    return self.fail(
                        "W3",
                        format!(
                            "intent {nonce} abandoned in the journal while its lease {} exists",
                            lease.lease_id
                        ),
                    );
                }
            }
            JournalRecord::NodeReady { node, log_seqs, .. }
            | JournalRecord::NodeFailed { node, log_seqs, .. } => {
                let seqs = self.synced_log_seqs.entry(node.clone()).or_default();
                *seqs = seqs.max_each(*log_seqs);
            }
            JournalRecord::LeaseReleased { lease_id, .. }
                if self.created.contains_key(lease_id) && !self.gone.contains(lease_id) =>
            {
                return self.fail(
                    "W3",
                    format!("journal says {lease_id} released, the provider still has it"),
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// W11: a lease is asked for only for a node the pool wants: once the
    /// operator set a group's count, no intent names an index at or above it.
    fn wanted(&self, node: &LogicalNodeId) -> Checked {
        let Some((group, index)) = core_fsm::plan::parse_node_id(node) else {
            return Ok(());
        };
        let count = (self.synced_desired.iter())
            .find(|(g, _)| g.as_str().as_bytes() == group)
            .map(|(_, count)| *count);
        match count {
            Some(count) if index >= count => self.fail(
                "W11",
                format!("lease intent for {node} while its group wants {count} node(s)"),
            ),
            _ => Ok(()),
        }
    }

    fn delivered(&mut self, input: &Input) -> Checked {
        match input {
            Input::Teardown => self.inc.teardown = true,
            Input::LeaseCreated {
                result: Ok(granted),
                ..
            } => {
                self.learned.insert(granted.lease.lease_id.clone());
            }
            Input::LeasesListed {
                result: Ok(leases), ..
            } => {
                for lease in leases {
                    self.learned.insert(lease.lease_id.clone());
                }
            }
            Input::SshOutput { op, .. } => {
                if let Some(OpInfo::Session(s)) = self.inc.ops.get(op)
                    && let Some(facts) = self.inc.sessions.get_mut(s)
                {
                    facts.outputs += 1;
                }
            }
            Input::SshClosed { op } => {
                if let Some(OpInfo::Session(s)) = self.inc.ops.get(op)
                    && let Some(facts) = self.inc.sessions.get_mut(s)
                {
                    facts.closed_delivered = true;
                    if let Some(lease) = facts.lease.clone() {
                        self.inc.closed_leases.insert(lease);
                    }
                }
            }
            Input::AgentJoined {
                node,
                lease_id,
                agent,
            } => {
                self.joins
                    .insert((node.clone(), lease_id.clone(), agent.clone()));
            }
            _ => {}
        }
        Ok(())
    }

    fn op_seen(&mut self, op: OpId, info: OpInfo) -> Checked {
        if self.inc.ops.insert(op, info).is_some() {
            return self.fail(
                "W10",
                format!(
                    "{op} used for two requests in incarnation {}",
                    self.inc.number
                ),
            );
        }
        Ok(())
    }

    fn known_lease(&self, what: &str, lease: &LeaseFacts) -> Checked {
        match self.created.get(&lease.lease_id) {
            None => self.fail(
                "W2",
                format!("{what} names {} which no provider created", lease.lease_id),
            ),
            Some(facts) if facts != lease => self.fail(
                "W2",
                format!(
                    "{what} names {} with facts that differ from the provider's",
                    lease.lease_id
                ),
            ),
            Some(_) if !self.learned.contains(&lease.lease_id) => self.fail(
                "W2",
                format!(
                    "{what} names {} which the orchestrator never learned",
                    lease.lease_id
                ),
            ),
            Some(_) => Ok(()),
        }
    }

    fn emitted(&mut self, effect: &Effect) -> Checked {
        match effect {
            Effect::CreateLease { op, request } => {
                if self.inc.teardown {
                    return self.fail("W9", format!("create for {} after Teardown", request.node));
                }
                self.op_seen(*op, OpInfo::Other)
            }
            Effect::DestroyLease { op, lease } => {
                self.op_seen(*op, OpInfo::Other)?;
                self.known_lease("DestroyLease", lease)
            }
            Effect::LookupEndpoint { op, lease } => {
                self.op_seen(*op, OpInfo::Other)?;
                self.known_lease("LookupEndpoint", lease)
            }
            Effect::ListLeases { op, .. } => self.op_seen(*op, OpInfo::Other),
            Effect::SshConnect {
                op,
                session,
                lease_id,
                ..
            } => {
                self.op_seen(*op, OpInfo::Session(*session))?;
                if !self.learned.contains(lease_id) {
                    return self.fail(
                        "W2",
                        format!("SshConnect to {lease_id} which was never learned"),
                    );
                }
                self.inc.sessions.entry(*session).or_default().lease = Some(lease_id.clone());
                self.inc.closed_leases.remove(lease_id);
                Ok(())
            }
            Effect::SshExec { op, session, .. } => self.op_seen(*op, OpInfo::Session(*session)),
            Effect::SshClose { op, session } => {
                self.op_seen(*op, OpInfo::Session(*session))?;
                self.inc.sessions.entry(*session).or_default().close_emitted = true;
                Ok(())
            }
            Effect::Log(record) => self.log(record),
            _ => Ok(()),
        }
    }
}
