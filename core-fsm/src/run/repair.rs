//! Repair (SPEC.md "The run, OrchestratorRun" "Repair"): a stage lost
//! while serving rebuilds the pipeline instead of failing the run, while
//! repairs remain. Every stage that can still answer is stopped and the
//! token endpoints are closed; each lost stage waits for its node's
//! replacement (a new agent that membership holds Alive) to report ready;
//! then the startup phases run again over the current agents, and serving
//! resumes the interrupted request by running its prompt and the tokens
//! generated so far as one prefill, from the sequence number of its next
//! token. The client's stream therefore has no token twice and none
//! missing, and greedy text is the text of an undisturbed run.

use super::types::Active;
use super::{
    Barrier, Carry, Effect, Input, Machine, Phase, PromptEvent, PromptFault, Repair, RunError,
    Serving, TimerKind,
};
use crate::membership::Liveness;
use crate::stage::Report;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

impl Machine {
    /// Whether a loss in `phase` is repaired rather than fatal: repairs
    /// remain, and the run is serving, rebuilding after a repair, or
    /// waiting for readiness (nothing is provisioned yet: a restarted
    /// orchestrator finds an agent dead that the journal says was ready).
    /// Opening the prompt service is not: its answer may still come, and
    /// the service is opened once.
    pub(super) fn may_repair(&self, phase: &Phase) -> bool {
        let repairable = matches!(phase, Phase::Serving(_) | Phase::AwaitingReadiness(_))
            || self.carry.is_some();
        self.repairs < self.config.repairs_max
            && !matches!(phase, Phase::OpeningPrompt { .. })
            && repairable
    }

    /// Starts a repair after `cause`, carrying the requests of `phase`.
    pub(super) fn begin_repair(
        &mut self,
        now: Instant,
        phase: Phase,
        cause: RunError,
        out: &mut Vec<Effect>,
    ) -> Phase {
        self.repairs += 1;
        // The barrier's reports so far, when the loss came before it passed.
        let mut reports = BTreeMap::new();
        let carry = match phase {
            Phase::Serving(serving) => Carry {
                active: serving.active,
                queue: serving.queue,
            },
            Phase::AwaitingReadiness(barrier) => {
                reports = barrier.reports;
                Carry::default()
            }
            // A startup's loss carries no request; a rebuild's carries
            // what its repair did.
            _ => self.carry.take().unwrap_or_default(),
        };
        out.push(Effect::Repairing {
            cause: cause.clone(),
            repair: self.repairs,
            request: carry.active.as_ref().map(|a| a.request),
        });
        self.carry = Some(carry);
        self.timers.clear();
        // The token endpoints open with the first provision.
        let endpoints_closed = self.provisioned.is_empty();
        let mut waiting = BTreeSet::new();
        for stage in &self.provisioned {
            if self.can_answer(*stage) {
                out.push(Effect::StopStage {
                    node: self.plan[*stage as usize].node.clone(),
                    stage: *stage,
                });
                waiting.insert(*stage);
            }
        }
        // Stages that cannot answer are not waited for (teardown's rule),
        // and their agents are not the pipeline's any more.
        self.provisioned.retain(|s| waiting.contains(s));
        let lost: Vec<_> = (0..self.stage_count())
            .filter(|s| !self.can_answer(*s))
            .collect();
        for stage in lost {
            self.workers.remove(&stage);
        }
        if !endpoints_closed {
            out.push(Effect::CloseTokenEndpoints);
        }
        // The surviving agents passed the barrier once (or reported to the
        // one the loss interrupted); their reports stand. A report counts
        // only while its agent is the node's and Alive (`stage_ready`).
        reports.extend(self.workers.clone());
        self.timers
            .set(TimerKind::Repair, now + self.config.repair_timeout);
        let repair = Repair {
            cause,
            waiting,
            endpoints_closed,
            barrier: Barrier { reports },
        };
        self.maybe_rebuild(now, repair, out)
    }

    /// A membership change while repairing: a lost stage is not waited for
    /// and needs a fresh report from its node's new agent, which is told
    /// its stage once it is Alive.
    pub(super) fn on_repair_liveness(
        &mut self,
        now: Instant,
        mut repair: Repair,
        stage: crate::stage::StageIndex,
        (node, agent, liveness): (&crate::ids::LogicalNodeId, &crate::ids::AgentId, Liveness),
        lost: bool,
        out: &mut Vec<Effect>,
    ) -> Phase {
        if lost {
            self.workers.remove(&stage);
            repair.waiting.remove(&stage);
            self.provisioned.remove(&stage);
        }
        self.enlist(&repair, stage, node, agent, liveness, out);
        self.maybe_rebuild(now, repair, out)
    }

    /// A new agent Alive for a stage that has none tells it its stage.
    fn enlist(
        &self,
        repair: &Repair,
        stage: crate::stage::StageIndex,
        node: &crate::ids::LogicalNodeId,
        agent: &crate::ids::AgentId,
        liveness: Liveness,
        out: &mut Vec<Effect>,
    ) {
        let known = self.workers.get(&stage).is_some_and(|w| w.agent == *agent)
            || repair
                .barrier
                .reports
                .get(&stage)
                .is_some_and(|r| r.agent == *agent);
        if liveness == Liveness::Alive && !known {
            out.push(Effect::Enlist {
                node: node.clone(),
                agent: agent.clone(),
                stage,
            });
        }
    }

    /// Everything else a repair hears.
    pub(super) fn on_repair_input(
        &mut self,
        now: Instant,
        mut repair: Repair,
        input: Input,
        out: &mut Vec<Effect>,
    ) -> Phase {
        match input {
            Input::Stage(Report::StageStopped { stage, .. }) => {
                let stage = stage.expect("admitted stop reports carry a stage");
                if repair.waiting.remove(&stage) {
                    self.provisioned.remove(&stage);
                } else {
                    self.ignored.duplicate += 1;
                }
            }
            Input::TokenEndpointsClosed { .. } => {
                if std::mem::replace(&mut repair.endpoints_closed, true) {
                    self.ignored.duplicate += 1;
                }
            }
            Input::RuntimeReady {
                node,
                stage,
                agent,
                readiness_id,
                ..
            } => {
                self.keep_report(&mut repair.barrier, &node, stage, agent, readiness_id);
            }
            Input::Shutdown => {
                let carry = self.carry.take().expect("a repair carries");
                self.fault_carry(carry, PromptFault::Shutdown, out);
                // The stops already asked for are awaited by teardown.
                return self.begin_teardown(now, Ok(()), out);
            }
            Input::Tick => {}
            // The old pipeline's last words (faults of stages whose
            // neighbour died, late tokens, failed sends to the dead).
            _ => self.ignored.unexpected += 1,
        }
        self.maybe_rebuild(now, repair, out)
    }

    pub(super) fn on_repair_timeout(
        &mut self,
        now: Instant,
        repair: Repair,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let mut missing: BTreeSet<_> = self.unready(&repair.barrier).into_iter().collect();
        missing.extend(repair.waiting.iter().copied());
        let error = RunError::RepairTimeout {
            cause: Box::new(repair.cause),
            missing: missing.into_iter().collect(),
        };
        self.fail(now, error, out)
    }

    /// Once every stop is confirmed and every stage has a ready agent, the
    /// startup phases run again (acknowledgements first).
    fn maybe_rebuild(&mut self, now: Instant, repair: Repair, out: &mut Vec<Effect>) -> Phase {
        let stopped = repair.waiting.is_empty() && repair.endpoints_closed;
        if !stopped || !self.unready(&repair.barrier).is_empty() {
            return Phase::Repairing(repair);
        }
        self.provisioned.clear();
        self.workers.clear();
        self.check_barrier(now, repair.barrier, out)
    }

    /// Every stage is ready again: serving resumes with what the repair
    /// carried, the interrupted request first.
    pub(super) fn resume(&mut self, now: Instant, carry: Carry, out: &mut Vec<Effect>) -> Phase {
        self.timers.clear();
        let mut serving = Serving {
            active: None,
            queue: carry.queue,
        };
        let resumed = carry.active.as_ref().map(|a| (a.request, a.next_seq));
        out.push(Effect::Repaired {
            repair: self.repairs,
            resumed,
        });
        match carry.active {
            Some(active) => self.rerun(now, &mut serving, active, out),
            None => {
                if let Some(next) = serving.queue.pop_front() {
                    self.start(now, &mut serving, next, out);
                }
            }
        }
        Phase::Serving(serving)
    }

    /// Runs the prompt and the tokens generated so far as one prefill; its
    /// output is the request's next token.
    fn rerun(
        &mut self,
        now: Instant,
        serving: &mut Serving,
        active: Active,
        out: &mut Vec<Effect>,
    ) {
        let mut tokens = active.prompt.clone();
        tokens.extend_from_slice(&active.generated);
        let injected = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        out.push(Effect::Inject {
            request: active.request,
            seq: active.next_seq,
            pos: 0,
            tokens,
        });
        serving.active = Some(active);
        self.timers
            .set(TimerKind::TokenGap, self.first_token_due(now, injected));
    }

    /// Ends every request a repair carried with `fault`.
    pub(super) fn fault_carry(&mut self, carry: Carry, fault: PromptFault, out: &mut Vec<Effect>) {
        let pending = carry
            .active
            .map(|a| a.request)
            .into_iter()
            .chain(carry.queue.into_iter().map(|q| q.request));
        for request in pending {
            let event = PromptEvent::Fault(fault.clone());
            out.push(Effect::Prompt { request, event });
        }
    }
}
