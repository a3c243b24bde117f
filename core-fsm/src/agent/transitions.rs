//! The agent's routing and worker supervision: one `match (phase, input)`.

use super::{Effect, Input, Machine, Phase, Readiness, Report, TimerKind};
use crate::Machine as _;
use crate::boot;
use crate::ids::OpId;
use crate::stage::{self, StageIndex};
use crate::time::Instant;

impl Machine {
    pub(super) fn step(&mut self, now: Instant, input: Input, out: &mut Vec<Effect>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        let next = match (phase, input) {
            (phase, Input::Tick) => {
                self.tick(now, out);
                phase
            }
            (Phase::Idle, Input::Start) => {
                self.feed_boot(now, boot::Input::ProcessAlive, out);
                let op = OpId(self.next_id.next());
                self.spawns += 1;
                out.push(Effect::SpawnWorker { op });
                Phase::Spawning { op }
            }
            (phase, Input::Start) => {
                self.ignored.duplicate_start += 1;
                phase
            }
            (phase, Input::Boot(boot::Input::WorkerReady | boot::Input::WorkerFailed { .. })) => {
                self.ignored.worker_via_boot += 1;
                phase
            }
            (phase, Input::Boot(input)) => {
                self.feed_boot(now, input, out);
                phase
            }

            // Worker supervision: answers count only for the current spawn.
            (Phase::Spawning { op }, Input::WorkerSpawned { op: o, result }) if o == op => {
                match result {
                    Ok(()) => Phase::Starting { op },
                    Err(reason) => self.worker_gone(now, reason, out),
                }
            }
            (Phase::Spawning { op } | Phase::Starting { op }, Input::WorkerReady { op: o })
                if o == op =>
            {
                self.feed_boot(now, boot::Input::WorkerReady, out);
                Phase::Running { op }
            }
            (
                Phase::Spawning { op } | Phase::Starting { op } | Phase::Running { op },
                Input::WorkerExited { op: o, reason },
            ) if o == op => self.worker_gone(now, reason, out),
            (
                phase,
                Input::WorkerSpawned { .. }
                | Input::WorkerReady { .. }
                | Input::WorkerExited { .. },
            ) => {
                self.ignored.stale_worker += 1;
                phase
            }

            (
                phase,
                Input::ReadyAck {
                    from,
                    run_id,
                    readiness_id,
                },
            ) => {
                self.on_ready_ack(from, run_id, readiness_id, out);
                phase
            }
            // A repair provisions again the stage whose worker crashed:
            // a new worker for its new controller life.
            (Phase::Gone { .. }, Input::Provision { from, provision })
                if self.may_respawn(&from, &provision) =>
            {
                let op = OpId(self.next_id.next());
                self.spawns += 1;
                self.respawns += 1;
                out.push(Effect::SpawnWorker { op });
                self.admit_provision(now, from, provision, out);
                Phase::Spawning { op }
            }
            (phase, Input::Provision { from, provision }) => {
                self.on_provision(now, from, provision, out);
                phase
            }
            (phase, Input::Stage { stage, input }) => {
                if self.stages.contains_key(&stage) {
                    self.feed_stage(now, stage, input, out);
                } else {
                    self.ignored.unknown_stage += 1;
                }
                phase
            }
            (
                phase,
                Input::StopStage {
                    from,
                    run_id,
                    stage,
                },
            ) => {
                self.on_stop(now, from, run_id, stage, out);
                phase
            }
        };
        self.phase = next;
    }

    /// The worker failed to start or crashed: boot hears of it and every
    /// stage controller faults. Only a repair's new provision restarts it
    /// (`may_respawn`).
    fn worker_gone(&mut self, now: Instant, reason: String, out: &mut Vec<Effect>) -> Phase {
        let failed = boot::Input::WorkerFailed {
            reason: reason.clone(),
        };
        self.feed_boot(now, failed, out);
        let stages: Vec<StageIndex> = self.stages.keys().copied().collect();
        for stage in stages {
            let crashed = stage::Input::WorkerCrashed {
                reason: reason.clone(),
            };
            self.feed_stage(now, stage, crashed, out);
        }
        Phase::Gone { reason }
    }

    fn feed_boot(&mut self, now: Instant, input: boot::Input, out: &mut Vec<Effect>) {
        for effect in self.boot.handle(now, input) {
            // The announcement first, then what the agent does about it.
            out.push(Effect::Boot(effect.clone()));
            match &effect {
                boot::Effect::NodeAvailable { .. } => {
                    // Heartbeats start with availability and never stop: the
                    // membership decides what silence means.
                    out.push(self.heartbeat());
                    self.timers
                        .set(TimerKind::Heartbeat, now + self.config.heartbeat_interval);
                }
                boot::Effect::ProvisioningReady { .. } => {
                    let readiness_id = self.next_id.next();
                    self.readiness = Readiness::Reporting {
                        readiness_id,
                        sent: 0,
                    };
                    self.report_ready(now, out);
                }
                boot::Effect::WorkerUnavailable { .. } => {
                    if matches!(self.readiness, Readiness::Reporting { .. }) {
                        self.readiness = Readiness::Withdrawn;
                        self.timers.cancel(&TimerKind::ReadyResend);
                    }
                }
                boot::Effect::Faulted { .. } => {}
            }
        }
    }

    fn heartbeat(&self) -> Effect {
        Effect::Heartbeat {
            node: self.node().clone(),
            agent: self.config.agent.clone(),
        }
    }

    /// Sends (or resends) the runtime-ready report, arming the next resend
    /// while reports remain.
    fn report_ready(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let Readiness::Reporting { readiness_id, sent } = self.readiness else {
            unreachable!("reporting readiness");
        };
        out.push(Effect::Report(Report::RuntimeReady {
            run_id: self.config.run_id,
            node: self.node().clone(),
            stage: self.config.stage,
            agent: self.config.agent.clone(),
            readiness_id,
        }));
        let sent = sent + 1;
        self.readiness = Readiness::Reporting { readiness_id, sent };
        if sent < self.config.ready_reports_max {
            self.timers.set(
                TimerKind::ReadyResend,
                now + self.config.ready_resend_interval,
            );
        }
    }

    fn tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.boot.next_deadline().is_some_and(|d| d <= now) {
            self.feed_boot(now, boot::Input::Tick, out);
        }
        let due: Vec<StageIndex> = self
            .stages
            .iter()
            .filter(|(_, m)| m.next_deadline().is_some_and(|d| d <= now))
            .map(|(s, _)| *s)
            .collect();
        for stage in due {
            self.feed_stage(now, stage, stage::Input::Tick, out);
        }
        for kind in self.timers.take_expired(now) {
            match kind {
                TimerKind::ReadyResend => self.report_ready(now, out),
                TimerKind::Heartbeat => {
                    out.push(self.heartbeat());
                    self.timers
                        .set(TimerKind::Heartbeat, now + self.config.heartbeat_interval);
                }
            }
        }
    }

    fn authorised(&mut self, from: &crate::ids::AgentId, run_id: crate::ids::RunId) -> bool {
        let ok = *from == self.config.orchestrator && run_id == self.config.run_id;
        self.ignored.unauthorised += u64::from(!ok);
        ok
    }

    fn on_ready_ack(
        &mut self,
        from: crate::ids::AgentId,
        run_id: crate::ids::RunId,
        id: u64,
        out: &mut Vec<Effect>,
    ) {
        if !self.authorised(&from, run_id) {
            return;
        }
        match self.readiness {
            Readiness::Reporting { readiness_id, .. }
            | Readiness::Acknowledged { readiness_id }
                if readiness_id == id =>
            {
                // Every acknowledgement is answered: the orchestrator resends
                // them until it hears back, so an answer may have been lost.
                self.readiness = Readiness::Acknowledged { readiness_id };
                self.timers.cancel(&TimerKind::ReadyResend);
                out.push(Effect::Report(Report::ReadyAcked {
                    run_id,
                    node: self.node().clone(),
                    stage: self.config.stage,
                    agent: self.config.agent.clone(),
                    readiness_id,
                }));
            }
            _ => self.ignored.stale_ack += 1,
        }
    }

    fn on_provision(
        &mut self,
        now: Instant,
        from: crate::ids::AgentId,
        provision: stage::Provision,
        out: &mut Vec<Effect>,
    ) {
        // Provisioning never races ahead of availability (SPEC.md "Node
        // boot readiness"). Boot's word on the worker is its first one's: a
        // worker a repair started again (not gone since) serves as well.
        let respawned = self.respawns > 0
            && self.boot.is_available()
            && !matches!(self.phase, Phase::Gone { .. });
        if !self.boot.may_accept_provisioning() && !respawned {
            self.ignored.not_ready += 1;
            return;
        }
        self.admit_provision(now, from, provision, out);
    }

    /// Whether a provision, with the worker gone, starts a new one: the
    /// node booted, the orchestrator of this run sent it, and its stage's
    /// controller has stopped (a repair's rebuild; a first provision after
    /// a crash is not one).
    fn may_respawn(&self, from: &crate::ids::AgentId, provision: &stage::Provision) -> bool {
        *from == self.config.orchestrator
            && provision.run_id == self.config.run_id
            && self.boot.is_available()
            && self
                .stages
                .get(&provision.stage)
                .is_some_and(|c| matches!(c.phase(), stage::Phase::Stopped))
    }

    fn admit_provision(
        &mut self,
        now: Instant,
        from: crate::ids::AgentId,
        provision: stage::Provision,
        out: &mut Vec<Effect>,
    ) {
        let stage = provision.stage;
        // A stage stopped by a repair is provisioned again: a new
        // controller life (its old one only ever stops).
        if self
            .stages
            .get(&stage)
            .is_some_and(|c| matches!(c.phase(), stage::Phase::Stopped))
        {
            self.stages.remove(&stage);
            self.reprovisions += 1;
        }
        if !self.stages.contains_key(&stage) {
            if self.stages.len() >= self.config.stages_max {
                self.ignored.over_capacity += 1;
                return;
            }
            let config = stage::Config {
                run_id: self.config.run_id,
                node: self.node().clone(),
                orchestrator: self.config.orchestrator.clone(),
                stop_step_timeout: self.config.stop_step_timeout,
                ring: self.config.stage_ring,
            };
            self.stages.insert(stage, stage::Machine::new(config));
        }
        self.feed_stage(now, stage, stage::Input::Provision { from, provision }, out);
    }

    fn on_stop(
        &mut self,
        now: Instant,
        from: crate::ids::AgentId,
        run_id: crate::ids::RunId,
        stage: StageIndex,
        out: &mut Vec<Effect>,
    ) {
        if !self.authorised(&from, run_id) {
            return;
        }
        if self.stages.contains_key(&stage) {
            self.feed_stage(now, stage, stage::Input::Stop { run_id }, out);
        } else {
            // Nothing was set up for the stage, so it is stopped already.
            out.push(Effect::Report(Report::Stage(stage::Report::StageStopped {
                run_id,
                node: self.node().clone(),
                stage: Some(stage),
                clean: true,
            })));
        }
    }

    fn feed_stage(
        &mut self,
        now: Instant,
        stage: StageIndex,
        input: stage::Input,
        out: &mut Vec<Effect>,
    ) {
        let controller = self.stages.get_mut(&stage).expect("a stage controller");
        for effect in controller.handle(now, input) {
            out.push(match effect {
                stage::Effect::Report(report) => Effect::Report(Report::Stage(report)),
                effect => Effect::Stage { stage, effect },
            });
        }
    }
}

/// The agent's invariants (AG1..AG7 in `spec/run-machines.md`).
pub(super) fn check(m: &Machine) {
    m.boot.check_invariants();
    for controller in m.stages.values() {
        controller.check_invariants();
    }
    // AG1: one worker process at a time: the first, then one per respawn,
    // and a respawn only from Gone (the old one is dead).
    assert!(m.spawns <= 1 + m.respawns, "agent: worker restarted");
    // AG2: readiness is reported only once boot allowed provisioning.
    if !matches!(m.readiness, Readiness::Unreported) {
        assert!(m.boot.is_available(), "agent: ready before available");
    }
    // AG3: stage controllers exist only on an available node, bounded.
    assert!(m.stages.is_empty() || m.boot.is_available());
    assert!(m.stages.len() <= m.config.stages_max);
    // AG4: once the worker is gone, no stage is preparing or working.
    if matches!(m.phase, Phase::Gone { .. }) {
        for controller in m.stages.values() {
            assert!(
                !matches!(
                    controller.phase(),
                    stage::Phase::AwaitingReady { .. }
                        | stage::Phase::Ready { .. }
                        | stage::Phase::Busy { .. }
                ),
                "agent: a stage works without a worker"
            );
        }
    }
    // AG5: heartbeats run exactly while the node is available.
    assert_eq!(
        m.timers.is_set(&TimerKind::Heartbeat),
        m.boot.is_available()
    );
    // AG6: resends only while a report is outstanding.
    if m.timers.is_set(&TimerKind::ReadyResend) {
        assert!(matches!(m.readiness, Readiness::Reporting { .. }));
    }
}
