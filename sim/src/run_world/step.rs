//! Stepping a machine: one input into the host or a node's agent, its
//! effects judged by the oracle and dispatched, then the step's
//! after-effects (coverage labels, the run's end, planned crashes).

use super::config::{debug_head, phase_label};
use super::{Ev, RunWorld};
use core_fsm::Machine as _;
use core_fsm::time::Duration;
use core_fsm::{agent, pipeline, port};
use std::panic::{AssertUnwindSafe, catch_unwind};

impl RunWorld<'_> {
    /// An input for the pipeline host, through the composite.
    pub(super) fn feed_host(&mut self, input: pipeline::Input) {
        self.feed_orch(port::Input::Pipeline(Box::new(input)));
    }

    /// One step of the composite: the oracle judges the pipeline host's
    /// inputs and effects (unwrapped), the provisioning side carries out
    /// the rest.
    pub(super) fn feed_orch(&mut self, input: port::Input) {
        match &input {
            port::Input::Pipeline(inner) => {
                self.oracle.host_input(inner);
                self.record("host <-", &**inner);
            }
            other => self.record("orch <-", &Shown(other)),
        }
        let now = self.now;
        let host = &mut self.host;
        let result = catch_unwind(AssertUnwindSafe(|| {
            let effects = host.handle(now, input);
            host.check_invariants();
            (effects, host.next_deadline())
        }));
        match result {
            Ok((effects, due)) => {
                // Only a step of the composite moves its deadline.
                self.host_due = due;
                for effect in effects {
                    match effect {
                        port::Effect::Pipeline(inner) => {
                            self.record("host ->", &*inner);
                            if let Err(v) = self.oracle.host_effect(&inner) {
                                self.violate(v.0, v.1);
                                return;
                            }
                            self.host_effect(*inner);
                        }
                        other => {
                            self.record("orch ->", &Shown(&other));
                            self.provision_effect(other);
                            if self.violation.is_some() {
                                return;
                            }
                        }
                    }
                }
                self.after_step(None);
                self.maybe_begin();
            }
            Err(panic) => self.violate("RW0", conformance::backend::panic_text(&*panic)),
        }
    }

    /// The run begins as `drover up` begins it: once the composite is
    /// settled and every planned node is ready (once per orchestrator
    /// life).
    fn maybe_begin(&mut self) {
        if self.begun || !self.host.is_settled() {
            return;
        }
        let ready = self.host.nodes().filter(|m| m.is_ready()).count();
        if ready < self.nodes.len() {
            return;
        }
        self.begun = true;
        self.note("world: the composite is settled, every node ready; the run begins");
        let begin = pipeline::Input::Begin(Box::new(super::host::run_config(&self.case.profile)));
        self.at(Duration::ZERO, Ev::Host(begin));
    }

    pub(super) fn feed_agent(&mut self, node: u32, input: agent::Input) {
        self.record(format_args!("agent {node} <-"), &input);
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
                    self.record(format_args!("agent {node} ->"), &effect);
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
        if self.ended_at.is_none() && self.the_run().is_some_and(|r| r.phase().is_terminal()) {
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
            let run = self.host.pipeline().and_then(|p| p.run());
            add(match run {
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

/// A value whose `Debug` is its one-line `Display` (the composite's
/// provisioning inputs and effects, as transcripts and traces show them).
struct Shown<'a, T>(&'a T);

impl<T: std::fmt::Display> std::fmt::Debug for Shown<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.0, f)
    }
}
