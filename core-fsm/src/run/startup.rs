//! Startup: readiness barrier, acknowledgements, sequential weight loading,
//! stage readiness and the prompt service (SPEC.md "The run, OrchestratorRun").

use super::{
    Acks, Barrier, Effect, Input, Machine, Phase, RunError, Serving, StageProgress, TimerKind,
    TokenEndpoint, Worker,
};
use crate::membership::Liveness;
use crate::stage::{Provision, Report, StageIndex};
use crate::time::Instant;

impl Machine {
    pub(super) fn on_runtime_ready(
        &mut self,
        now: Instant,
        mut barrier: Barrier,
        input: Input,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let Input::RuntimeReady {
            node,
            stage,
            agent,
            readiness_id,
            ..
        } = input
        else {
            unreachable!("matched RuntimeReady");
        };
        if !self.keep_report(&mut barrier, &node, stage, agent, readiness_id) {
            return Phase::AwaitingReadiness(barrier);
        }
        self.check_barrier(now, barrier, out)
    }

    /// Keeps a runtime-ready report in `barrier`; false (and counted) when
    /// it is a duplicate, or speaks for a node whose living member is
    /// another identity. A report may come before its agent is a member,
    /// or while the member it replaces is Dead: the barrier only counts it
    /// once membership holds its agent Alive (RN6).
    pub(super) fn keep_report(
        &mut self,
        barrier: &mut Barrier,
        node: &crate::ids::LogicalNodeId,
        stage: StageIndex,
        agent: crate::ids::AgentId,
        readiness_id: u64,
    ) -> bool {
        let other = self
            .members
            .get(node)
            .is_some_and(|(a, liveness)| *a != agent && *liveness != Liveness::Dead);
        let report = Worker {
            agent,
            readiness_id,
        };
        if other {
            self.ignored.wrong_agent += 1;
            false
        } else if barrier.reports.get(&stage) == Some(&report) {
            self.ignored.duplicate += 1;
            false
        } else {
            barrier.reports.insert(stage, report);
            true
        }
    }

    /// Whether `stage`'s node passes the barrier: a report for this run from
    /// the agent that membership holds Alive for the node (SPEC.md "The run, OrchestratorRun").
    fn stage_ready(&self, barrier: &Barrier, stage: StageIndex) -> bool {
        let node = &self.plan[stage as usize].node;
        match (barrier.reports.get(&stage), self.members.get(node)) {
            (Some(report), Some((agent, Liveness::Alive))) => report.agent == *agent,
            _ => false,
        }
    }

    pub(super) fn unready(&self, barrier: &Barrier) -> Vec<StageIndex> {
        (0..self.stage_count())
            .filter(|s| !self.stage_ready(barrier, *s))
            .collect()
    }

    pub(super) fn check_barrier(
        &mut self,
        now: Instant,
        barrier: Barrier,
        out: &mut Vec<Effect>,
    ) -> Phase {
        if !self.unready(&barrier).is_empty() {
            return Phase::AwaitingReadiness(barrier);
        }
        self.workers = barrier.reports;
        self.timers.clear();
        self.timers
            .set(TimerKind::AckDeadline, now + self.config.ack_timeout);
        self.resend_acks(now, Acks::default(), out)
    }

    /// Sends the acknowledgement to every node that has not confirmed it, and
    /// arms the next resend while attempts remain.
    pub(super) fn resend_acks(
        &mut self,
        now: Instant,
        mut acks: Acks,
        out: &mut Vec<Effect>,
    ) -> Phase {
        acks.attempts += 1;
        for (stage, worker) in &self.workers {
            if acks.acked.contains(stage) {
                continue;
            }
            out.push(Effect::SendReadyAck {
                node: self.plan[*stage as usize].node.clone(),
                agent: worker.agent.clone(),
                run_id: self.config.run_id,
                stage: *stage,
                readiness_id: worker.readiness_id,
            });
        }
        if acks.attempts < self.config.ack_attempts_max {
            self.timers
                .set(TimerKind::AckRetry, now + self.config.ack_retry_interval);
        }
        Phase::Acknowledging(acks)
    }

    pub(super) fn on_ready_acked(
        &mut self,
        now: Instant,
        mut acks: Acks,
        input: Input,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let Input::ReadyAcked {
            stage,
            agent,
            readiness_id,
            ..
        } = input
        else {
            unreachable!("matched ReadyAcked");
        };
        let worker = &self.workers[&stage];
        if worker.agent != agent {
            self.ignored.wrong_agent += 1;
        } else if worker.readiness_id != readiness_id {
            self.ignored.unexpected += 1;
        } else if !acks.acked.insert(stage) {
            self.ignored.duplicate += 1;
        } else if acks.acked.len() == self.workers.len() {
            self.timers.clear();
            self.provisioned.clear();
            out.push(Effect::OpenTokenEndpoints);
            return self.provision(now, 0, StageProgress::default(), out);
        }
        Phase::Acknowledging(acks)
    }

    /// Sends stage `stage` its provision and waits for its weights.
    fn provision(
        &mut self,
        now: Instant,
        stage: StageIndex,
        progress: StageProgress,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let assignment = &self.plan[stage as usize];
        let provision = Provision {
            run_id: self.config.run_id,
            orchestrator: self.config.orchestrator.clone(),
            node: assignment.node.clone(),
            stage,
            stage_count: self.stage_count(),
            layers: assignment.layers,
            inbound: assignment.inbound,
            outbound: assignment.outbound,
            model_id: self.config.model_id.clone(),
        };
        out.push(Effect::ProvisionStage {
            node: assignment.node.clone(),
            agent: self.workers[&stage].agent.clone(),
            provision,
        });
        self.provisioned.insert(stage);
        self.timers
            .set(TimerKind::WeightLoad, now + self.config.weights_timeout);
        Phase::LoadingWeights { stage, progress }
    }

    pub(super) fn on_weights_ready(
        &mut self,
        now: Instant,
        stage: StageIndex,
        progress: StageProgress,
        out: &mut Vec<Effect>,
    ) -> Phase {
        if stage + 1 < self.stage_count() {
            return self.provision(now, stage + 1, progress, out);
        }
        self.timers.clear();
        self.timers
            .set(TimerKind::StageReady, now + self.config.stage_ready_timeout);
        self.check_stages_ready(now, progress, out)
    }

    pub(super) fn record_progress(&mut self, progress: &mut StageProgress, input: Input) {
        let fresh = match input {
            Input::Stage(Report::StageReady { stage, .. }) => progress.ready.insert(stage),
            Input::TokenEndpointReady { endpoint, .. } => {
                let slot = match endpoint {
                    TokenEndpoint::In => &mut progress.token_in,
                    TokenEndpoint::Out => &mut progress.token_out,
                };
                !std::mem::replace(slot, true)
            }
            _ => unreachable!("not a readiness report"),
        };
        if !fresh {
            self.ignored.duplicate += 1;
        }
    }

    pub(super) fn check_stages_ready(
        &mut self,
        now: Instant,
        progress: StageProgress,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let all = progress.ready.len() == self.stage_count() as usize;
        if !(all && progress.token_in && progress.token_out) {
            return Phase::AwaitingStageReady(progress);
        }
        // After a repair the prompt service is open already (unless the
        // repair came during the startup).
        if self.prompt_open
            && let Some(carry) = self.carry.take()
        {
            return self.resume(now, carry, out);
        }
        self.timers.clear();
        let op = crate::ids::OpId(self.next_op.next());
        self.timers
            .set(TimerKind::PromptOpen, now + self.config.prompt_open_timeout);
        out.push(Effect::OpenPromptService { op });
        Phase::OpeningPrompt { op }
    }

    pub(super) fn on_prompt_opened(
        &mut self,
        now: Instant,
        result: Result<(), String>,
        out: &mut Vec<Effect>,
    ) -> Phase {
        match result {
            Ok(()) => {
                self.timers.clear();
                self.prompt_open = true;
                // A repair during the startup ends here.
                match self.carry.take() {
                    Some(carry) => self.resume(now, carry, out),
                    None => Phase::Serving(Serving::default()),
                }
            }
            Err(reason) => self.fail(now, RunError::PromptBindFailed { reason }, out),
        }
    }
}
