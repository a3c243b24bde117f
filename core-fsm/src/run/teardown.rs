//! Teardown (SPEC.md "The run, OrchestratorRun"): stop every
//! provisioned stage that can still answer, close the token endpoints, wait
//! for every stop fact, bounded by the stop timeout, then end.

use super::{Effect, Input, Machine, Phase, RunError, Teardown, TimerKind};
use crate::membership::Liveness;
use crate::stage::Report;
use crate::time::Instant;
use std::collections::BTreeSet;

impl Machine {
    pub(super) fn begin_teardown(
        &mut self,
        now: Instant,
        outcome: Result<(), RunError>,
        out: &mut Vec<Effect>,
    ) -> Phase {
        self.timers.clear();
        let mut waiting = BTreeSet::new();
        for stage in &self.provisioned {
            let node = &self.plan[*stage as usize].node;
            if !self.can_answer(*stage) {
                continue;
            }
            out.push(Effect::StopStage {
                node: node.clone(),
                stage: *stage,
            });
            waiting.insert(*stage);
        }
        // The token endpoints are opened together with the first provision,
        // so before it there is nothing to close.
        let endpoints_closed = self.provisioned.is_empty();
        if !endpoints_closed {
            out.push(Effect::CloseTokenEndpoints);
        }
        self.timers
            .set(TimerKind::Stop, now + self.config.stop_timeout);
        let teardown = Teardown {
            outcome,
            waiting,
            endpoints_closed,
        };
        self.maybe_finish(teardown, out)
    }

    /// Whether the stage's agent can still confirm a stop: the one that
    /// passed the barrier, and not dead.
    pub(super) fn can_answer(&self, stage: crate::stage::StageIndex) -> bool {
        let node = &self.plan[stage as usize].node;
        match (self.workers.get(&stage), self.members.get(node)) {
            (Some(worker), Some((agent, liveness))) => {
                worker.agent == *agent && *liveness != Liveness::Dead
            }
            _ => false,
        }
    }

    pub(super) fn on_teardown_input(
        &mut self,
        mut teardown: Teardown,
        input: Input,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let fresh = match input {
            Input::Stage(Report::StageStopped { stage, .. }) => teardown
                .waiting
                .remove(&stage.expect("admitted stop reports carry a stage")),
            Input::TokenEndpointsClosed { .. } => {
                !std::mem::replace(&mut teardown.endpoints_closed, true)
            }
            Input::Tick => true,
            // Faults and readiness after the end began change nothing: the
            // first error stands (SPEC.md "The run, OrchestratorRun").
            _ => {
                self.ignored.unexpected += 1;
                return Phase::TearingDown(teardown);
            }
        };
        if !fresh {
            self.ignored.duplicate += 1;
        }
        self.maybe_finish(teardown, out)
    }

    pub(super) fn on_stop_timeout(&mut self, teardown: Teardown, out: &mut Vec<Effect>) -> Phase {
        let outcome = match teardown.outcome {
            Ok(()) => Err(RunError::StopTimeout {
                stages: teardown.waiting.into_iter().collect(),
                token_endpoints: !teardown.endpoints_closed,
            }),
            first @ Err(_) => first,
        };
        self.finish(outcome, out)
    }

    pub(super) fn maybe_finish(&mut self, teardown: Teardown, out: &mut Vec<Effect>) -> Phase {
        if teardown.waiting.is_empty() && teardown.endpoints_closed {
            self.finish(teardown.outcome, out)
        } else {
            Phase::TearingDown(teardown)
        }
    }

    fn finish(&mut self, outcome: Result<(), RunError>, out: &mut Vec<Effect>) -> Phase {
        self.timers.clear();
        out.push(Effect::Finished(outcome.clone()));
        match outcome {
            Ok(()) => Phase::Stopped,
            Err(error) => Phase::Failed(error),
        }
    }
}
