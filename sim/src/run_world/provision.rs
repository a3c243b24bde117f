//! The composite's provisioning side: a provider that grants every lease at
//! once (with its endpoint), an SSH host whose every command succeeds, and
//! the agent each start command launches, which joins the composite with
//! the binding its token was minted for. Only a replacement's provisioning
//! fails, as the case plans it: its create (`replacement-create-fails`) or
//! its start command (`replacement-boot-fails`). Every answer
//! goes through the queue after [`ANSWER`]. The journal the composite
//! persists is kept for its restarts.
//!
//! RW11 is judged here: a lease the composite was told is destroyed is never
//! destroyed again, a lease whose agent died never carries another (a
//! dead node's replacement runs on a new lease), and at the end a replaced
//! lease stands no more.

use super::node::{Node, boot_inputs};
use super::{Ev, RunWorld, agent_id_of, node_id};
use core_fsm::ids::{LeaseId, OpId, SessionId};
use core_fsm::port::{
    CommandPurpose, Effect, EndpointStatus, Input, JoinBinding, JournalRecord, LeaseFacts,
    SshEndpoint, SshError, SshErrorKind,
};
use core_fsm::time::Duration;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The facts of the lease the happy-path provider grants `request` as its
/// contract `contract` (`vastai:{contract}` on `host-{contract}`); both
/// tiers' run worlds grant these.
pub fn lease_facts(request: &core_fsm::port::CreateLeaseRequest, contract: u32) -> LeaseFacts {
    LeaseFacts {
        provider: request.provider,
        lease_id: LeaseId::new(format!("vastai:{contract}")),
        contract_id: contract.to_string(),
        offer_id: None,
        host_id: Some(format!("host-{contract}")),
        nonce: request.nonce,
        metadata: BTreeMap::new(),
    }
}

/// How long the provider or the SSH host takes to answer.
const ANSWER: Duration = Duration::from_millis(3);

/// A lease the provider granted.
pub(super) struct Lease {
    pub(super) facts: Arc<LeaseFacts>,
    pub(super) endpoint: SshEndpoint,
    /// The stage of the node it was created for.
    pub(super) stage: u32,
    /// The generation of the agent started on it, if one was.
    pub(super) agent: Option<u32>,
    /// Whether its agent died.
    pub(super) died: bool,
    pub(super) destroyed: bool,
    /// Whether the composite was told it is destroyed.
    pub(super) destroy_told: bool,
    /// Its place among the replacement leases (all stages, from 0); `None`
    /// for a node's first lease.
    pub(super) replacement: Option<u32>,
}

/// The provider's and the SSH host's state.
pub struct ProvisionSide {
    pub(super) leases: BTreeMap<LeaseId, Lease>,
    pub(super) contracts: u32,
    /// Each open session's lease and its running log tails.
    pub(super) sessions: BTreeMap<SessionId, (LeaseId, Vec<OpId>)>,
    /// Destroys answered Ok, on their way to the composite.
    destroys: BTreeMap<OpId, LeaseId>,
    /// Agents launched per stage: the next one's generation.
    launches: Vec<u32>,
    /// Creates asked per stage.
    pub(super) created: Vec<u32>,
    /// Creates asked for replacements (all stages).
    pub(super) replacement_creates: u32,
    /// Leases granted to replacements (all stages).
    pub(super) replacement_leases: u32,
    /// The lease each stage's latest agent runs on.
    lease_of: Vec<Option<LeaseId>>,
    /// The journal (`Persist` records in order), kept across restarts.
    pub journal: Vec<JournalRecord>,
}

impl ProvisionSide {
    /// Nothing leased yet, for `stages` nodes.
    pub fn new(stages: u32) -> ProvisionSide {
        ProvisionSide {
            leases: BTreeMap::new(),
            contracts: 0,
            sessions: BTreeMap::new(),
            destroys: BTreeMap::new(),
            launches: vec![0; stages as usize],
            created: vec![0; stages as usize],
            replacement_creates: 0,
            replacement_leases: 0,
            lease_of: vec![None; stages as usize],
            journal: Vec::new(),
        }
    }

    /// The orchestrator died: its sessions and the answers on their way to
    /// it are gone.
    pub fn crashed(&mut self) {
        self.sessions.clear();
        self.destroys.clear();
    }

    /// Leases the provider created.
    pub fn leases_created(&self) -> u32 {
        self.contracts
    }

    /// The lease stage `s`'s latest agent runs on.
    pub fn lease_of(&self, s: u32) -> Option<&LeaseId> {
        self.lease_of.get(s as usize)?.as_ref()
    }

    /// RW11's end: a lease another lease of its node replaced that still
    /// stands (each replaced lease is destroyed, exactly once with the
    /// check in `destroy`).
    pub fn replaced_standing(&self) -> Option<&LeaseId> {
        let newest = |stage: u32| {
            (self.leases.values())
                .filter(|l| l.stage == stage)
                .map(|l| l.facts.contract_id.parse::<u32>().unwrap_or(0))
                .max()
        };
        self.leases.iter().find_map(|(id, l)| {
            let contract = l.facts.contract_id.parse::<u32>().unwrap_or(0);
            (!l.destroyed && newest(l.stage) > Some(contract)).then_some(id)
        })
    }

    /// Stage `s`'s agent died: its lease carries no other (RW11).
    pub fn agent_died(&mut self, s: u32) {
        if let Some(id) = self.lease_of.get(s as usize).cloned().flatten()
            && let Some(lease) = self.leases.get_mut(&id)
        {
            lease.died = true;
        }
    }

    /// An answer reaches the composite: a destroy it is told succeeded.
    pub fn delivered(&mut self, input: &Input) {
        if let Input::LeaseDestroyed { op, result: Ok(()) } = input
            && let Some(id) = self.destroys.remove(op)
            && let Some(lease) = self.leases.get_mut(&id)
        {
            lease.destroy_told = true;
        }
    }
}

impl RunWorld<'_> {
    /// Carries out one provisioning effect of the composite.
    pub(super) fn provision_effect(&mut self, effect: Effect) {
        match effect {
            Effect::Persist(record) => self.ps.journal.push(record),
            Effect::CreateLease { op, request } => self.create(op, &request),
            Effect::LookupEndpoint { op, lease } => {
                let status = match self.ps.leases.get(&lease.lease_id) {
                    Some(l) if !l.destroyed => EndpointStatus::Ready(l.endpoint.clone()),
                    _ => EndpointStatus::Gone,
                };
                self.answer(Input::EndpointLooked {
                    op,
                    result: Ok(status),
                });
            }
            Effect::DestroyLease { op, lease } => self.destroy(op, &lease.lease_id),
            Effect::ListLeases { op, .. } => {
                let live = (self.ps.leases.values())
                    .filter(|l| !l.destroyed)
                    .map(|l| l.facts.clone())
                    .collect();
                self.answer(Input::LeasesListed {
                    op,
                    result: Ok(live),
                });
            }
            Effect::SshConnect {
                op,
                session,
                lease_id,
                ..
            } => {
                self.ps.sessions.insert(session, (lease_id, Vec::new()));
                self.answer(Input::SshConnected { op, result: Ok(()) });
            }
            Effect::SshExec {
                op,
                session,
                purpose,
                join,
                ..
            } => match purpose {
                // A log tail runs until its connection closes.
                CommandPurpose::Tail => {
                    if let Some((_, tails)) = self.ps.sessions.get_mut(&session) {
                        tails.push(op);
                    }
                }
                CommandPurpose::Start if self.start_fails(session) => {
                    self.answer(Input::SshExited { op, result: Ok(1) });
                }
                _ => {
                    self.answer(Input::SshExited { op, result: Ok(0) });
                    if let (CommandPurpose::Start, Some(binding)) = (purpose, join) {
                        self.launch(&binding);
                    }
                }
            },
            Effect::SshClose { op, session } => {
                let tails = self.ps.sessions.remove(&session).map(|(_, t)| t);
                for tail in tails.unwrap_or_default() {
                    let result = Err(SshError {
                        kind: SshErrorKind::Reset,
                        message: "connection closed".to_owned(),
                    });
                    self.answer(Input::SshExited { op: tail, result });
                }
                self.answer(Input::SshClosed { op });
            }
            Effect::RevokeJoin(_) | Effect::Log(_) | Effect::NodeChanged { .. } => {}
            // Carried by the host side (`feed_orch`).
            Effect::Pipeline(_) => {}
        }
    }

    pub(super) fn answer(&mut self, input: Input) {
        self.at(ANSWER, Ev::Orch(input));
    }

    /// The stage of a planned node.
    pub(super) fn stage_of(&self, node: &core_fsm::ids::LogicalNodeId) -> Option<u32> {
        (0..self.nodes.len() as u32).find(|s| node_id(*s) == *node)
    }

    /// The provider destroys a lease; an agent still running on it dies
    /// with its machine. RW11: never a lease the composite was told is
    /// destroyed.
    fn destroy(&mut self, op: OpId, id: &LeaseId) {
        let Some(lease) = self.ps.leases.get_mut(id) else {
            self.answer(Input::LeaseDestroyed { op, result: Ok(()) });
            return;
        };
        if lease.destroy_told {
            self.violate("RW11", format!("{id} is destroyed a second time"));
            return;
        }
        lease.destroyed = true;
        let (s, agent) = (lease.stage, lease.agent);
        self.ps.destroys.insert(op, id.clone());
        self.coverage
            .labels
            .insert("composite:lease-destroyed".to_owned());
        self.note(&format!("provider: {id} destroyed"));
        let n = &self.nodes[s as usize];
        if n.alive && agent == Some(n.generation) && self.ps.lease_of(s) == Some(id) {
            self.note(&format!("world: node {s}'s agent goes with its machine"));
            self.die(s);
        }
        self.answer(Input::LeaseDestroyed { op, result: Ok(()) });
    }

    /// A start command ran: the node's agent process starts (a new
    /// identity) and joins with the token's binding. RW11: never on a
    /// lease whose agent died or that is destroyed.
    fn launch(&mut self, binding: &JoinBinding) {
        let Some(s) = self.stage_of(&binding.node) else {
            return;
        };
        match self.ps.leases.get(&binding.lease_id) {
            Some(l) if l.died || l.destroyed => {
                let what = format!(
                    "{}'s agent starts on {}, whose agent died or which is destroyed",
                    binding.node, binding.lease_id
                );
                return self.violate("RW11", what);
            }
            _ => {}
        }
        if self.nodes[s as usize].alive {
            // Never on the happy path: the old agent's lease was destroyed
            // first. Its process is gone with the node's new one.
            self.die(s);
        }
        self.retire(s);
        let generation = self.ps.launches[s as usize];
        self.ps.launches[s as usize] += 1;
        let mut node = Node::new(s, super::config::agent_config(s, generation), self.now);
        node.generation = generation;
        self.nodes[s as usize] = node;
        self.ps.lease_of[s as usize] = Some(binding.lease_id.clone());
        if let Some(lease) = self.ps.leases.get_mut(&binding.lease_id) {
            lease.agent = Some(generation);
        }
        let agent = agent_id_of(s, generation);
        self.note(&format!("world: {agent} starts on {}", binding.lease_id));
        let joined = Input::AgentJoined {
            node: binding.node.clone(),
            lease_id: binding.lease_id.clone(),
            agent,
        };
        self.at(ANSWER + self.latency(), Ev::Orch(joined));
        for input in boot_inputs(s) {
            self.at(Duration::ZERO, Ev::Agent { node: s, input });
        }
    }
}
