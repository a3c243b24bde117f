//! A node's death and the orchestrator's crash. A dead agent stops
//! heartbeating and its connections are noticed gone after
//! `conn_loss_ms`; the composite's membership finds it Dead, fails the node
//! and, under `Bounded`, replaces it through the provisioning side
//! (`provision.rs`). A crashed orchestrator is restored from its journal and
//! the live agents rejoin it.

use super::edges::End;
use super::node::{Node, boot_inputs};
use super::{Ev, RunWorld};
use core_fsm::port::Input;
use core_fsm::time::Duration;

impl RunWorld<'_> {
    /// Node `s`'s agent (and its worker) dies; its connections are noticed
    /// gone after `conn_loss_ms`.
    pub(super) fn die(&mut self, s: u32) {
        let node = &mut self.nodes[s as usize];
        node.alive = false;
        node.worker = None;
        node.life += 1;
        node.pending.clear();
        self.ps.agent_died(s);
        let loss = Duration::from_millis(self.case.profile.conn_loss_ms);
        self.at(loss, Ev::ConnectionsLost(s));
    }

    /// Before node `s`'s new agent starts: the old one's connections are
    /// gone, and what was on its way to it never reaches it.
    pub(super) fn retire(&mut self, s: u32) {
        if !self.nodes[s as usize].lost {
            self.connections_lost(s);
        }
        self.forget_agent(s);
        self.queue
            .retain(|_, ev| !matches!(ev, Ev::ConnectionsLost(node) if *node == s));
    }

    pub(super) fn connections_lost(&mut self, s: u32) {
        self.nodes[s as usize].lost = true;
        self.close_conns_of(End::Node(s));
    }

    /// Closes every open connection that `end` dialed or receives.
    fn close_conns_of(&mut self, end: End) {
        let touching: Vec<u32> = (0..self.conns.len() as u32)
            .filter(|c| {
                let c = &self.conns[*c as usize];
                c.open && (c.from == end || c.to == end)
            })
            .collect();
        for conn in touching {
            self.close_conn(conn);
        }
    }

    /// Drops what was on its way to node `s`'s agent and worker: they are
    /// gone, and what comes next is for their successors.
    fn forget_agent(&mut self, s: u32) {
        self.queue.retain(|_, ev| match ev {
            Ev::Agent { node, .. } | Ev::Worker { node, .. } => *node != s,
            _ => true,
        });
    }

    /// The orchestrator crashes when the run first reaches a planned phase.
    pub(super) fn maybe_crash(&mut self) {
        use conformance::run::RunFault;
        let Some(phase) = self
            .the_run()
            .and_then(|r| conformance::run::crash_point(r.phase()))
        else {
            return;
        };
        let fault = RunFault::OrchestratorCrash;
        if self.fired.contains(&fault) || self.planned(fault, phase).is_none() {
            return;
        }
        self.fired.insert(fault);
        self.inject(fault);
        self.crash_orchestrator();
    }

    /// `drover up` is killed and started again on the same state dir: what
    /// was on its way to it and its clients' connections are lost; the new
    /// composite is restored from the journal and started; every live
    /// agent's control connection breaks, and each rejoins the new process
    /// with its binding (its node and lease), which membership tracks; the
    /// run begins again once the composite is settled (`maybe_begin`). The
    /// agent's first Pipeline frame on its new connection restarts its
    /// pipeline side (`transport/agent.rs`), so each starts afresh under its
    /// identity.
    fn crash_orchestrator(&mut self) {
        const REJOIN: Duration = Duration::from_secs(1);
        self.oracle.orchestrator_crashed();
        self.queue
            .retain(|_, ev| !matches!(ev, Ev::Host(_) | Ev::Orch(_) | Ev::Submit(_)));
        self.close_conns_of(End::Orch);
        let stages = self.nodes.len() as u32;
        let config = super::config::orchestrator_config(&self.case.profile);
        self.host = core_fsm::orchestrator::Orchestrator::restore(config, &self.ps.journal);
        self.host_due = core_fsm::Machine::next_deadline(&self.host);
        self.ps.crashed();
        self.begun = false;
        self.hs = super::host::HostSide::resumed(stages, &self.hs);
        self.note("world: the orchestrator restarts from its journal; the live agents rejoin it");
        self.at(Duration::ZERO, Ev::Orch(Input::Start));
        for s in 0..stages {
            if !self.nodes[s as usize].alive {
                continue;
            }
            self.close_conns_of(End::Node(s));
            self.forget_agent(s);
            let old = &self.nodes[s as usize];
            let (generation, incarnation) = (old.generation, old.incarnation + 1);
            let config = super::config::agent_config(s, generation);
            let mut node = Node::new(s, config, self.now + REJOIN);
            node.generation = generation;
            node.incarnation = incarnation;
            self.nodes[s as usize] = node;
            if let Some(lease_id) = self.ps.lease_of(s).cloned() {
                let rejoin = Input::AgentJoined {
                    node: super::node_id(s),
                    lease_id,
                    agent: super::agent_id_of(s, generation),
                };
                self.at(REJOIN, Ev::Orch(rejoin));
            }
            for input in boot_inputs(s) {
                self.at(REJOIN, Ev::Agent { node: s, input });
            }
        }
    }
}
