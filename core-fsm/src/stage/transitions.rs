//! The stage controller's transitions: one `match (phase, event)`.

use super::{
    Effect, Fault, Input, Machine, Phase, Provision, ReadyFacts, Report, StopStep, TimerKind,
};
use crate::time::Instant;

/// The readiness facts, as a pattern.
macro_rules! fact {
    () => {
        Input::WorkerReady
            | Input::WeightsReady
            | Input::InboundReady
            | Input::OutboundReady
            | Input::LoadFailed { .. }
    };
}

/// The answers to stop steps, as a pattern.
macro_rules! stop_answer {
    () => {
        Input::LocalEdgesStopped
            | Input::RingsQuiesced
            | Input::DeviceObjectsReleased
            | Input::WorkerRoleReset
    };
}

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
        let phase = std::mem::replace(&mut self.phase, Phase::Stopped);
        let next = match (phase, event) {
            // Stop is accepted in every phase but the last, for this run only.
            (Phase::Stopped, In(Input::Stop { .. })) => {
                self.ignored.unexpected += 1;
                Phase::Stopped
            }
            (phase, In(Input::Stop { run_id })) if run_id != self.config.run_id => {
                self.ignored.wrong_run += 1;
                phase
            }
            (phase @ Phase::Stopping { .. }, In(Input::Stop { .. })) => {
                self.ignored.duplicate += 1;
                phase
            }
            (phase, In(Input::Stop { .. })) => self.begin_stop(now, phase, out),

            (Phase::Unprovisioned, In(Input::Provision { from, provision })) => {
                self.on_provision(from, provision, out)
            }
            (phase, In(Input::Provision { from, provision })) => {
                self.on_reprovision(phase, from, provision, out)
            }

            (Phase::AwaitingReady { provision, facts }, In(input @ fact!())) => {
                self.on_fact(provision, facts, input, out)
            }
            (
                Phase::Ready {
                    provision,
                    next_seq,
                },
                In(Input::StepArrived { seq }),
            ) => {
                if seq == next_seq {
                    out.push(Effect::ExecuteStep { seq });
                    Phase::Busy {
                        provision,
                        seq,
                        queued: 0,
                    }
                } else {
                    let fault = Fault::SequenceViolation {
                        expected: next_seq,
                        got: seq,
                    };
                    self.fault(Some(provision), fault, out)
                }
            }
            (
                Phase::Busy {
                    provision,
                    seq: busy,
                    queued,
                },
                In(Input::StepArrived { seq }),
            ) => {
                let expected = busy + 1 + queued;
                if seq != expected {
                    let fault = Fault::SequenceViolation { expected, got: seq };
                    self.fault(Some(provision), fault, out)
                } else if queued >= self.config.ring {
                    self.fault(Some(provision), Fault::Overrun { busy, got: seq }, out)
                } else {
                    Phase::Busy {
                        provision,
                        seq: busy,
                        queued: queued + 1,
                    }
                }
            }
            (
                Phase::Busy {
                    provision,
                    seq: busy,
                    queued,
                },
                In(Input::StepCompleted { seq }),
            ) if seq == busy => {
                self.steps_completed += 1;
                if queued > 0 {
                    // The next waiting step goes at once, in order.
                    out.push(Effect::ExecuteStep { seq: busy + 1 });
                    Phase::Busy {
                        provision,
                        seq: busy + 1,
                        queued: queued - 1,
                    }
                } else {
                    Phase::Ready {
                        provision,
                        next_seq: busy + 1,
                    }
                }
            }
            (
                Phase::Busy {
                    provision,
                    seq: busy,
                    ..
                },
                In(Input::StepFailed { seq, reason }),
            ) if seq == busy => self.fault(Some(provision), Fault::StepFailed { seq, reason }, out),
            (phase, In(Input::StepCompleted { .. } | Input::StepFailed { .. }))
                if !matches!(phase, Phase::Faulted { .. }) =>
            {
                self.ignored.wrong_step += 1;
                phase
            }

            // Faults that can strike any prepared or working stage.
            (
                phase @ (Phase::AwaitingReady { .. } | Phase::Ready { .. } | Phase::Busy { .. }),
                In(input @ (Input::WorkerCrashed { .. } | Input::EdgeFault { .. })),
            ) => {
                let fault = match input {
                    Input::WorkerCrashed { reason } => Fault::WorkerCrashed { reason },
                    Input::EdgeFault { reason } => Fault::EdgeFault { reason },
                    _ => unreachable!("matched above"),
                };
                self.fault(provision_of(phase), fault, out)
            }

            (phase @ Phase::Faulted { .. }, In(_)) => {
                self.ignored.after_fault += 1;
                phase
            }
            (
                Phase::Stopping {
                    provision,
                    step,
                    clean,
                },
                In(input @ stop_answer!()),
            ) => {
                if answers(step, &input) {
                    self.advance_stop(now, provision, step, clean, out)
                } else {
                    self.ignored.unexpected += 1;
                    Phase::Stopping {
                        provision,
                        step,
                        clean,
                    }
                }
            }
            (
                Phase::Stopping {
                    provision, step, ..
                },
                Fire(TimerKind::StopStep),
            ) => {
                // A step that never answers must not hold the stop forever.
                self.advance_stop(now, provision, step, false, out)
            }
            (phase, In(Input::Tick)) => phase,
            (phase, In(_)) => {
                self.ignored.unexpected += 1;
                phase
            }
            (phase, Fire(kind)) => unreachable!("stage: {kind:?} fired in {phase:?}"),
        };
        self.phase = next;
    }

    fn on_provision(
        &mut self,
        from: crate::ids::AgentId,
        provision: Provision,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let authorised = self.authorised(&from, &provision);
        if !authorised {
            let fault = Fault::Unauthorised {
                from,
                node: provision.node,
            };
            return self.fault(None, fault, out);
        }
        out.push(Effect::EstablishInbound(provision.inbound));
        out.push(Effect::EstablishOutbound(provision.outbound));
        out.push(Effect::ConfigureWorker {
            stage: provision.stage,
            stage_count: provision.stage_count,
            layers: provision.layers,
        });
        out.push(Effect::LoadWeights {
            model_id: provision.model_id.clone(),
            layers: provision.layers,
        });
        Phase::AwaitingReady {
            provision: Box::new(provision),
            facts: ReadyFacts::default(),
        }
    }

    /// A provision after the first: a resend of the same one is a duplicate;
    /// anything unauthorised faults the stage (SPEC.md "The stage controller").
    fn on_reprovision(
        &mut self,
        phase: Phase,
        from: crate::ids::AgentId,
        provision: Provision,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let authorised = self.authorised(&from, &provision);
        match phase {
            Phase::Faulted { .. } | Phase::Stopping { .. } | Phase::Stopped => {
                self.ignored.after_fault += u64::from(matches!(phase, Phase::Faulted { .. }));
                self.ignored.unexpected += u64::from(!matches!(phase, Phase::Faulted { .. }));
                phase
            }
            phase if authorised => {
                self.ignored.duplicate += 1;
                phase
            }
            phase => {
                let fault = Fault::Unauthorised {
                    from,
                    node: provision.node,
                };
                self.fault(provision_of(phase), fault, out)
            }
        }
    }

    fn on_fact(
        &mut self,
        provision: Box<Provision>,
        mut facts: ReadyFacts,
        input: Input,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let slot = match input {
            Input::WorkerReady => &mut facts.worker,
            Input::WeightsReady => &mut facts.weights,
            Input::InboundReady => &mut facts.inbound,
            Input::OutboundReady => &mut facts.outbound,
            Input::LoadFailed { reason } => {
                return self.fault(Some(provision), Fault::LoadFailed { reason }, out);
            }
            _ => unreachable!("not a readiness fact"),
        };
        if *slot {
            self.ignored.duplicate += 1;
            return Phase::AwaitingReady { provision, facts };
        }
        *slot = true;
        let report = |p: &Provision, ready: bool| {
            let (run_id, node, stage) = (p.run_id, p.node.clone(), p.stage);
            Effect::Report(if ready {
                Report::StageReady {
                    run_id,
                    node,
                    stage,
                }
            } else {
                Report::WeightsReady {
                    run_id,
                    node,
                    stage,
                }
            })
        };
        if matches!(input, Input::WeightsReady) {
            out.push(report(&provision, false));
        }
        if facts.all() {
            out.push(report(&provision, true));
            Phase::Ready {
                provision,
                next_seq: 0,
            }
        } else {
            Phase::AwaitingReady { provision, facts }
        }
    }

    /// SPEC.md "The stage controller": the sender and the provision's own field name the
    /// expected orchestrator, and the provision is for this node and run.
    fn authorised(&self, from: &crate::ids::AgentId, provision: &Provision) -> bool {
        *from == self.config.orchestrator
            && provision.orchestrator == self.config.orchestrator
            && provision.node == self.config.node
            && provision.run_id == self.config.run_id
    }

    fn fault(
        &mut self,
        provision: Option<Box<Provision>>,
        fault: Fault,
        out: &mut Vec<Effect>,
    ) -> Phase {
        out.push(Effect::Report(Report::StageFault {
            run_id: provision.as_ref().map(|p| p.run_id),
            node: self.config.node.clone(),
            stage: provision.as_ref().map(|p| p.stage),
            fault: fault.clone(),
        }));
        Phase::Faulted { provision, fault }
    }

    fn begin_stop(&mut self, now: Instant, phase: Phase, out: &mut Vec<Effect>) -> Phase {
        match provision_of(phase) {
            // Nothing was set up, so there is nothing to take down.
            None => self.finish_stop(None, true, out),
            Some(provision) => {
                let step = StopStep::LocalEdges;
                out.push(step.effect());
                self.timers
                    .set(TimerKind::StopStep, now + self.config.stop_step_timeout);
                Phase::Stopping {
                    provision,
                    step,
                    clean: true,
                }
            }
        }
    }

    fn advance_stop(
        &mut self,
        now: Instant,
        provision: Box<Provision>,
        step: StopStep,
        clean: bool,
        out: &mut Vec<Effect>,
    ) -> Phase {
        match step.next() {
            Some(next) => {
                out.push(next.effect());
                self.timers
                    .set(TimerKind::StopStep, now + self.config.stop_step_timeout);
                Phase::Stopping {
                    provision,
                    step: next,
                    clean,
                }
            }
            None => {
                self.timers.cancel(&TimerKind::StopStep);
                self.finish_stop(Some(provision), clean, out)
            }
        }
    }

    fn finish_stop(
        &mut self,
        provision: Option<Box<Provision>>,
        clean: bool,
        out: &mut Vec<Effect>,
    ) -> Phase {
        out.push(Effect::Report(Report::StageStopped {
            run_id: self.config.run_id,
            node: self.config.node.clone(),
            stage: provision.map(|p| p.stage),
            clean,
        }));
        Phase::Stopped
    }
}

fn answers(step: StopStep, input: &Input) -> bool {
    matches!(
        (step, input),
        (StopStep::LocalEdges, Input::LocalEdgesStopped)
            | (StopStep::Rings, Input::RingsQuiesced)
            | (StopStep::DeviceObjects, Input::DeviceObjectsReleased)
            | (StopStep::WorkerRole, Input::WorkerRoleReset)
    )
}

fn provision_of(phase: Phase) -> Option<Box<Provision>> {
    match phase {
        Phase::Unprovisioned | Phase::Stopped => None,
        Phase::AwaitingReady { provision, .. }
        | Phase::Ready { provision, .. }
        | Phase::Busy { provision, .. }
        | Phase::Stopping { provision, .. } => Some(provision),
        Phase::Faulted { provision, .. } => provision,
    }
}
