//! Stepping a machine: one input into the host or a node's agent, its
//! effects judged by the oracle and dispatched, then the step's
//! after-effects (coverage labels, the run's end, planned crashes).

use super::RunWorld;
use super::config::{debug_head, phase_label};
use core_fsm::Machine as _;
use core_fsm::{agent, pipeline};
use std::panic::{AssertUnwindSafe, catch_unwind};

impl RunWorld<'_> {
    pub(super) fn feed_host(&mut self, input: pipeline::Input) {
        self.oracle.host_input(&input);
        self.record("host <-", &input);
        let now = self.now;
        let host = &mut self.host;
        let result = catch_unwind(AssertUnwindSafe(|| {
            let effects = host.handle(now, input);
            host.check_invariants();
            effects
        }));
        match result {
            Ok(effects) => {
                for effect in effects {
                    self.record("host ->", &effect);
                    if let Err(v) = self.oracle.host_effect(&effect) {
                        self.violate(v.0, v.1);
                        return;
                    }
                    self.host_effect(effect);
                }
                self.after_step(None);
            }
            Err(panic) => self.violate("RW0", conformance::backend::panic_text(&*panic)),
        }
    }

    pub(super) fn feed_agent(&mut self, node: u32, input: agent::Input) {
        self.record(&format!("agent {node} <-"), &input);
        let now = self.now;
        let agent = &mut self.nodes[node as usize].agent;
        let result = catch_unwind(AssertUnwindSafe(|| {
            let effects = agent.handle(now, input);
            agent.check_invariants();
            effects
        }));
        match result {
            Ok(effects) => {
                let n = &self.nodes[node as usize];
                let life = (node, n.generation, n.incarnation, n.agent.reprovisions());
                for effect in effects {
                    self.record(&format!("agent {node} ->"), &effect);
                    if let Err(v) = self.oracle.agent_effect(life, &effect) {
                        self.violate(v.0, v.1);
                        return;
                    }
                    if !self.nodes[node as usize].alive {
                        break;
                    }
                    self.agent_effect(node, effect);
                }
                self.after_step(Some(node));
            }
            Err(panic) => self.violate("RW0", conformance::backend::panic_text(&*panic)),
        }
    }

    /// After a step of the host (`None`) or of node `stepped`'s agent.
    fn after_step(&mut self, stepped: Option<u32>) {
        self.step += 1;
        self.step_digests.push(self.digest.0);
        self.probe(stepped);
        if self.ended_at.is_none() && self.host.run().is_some_and(|r| r.phase().is_terminal()) {
            self.ended_at = Some(self.now);
        }
        self.maybe_crash();
        self.maybe_shutdown();
    }

    /// Coverage labels of the machine that stepped (only it changed).
    fn probe(&mut self, stepped: Option<u32>) {
        let labels = &mut self.coverage.labels;
        let mut add = |label: String| {
            if !labels.contains(&label) {
                labels.insert(label);
            }
        };
        let Some(s) = stepped else {
            add(match self.host.run() {
                Some(run) => format!("run:{}", phase_label(run.phase())),
                None => "run:none".to_owned(),
            });
            return;
        };
        let n = &self.nodes[s as usize];
        add(format!("agent:{}", debug_head(n.agent.phase())));
        if n.agent.respawns() > 0 {
            add("agent:respawned".to_owned());
        }
        for stage in n.agent.stages().values() {
            add(format!("stage:{}", debug_head(stage.phase())));
            // The inbound ring held steps behind the one executing.
            if let core_fsm::stage::Phase::Busy { queued, .. } = stage.phase()
                && *queued > 0
            {
                add(format!("stage:Busy/queued{}", (*queued).min(2)));
            }
        }
    }
}
