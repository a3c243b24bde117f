//! The run's transitions: a context filter, then one `match (phase, event)`.

use super::{Effect, Input, Machine, Phase, PhaseName, PromptFault, RunError, Serving, TimerKind};
use crate::membership::Liveness;
use crate::stage::Report;
use crate::time::Instant;

/// An input, or a timer of the machine's own that fired.
pub(super) enum Event {
    /// Something from outside.
    In(Input),
    /// A timer expired.
    Fire(TimerKind),
}

impl Machine {
    pub(super) fn step(&mut self, now: Instant, event: Event, out: &mut Vec<Effect>) {
        use Event::{Fire, In};
        if let In(input) = &event
            && !self.admit(input)
        {
            return;
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Stopped);
        let next = match (phase, event) {
            (
                phase,
                In(Input::Liveness {
                    node,
                    agent,
                    liveness,
                }),
            ) => self.on_liveness(now, phase, node, agent, liveness, out),
            (
                phase,
                In(Input::Submit {
                    request,
                    prompt,
                    max_tokens,
                }),
            ) => self.on_submit(now, phase, request, prompt, max_tokens, out),

            (Phase::AwaitingReadiness(barrier), In(input @ Input::RuntimeReady { .. })) => {
                self.on_runtime_ready(now, barrier, input, out)
            }
            (Phase::AwaitingReadiness(barrier), Fire(TimerKind::Readiness)) => {
                let missing = self.unready(&barrier);
                self.fail(now, RunError::ReadinessTimeout { missing }, out)
            }
            (Phase::Acknowledging(acks), In(input @ Input::ReadyAcked { .. })) => {
                self.on_ready_acked(now, acks, input, out)
            }
            (Phase::Acknowledging(acks), Fire(TimerKind::AckRetry)) => {
                self.resend_acks(now, acks, out)
            }
            (Phase::Acknowledging(acks), Fire(TimerKind::AckDeadline)) => {
                let missing = (0..self.stage_count())
                    .filter(|s| !acks.acked.contains(s))
                    .collect();
                self.fail(now, RunError::AckTimeout { missing }, out)
            }
            (
                Phase::LoadingWeights { stage, progress },
                In(Input::Stage(Report::WeightsReady { stage: s, .. })),
            ) if s == stage => self.on_weights_ready(now, stage, progress, out),
            (Phase::LoadingWeights { stage, .. }, Fire(TimerKind::WeightLoad)) => {
                self.fail(now, RunError::WeightLoadTimeout { stage }, out)
            }
            (
                Phase::LoadingWeights {
                    stage,
                    mut progress,
                },
                In(
                    input @ (Input::Stage(Report::StageReady { .. })
                    | Input::TokenEndpointReady { .. }),
                ),
            ) => {
                self.record_progress(&mut progress, input);
                Phase::LoadingWeights { stage, progress }
            }
            (
                Phase::AwaitingStageReady(mut progress),
                In(
                    input @ (Input::Stage(Report::StageReady { .. })
                    | Input::TokenEndpointReady { .. }),
                ),
            ) => {
                self.record_progress(&mut progress, input);
                self.check_stages_ready(now, progress, out)
            }
            (Phase::AwaitingStageReady(progress), Fire(TimerKind::StageReady)) => {
                let missing = (0..self.stage_count())
                    .filter(|s| !progress.ready.contains(s))
                    .collect();
                let token_endpoints_missing = !(progress.token_in && progress.token_out);
                let error = RunError::StageReadyTimeout {
                    missing,
                    token_endpoints_missing,
                };
                self.fail(now, error, out)
            }
            (Phase::OpeningPrompt { op }, In(Input::PromptServiceOpened { op: o, result }))
                if o == op =>
            {
                self.on_prompt_opened(now, result, out)
            }
            (Phase::OpeningPrompt { .. }, Fire(TimerKind::PromptOpen)) => {
                let reason = "the prompt service did not open in time".to_owned();
                self.fail(now, RunError::PromptBindFailed { reason }, out)
            }

            (Phase::Serving(serving), In(input @ Input::Token { .. })) => {
                self.on_token(now, serving, input, out)
            }
            (
                Phase::Serving(serving),
                In(Input::PromptFault {
                    request, reason, ..
                }),
            ) => self.on_prompt_fault(now, serving, request, reason, out),
            (Phase::Serving(serving), Fire(TimerKind::TokenGap)) => {
                self.on_token_timeout(now, serving, out)
            }

            (Phase::Repairing(repair), In(input)) => self.on_repair_input(now, repair, input, out),
            (Phase::Repairing(repair), Fire(TimerKind::Repair)) => {
                self.on_repair_timeout(now, repair, out)
            }

            (Phase::TearingDown(teardown), In(input)) => {
                self.on_teardown_input(teardown, input, out)
            }
            (Phase::TearingDown(teardown), Fire(TimerKind::Stop)) => {
                self.on_stop_timeout(teardown, out)
            }

            // Failures that end any phase before teardown. A fault of a
            // stage this run has not provisioned is another life's (a
            // crashed orchestrator's pipeline, torn down since) and falls
            // through as unexpected.
            (phase, In(Input::Stage(Report::StageFault { stage, fault, .. })))
                if !phase.is_terminal() && stage.is_some_and(|s| self.provisioned.contains(&s)) =>
            {
                let stage = stage.expect("admitted stage reports carry a stage");
                let error = match &phase {
                    Phase::LoadingWeights { stage: loading, .. } if *loading == stage => {
                        RunError::WeightLoadFailed { stage, fault }
                    }
                    Phase::Serving(_) => RunError::StageFault { stage, fault },
                    _ => RunError::StageProvisionFailed { stage, fault },
                };
                self.repair_or_fail(now, phase, error, out)
            }
            (phase, In(Input::EndpointFault { reason, .. })) if !phase.is_terminal() => {
                let during = phase_name(&phase);
                let error = RunError::EndpointFault { during, reason };
                self.repair_or_fail(now, phase, error, out)
            }
            (phase, In(Input::SendFailed { node, reason })) if !phase.is_terminal() => {
                let during = phase_name(&phase);
                let error = RunError::SendFailed {
                    node,
                    during,
                    reason,
                };
                self.repair_or_fail(now, phase, error, out)
            }
            (phase, In(Input::Shutdown)) if !phase.is_terminal() => self.shutdown(now, phase, out),

            (phase, In(Input::Tick)) => phase,
            (phase, In(Input::Stage(Report::WeightsReady { stage, .. })))
                if self.provisioned.contains(&stage) =>
            {
                self.ignored.duplicate += 1;
                phase
            }
            (phase, In(_)) => {
                self.ignored.unexpected += 1;
                phase
            }
            (phase, Fire(kind)) => unreachable!("run: {kind:?} fired in {phase:?}"),
        };
        self.phase = next;
    }

    /// The context filter (SPEC.md "The run, OrchestratorRun"): a report about another
    /// run, a node outside the plan or a stage that is not the node's never
    /// reaches the phase logic.
    fn admit(&mut self, input: &Input) -> bool {
        let run_id = match input {
            Input::RuntimeReady { run_id, .. }
            | Input::ReadyAcked { run_id, .. }
            | Input::TokenEndpointReady { run_id, .. }
            | Input::EndpointFault { run_id, .. }
            | Input::TokenEndpointsClosed { run_id }
            | Input::Token { run_id, .. }
            | Input::PromptFault { run_id, .. } => Some(*run_id),
            Input::Stage(report) => Some(report_run(report).unwrap_or(crate::ids::RunId(u64::MAX))),
            _ => None,
        };
        if run_id.is_some_and(|r| r != self.config.run_id) {
            self.ignored.wrong_run += 1;
            return false;
        }
        let (node, stage) = match input {
            Input::RuntimeReady { node, stage, .. } | Input::ReadyAcked { node, stage, .. } => {
                (node, Some(*stage))
            }
            Input::Stage(report) => {
                let (node, stage) = report_target(report);
                (node, Some(stage.unwrap_or(u32::MAX)))
            }
            Input::Liveness { node, .. } | Input::SendFailed { node, .. } => (node, None),
            _ => return true,
        };
        match self.stage_of(node) {
            None => {
                self.ignored.unknown_node += 1;
                false
            }
            Some(planned) if stage.is_some_and(|s| s != planned) => {
                self.ignored.wrong_stage += 1;
                false
            }
            Some(_) => true,
        }
    }

    /// Moves to teardown with `error`, faulting any request still pending.
    pub(super) fn fail_from(
        &mut self,
        now: Instant,
        phase: Phase,
        error: RunError,
        out: &mut Vec<Effect>,
    ) -> Phase {
        if let Phase::Serving(serving) = phase {
            self.fault_all(serving, PromptFault::RunFailed, out);
        }
        self.fail(now, error, out)
    }

    /// A loss: repaired while repairs remain, else the end of the run.
    fn repair_or_fail(
        &mut self,
        now: Instant,
        phase: Phase,
        error: RunError,
        out: &mut Vec<Effect>,
    ) -> Phase {
        if self.may_repair(&phase) {
            self.begin_repair(now, phase, error, out)
        } else {
            self.fail_from(now, phase, error, out)
        }
    }

    /// Moves to teardown with `error`; the phase held no request (a
    /// repair's carried requests fail with it).
    pub(super) fn fail(&mut self, now: Instant, error: RunError, out: &mut Vec<Effect>) -> Phase {
        if let Some(carry) = self.carry.take() {
            self.fault_carry(carry, PromptFault::RunFailed, out);
        }
        self.begin_teardown(now, Err(error), out)
    }

    fn shutdown(&mut self, now: Instant, phase: Phase, out: &mut Vec<Effect>) -> Phase {
        if let Some(carry) = self.carry.take() {
            // A stop while rebuilding after a repair ends the run in order.
            self.fault_carry(carry, PromptFault::Shutdown, out);
            return self.begin_teardown(now, Ok(()), out);
        }
        match phase {
            // A stop while serving is the controlled end of the run.
            Phase::Serving(serving) => {
                self.fault_all(serving, PromptFault::Shutdown, out);
                self.begin_teardown(now, Ok(()), out)
            }
            // A stop before serving interrupts startup, which is an error of
            // the phase it interrupted.
            phase => {
                let during = phase_name(&phase);
                self.fail(now, RunError::ShutdownRequested { during }, out)
            }
        }
    }

    fn on_liveness(
        &mut self,
        now: Instant,
        phase: Phase,
        node: crate::ids::LogicalNodeId,
        agent: crate::ids::AgentId,
        liveness: Liveness,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let stage = self.stage_of(&node).expect("admitted");
        self.members.insert(node.clone(), (agent.clone(), liveness));
        // After the barrier the node's agent is fixed: its death, or another
        // identity taking the node over, loses the stage.
        let lost = liveness == Liveness::Dead
            || self.workers.get(&stage).is_some_and(|w| w.agent != agent);
        match phase {
            Phase::AwaitingReadiness(barrier) if !lost => {
                // Each node's agent is told its stage once membership
                // holds it Alive (at the start, or when it rejoins a
                // restarted orchestrator), until it has reported.
                let reported = barrier
                    .reports
                    .get(&stage)
                    .is_some_and(|r| r.agent == agent);
                if liveness == Liveness::Alive && !reported {
                    out.push(Effect::Enlist { node, agent, stage });
                }
                self.check_barrier(now, barrier, out)
            }
            // A lost stage is not waited for; a replacement's agent that is
            // Alive is told its stage, and its report may complete the
            // barrier.
            Phase::Repairing(repair) => {
                self.on_repair_liveness(now, repair, stage, (&node, &agent, liveness), lost, out)
            }
            Phase::TearingDown(mut teardown) => {
                if lost {
                    // A dead stage cannot confirm its stop; do not wait for it.
                    teardown.waiting.remove(&stage);
                }
                self.maybe_finish(teardown, out)
            }
            phase if lost && !phase.is_terminal() => {
                let during = phase_name(&phase);
                self.repair_or_fail(now, phase, RunError::NodeDead { node, during }, out)
            }
            phase => phase,
        }
    }

    pub(super) fn fault_all(
        &mut self,
        serving: Serving,
        fault: PromptFault,
        out: &mut Vec<Effect>,
    ) {
        self.timers.cancel(&TimerKind::TokenGap);
        let pending = serving
            .active
            .map(|a| a.request)
            .into_iter()
            .chain(serving.queue.into_iter().map(|q| q.request));
        for request in pending {
            let event = super::PromptEvent::Fault(fault.clone());
            out.push(Effect::Prompt { request, event });
        }
    }
}

fn report_run(report: &Report) -> Option<crate::ids::RunId> {
    match report {
        Report::WeightsReady { run_id, .. }
        | Report::StageReady { run_id, .. }
        | Report::StageStopped { run_id, .. } => Some(*run_id),
        Report::StageFault { run_id, .. } => *run_id,
    }
}

fn report_target(report: &Report) -> (&crate::ids::LogicalNodeId, Option<u32>) {
    match report {
        Report::WeightsReady { node, stage, .. } | Report::StageReady { node, stage, .. } => {
            (node, Some(*stage))
        }
        Report::StageFault { node, stage, .. } | Report::StageStopped { node, stage, .. } => {
            (node, *stage)
        }
    }
}

pub(super) fn phase_name(phase: &Phase) -> PhaseName {
    match phase {
        Phase::AwaitingReadiness(_) => PhaseName::Readiness,
        Phase::Acknowledging(_) => PhaseName::Acknowledgement,
        Phase::LoadingWeights { .. } => PhaseName::WeightLoading,
        Phase::AwaitingStageReady(_) => PhaseName::StageReadiness,
        Phase::OpeningPrompt { .. } => PhaseName::PromptStartup,
        Phase::Repairing(_) => PhaseName::Repair,
        Phase::Serving(_) | Phase::TearingDown(_) | Phase::Stopped | Phase::Failed(_) => {
            PhaseName::Serving
        }
    }
}
