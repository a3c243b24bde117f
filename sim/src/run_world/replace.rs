//! A node's death and its replacement: its connections are noticed gone
//! after `conn_loss_ms`; with `replace_ms`, a new agent (a new identity)
//! takes the node over, as `bounded` replacement brings one.

use super::edges::End;
use super::node::{Node, boot_inputs};
use super::{Ev, RunWorld};
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
        let loss = Duration::from_millis(self.case.profile.conn_loss_ms);
        self.at(loss, Ev::ConnectionsLost(s));
        let replace = self.case.profile.replace_ms;
        if replace > 0 {
            self.at(Duration::from_millis(replace), Ev::Replace(s));
        }
    }

    /// Node `s`'s replacement: a new agent (a new identity) on a new
    /// lease, handed off, as `bounded` replacement brings it. What was on
    /// its way to the dead agent never reaches it.
    pub(super) fn replace(&mut self, s: u32) {
        if !self.nodes[s as usize].lost {
            self.connections_lost(s);
        }
        self.queue.retain(|_, ev| match ev {
            Ev::Agent { node, .. } | Ev::Worker { node, .. } => *node != s,
            Ev::ConnectionsLost(node) => *node != s,
            _ => true,
        });
        let generation = self.nodes[s as usize].generation + 1;
        let mut node = Node::new(s, super::config::agent_config(s, generation), self.now);
        node.generation = generation;
        self.nodes[s as usize] = node;
        self.note(&format!("world: node {s}'s replacement agent starts"));
        let track = core_fsm::membership::Input::Track {
            node: super::node_id(s),
            agent: super::agent_id_of(s, generation),
        };
        self.at(
            Duration::ZERO,
            Ev::Host(core_fsm::pipeline::Input::Membership(track)),
        );
        for input in boot_inputs(s) {
            self.at(Duration::ZERO, Ev::Agent { node: s, input });
        }
    }

    pub(super) fn connections_lost(&mut self, s: u32) {
        self.nodes[s as usize].lost = true;
        let touching: Vec<u32> = (0..self.conns.len() as u32)
            .filter(|c| {
                let c = &self.conns[*c as usize];
                c.open && (c.from == End::Node(s) || c.to == End::Node(s))
            })
            .collect();
        for conn in touching {
            self.close_conn(conn);
        }
    }
}
