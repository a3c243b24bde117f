//! The network and the machines: partitions (clogged links, counted so
//! overlapping ones heal only when the last ends), the heal, and the
//! machine nodes' births, reboots and deaths.

use super::{Event, MachineNode, Supervisor};
use crate::chaos::Link;
use crate::state::{Phase, machine_ip};
use madsim::net::NetSim;
use madsim::runtime::NodeHandle;
use std::sync::Arc;

impl Supervisor {
    pub(super) fn boot_machine(&mut self, ordinal: u32) {
        let (world, clock) = (Arc::clone(&self.world), self.clock);
        let node: NodeHandle = self
            .handle
            .create_node()
            .name(format!("machine-{ordinal}"))
            .ip(machine_ip(ordinal))
            .init(move || crate::machine::serve(Arc::clone(&world), clock, ordinal))
            .build();
        self.machines.insert(
            ordinal,
            MachineNode {
                id: node.id(),
                gone: false,
                rebooting: false,
            },
        );
        // A lease that exits, goes offline or is outbid: its machine dies then.
        let down = {
            let w = self.world.lock();
            let lease = w.provider.leases.values().find(|l| l.ordinal == ordinal);
            lease.and_then(|l| l.down).map(|(at, _)| at.as_millis())
        };
        if let Some(at) = down {
            self.schedule(at, Event::MachineDown(ordinal));
        }
        if self.clogged.contains_key(&Link::Machine(ordinal)) {
            NetSim::current().clog_node(node.id());
        }
    }

    pub(super) fn kill_machine(&mut self, ordinal: u32, for_good: bool) {
        if let Some(m) = self.machines.get_mut(&ordinal).filter(|m| !m.gone) {
            m.gone = for_good;
            self.handle.kill(m.id);
        }
    }

    /// Clogs (or unclogs, when the last partition of the link ends) a link.
    pub(super) fn clog(&mut self, link: Link, on: bool) {
        let count = self.clogged.entry(link).or_insert(0);
        if on {
            *count += 1;
            if *count > 1 {
                return;
            }
            self.world.lock().injected("partition");
        } else {
            *count = count.saturating_sub(1);
            if *count > 0 {
                return;
            }
            self.clogged.remove(&link);
        }
        let now = self.now();
        let verb = if on { "clogged" } else { "unclogged" };
        self.world
            .lock()
            .note(now, || format!("network: {verb} {link:?}"));
        let net = NetSim::current();
        match link {
            Link::OrchestratorProvider => {
                for (a, b) in [(self.orch, self.provider), (self.provider, self.orch)] {
                    if on {
                        net.clog_link(a, b)
                    } else {
                        net.unclog_link(a, b)
                    }
                }
            }
            Link::Orchestrator => {
                if on {
                    net.clog_node(self.orch)
                } else {
                    net.unclog_node(self.orch)
                }
            }
            Link::Machine(n) => {
                if let Some(m) = self.machines.get(&n) {
                    if on {
                        net.clog_node(m.id)
                    } else {
                        net.unclog_node(m.id)
                    }
                }
            }
        }
    }

    /// The fault phase ends: every link heals, no more packet loss.
    pub(super) fn heal(&mut self) {
        let links: Vec<Link> = std::mem::take(&mut self.clogged).into_keys().collect();
        for link in links {
            self.clogged.insert(link, 1);
            self.clog(link, false);
        }
        NetSim::current().update_config(|c| c.packet_loss_rate = 0.0);
        let now = self.now();
        let mut w = self.world.lock();
        if w.chaos.loss_per_mille > 0 {
            w.injected("packet-loss");
        }
        w.phase = Phase::Heal;
        let budget = sim::plan::settle_budget(&w.case.profile).as_millis();
        w.note(now, || "world: heal, faults off".to_owned());
        drop(w);
        self.schedule(now.as_millis() + budget, Event::Deadline(Phase::Heal));
    }
}
