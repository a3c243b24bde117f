//! Agent transcripts: boot readiness, worker supervision (no restarts),
//! readiness reporting, provisioning gated by boot, routing to stage
//! controllers, and what the agent ignores.

use core_fsm::Machine as _;
use core_fsm::agent::{Config, Effect, Input, Machine};
use core_fsm::boot;
use core_fsm::ids::{AgentId, LogicalNodeId, OpId, RunId};
use core_fsm::stage::{self, Edge, EdgeKind, LayerRange, Provision};
use core_fsm::time::{Duration, Instant};
use std::fmt::Write as _;

fn config(worker_start: boot::WorkerStartPolicy) -> Config {
    Config {
        boot: boot::Config {
            node: LogicalNodeId::from("workers-1"),
            worker_start,
            boot_timeout: Duration::from_secs(30),
        },
        run_id: RunId(7),
        agent: AgentId::from("agent-1"),
        orchestrator: AgentId::from("orch"),
        stage: 1,
        stages_max: 2,
        ready_resend_interval: Duration::from_millis(1_000),
        ready_reports_max: 3,
        heartbeat_interval: Duration::from_millis(2_000),
        stop_step_timeout: Duration::from_millis(500),
        stage_ring: 0,
    }
}

fn provision(stage: u32) -> Input {
    Input::Provision {
        from: AgentId::from("orch"),
        provision: Provision {
            run_id: RunId(7),
            orchestrator: AgentId::from("orch"),
            node: LogicalNodeId::from("workers-1"),
            stage,
            stage_count: 3,
            layers: LayerRange {
                start: 4,
                end_exclusive: 7,
            },
            inbound: Edge {
                id: stage,
                kind: EdgeKind::Activation,
            },
            outbound: Edge {
                id: stage + 1,
                kind: EdgeKind::Activation,
            },
            model_id: "tiny-llama".into(),
        },
    }
}

fn fact(stage: u32, input: stage::Input) -> Input {
    Input::Stage { stage, input }
}

fn ack(readiness_id: u64) -> Input {
    Input::ReadyAck {
        from: AgentId::from("orch"),
        run_id: RunId(7),
        readiness_id,
    }
}

fn stop(stage: u32) -> Input {
    Input::StopStage {
        from: AgentId::from("orch"),
        run_id: RunId(7),
        stage,
    }
}

/// The local boot facts other than the worker, at time `t`.
fn boot_facts(t: u64) -> Vec<(u64, Input)> {
    [
        boot::Input::TransportReady,
        boot::Input::IdentityAssigned {
            node: LogicalNodeId::from("workers-1"),
        },
        boot::Input::ArenaCreated,
        boot::Input::Membership(boot::Membership::Joined),
        boot::Input::CanAcceptProvisioning,
    ]
    .into_iter()
    .map(|i| (t, Input::Boot(i)))
    .collect()
}

fn tidy(text: String) -> String {
    let mut s = text;
    for wrapper in ["LogicalNodeId(", "AgentId("] {
        while let Some(at) = s.find(wrapper) {
            let inner = at + wrapper.len();
            let close = inner + s[inner..].find(')').expect("closing parenthesis");
            let value = s[inner..close].trim_matches('"').to_owned();
            s.replace_range(at..=close, &value);
        }
    }
    s.replace("RunId(7)", "run-7")
}

fn state(m: &Machine) -> String {
    let boot = if let Some(fault) = m.boot().fault() {
        format!("Faulted({fault:?})")
    } else if m.boot().is_available() {
        format!(
            "Available(provisioning={})",
            m.boot().may_accept_provisioning()
        )
    } else {
        format!("Booting(missing {:?})", m.boot().missing())
    };
    let stages: Vec<String> = m
        .stages()
        .iter()
        .map(|(s, c)| {
            let phase = match c.phase() {
                stage::Phase::AwaitingReady { facts, .. } => format!("AwaitingReady {facts:?}"),
                stage::Phase::Faulted { fault, .. } => format!("Faulted {fault:?}"),
                stage::Phase::Stopping { step, .. } => format!("Stopping {step:?}"),
                stage::Phase::Ready { next_seq, .. } => format!("Ready next_seq={next_seq}"),
                stage::Phase::Busy { seq, .. } => format!("Busy seq={seq}"),
                other => format!("{other:?}"),
            };
            format!("{s}: {phase}")
        })
        .collect();
    tidy(format!(
        "worker={:?} boot={boot} readiness={:?} stages=[{}]",
        m.phase(),
        m.readiness(),
        stages.join(", ")
    ))
}

fn effect(e: &Effect) -> String {
    match e {
        Effect::Stage { stage, effect } => format!("stage {stage}: {effect:?}"),
        other => tidy(format!("{other:?}")),
    }
}

fn transcript(policy: boot::WorkerStartPolicy, script: Vec<(u64, Input)>) -> String {
    let mut m = Machine::new(config(policy), Instant(0));
    let mut text = String::new();
    for (t, input) in script {
        let shown = match &input {
            Input::Provision { from, provision } => {
                format!("Provision stage={} from={from}", provision.stage)
            }
            other => tidy(format!("{other:?}")),
        };
        let effects = m.handle(Instant(t), input);
        m.check_invariants();
        writeln!(text, "t={t:<6} {shown}").unwrap();
        writeln!(text, "         {}", state(&m)).unwrap();
        for e in &effects {
            writeln!(text, "         => {}", effect(e)).unwrap();
        }
    }
    writeln!(text, "ignored: {:?}", m.ignored()).unwrap();
    text
}

fn started() -> Vec<(u64, Input)> {
    let mut s = vec![(0, Input::Start)];
    s.extend(boot_facts(10));
    s.push((
        20,
        Input::WorkerSpawned {
            op: OpId(1),
            result: Ok(()),
        },
    ));
    s.push((30, Input::WorkerReady { op: OpId(1) }));
    s
}

#[test]
fn boot_ready_report_provision_serve_and_stop() {
    let mut script = started();
    script.extend([
        (1_030, Input::Tick),
        (1_100, ack(2)),
        (1_200, ack(2)),
        (2_030, Input::Tick),
        (2_100, provision(1)),
        (2_110, fact(1, stage::Input::WorkerReady)),
        (2_120, fact(1, stage::Input::WeightsReady)),
        (2_130, fact(1, stage::Input::InboundReady)),
        (2_140, fact(1, stage::Input::OutboundReady)),
        (2_150, fact(1, stage::Input::StepArrived { seq: 0 })),
        (2_160, fact(1, stage::Input::StepCompleted { seq: 0 })),
        (2_200, stop(1)),
        (2_210, fact(1, stage::Input::LocalEdgesStopped)),
        (2_220, fact(1, stage::Input::RingsQuiesced)),
        (2_230, fact(1, stage::Input::DeviceObjectsReleased)),
        (2_240, fact(1, stage::Input::WorkerRoleReset)),
    ]);
    insta::assert_snapshot!(transcript(boot::WorkerStartPolicy::Required, script));
}

#[test]
fn worker_crash_faults_every_stage_and_is_never_restarted() {
    let mut script = started();
    script.extend([
        (100, ack(2)),
        (200, provision(1)),
        (210, fact(1, stage::Input::WeightsReady)),
        (
            300,
            Input::WorkerExited {
                op: OpId(1),
                reason: "killed by signal 9".into(),
            },
        ),
        (310, Input::WorkerReady { op: OpId(1) }),
        (320, provision(2)),
        (330, stop(1)),
        (340, fact(1, stage::Input::LocalEdgesStopped)),
        (350, fact(1, stage::Input::RingsQuiesced)),
        (360, fact(1, stage::Input::DeviceObjectsReleased)),
        (370, fact(1, stage::Input::WorkerRoleReset)),
    ]);
    insta::assert_snapshot!(transcript(boot::WorkerStartPolicy::Required, script));
}

#[test]
fn a_repairs_provision_after_a_crash_starts_a_new_worker() {
    let mut script = started();
    script.extend([
        (100, ack(2)),
        (200, provision(1)),
        (
            300,
            Input::WorkerExited {
                op: OpId(1),
                reason: "killed by signal 9".into(),
            },
        ),
        // Not stopped yet: no new worker.
        (310, provision(1)),
        (330, stop(1)),
        (340, fact(1, stage::Input::LocalEdgesStopped)),
        (350, fact(1, stage::Input::RingsQuiesced)),
        (360, fact(1, stage::Input::DeviceObjectsReleased)),
        (370, fact(1, stage::Input::WorkerRoleReset)),
        // The repair's rebuild: a new worker for the new controller life.
        (400, provision(1)),
        (
            410,
            Input::WorkerExited {
                op: OpId(1),
                reason: "a late word of the old worker".into(),
            },
        ),
        (
            420,
            Input::WorkerSpawned {
                op: OpId(3),
                result: Ok(()),
            },
        ),
        (430, fact(1, stage::Input::WorkerReady)),
        (440, Input::WorkerReady { op: OpId(3) }),
        (450, fact(1, stage::Input::WeightsReady)),
        (460, fact(1, stage::Input::InboundReady)),
        (470, fact(1, stage::Input::OutboundReady)),
        (480, fact(1, stage::Input::StepArrived { seq: 0 })),
        (485, fact(1, stage::Input::StepCompleted { seq: 0 })),
        // A later repair provisions the stage again on the new worker.
        (486, stop(1)),
        (487, fact(1, stage::Input::LocalEdgesStopped)),
        (487, fact(1, stage::Input::RingsQuiesced)),
        (487, fact(1, stage::Input::DeviceObjectsReleased)),
        (487, fact(1, stage::Input::WorkerRoleReset)),
        (488, provision(1)),
        (489, fact(1, stage::Input::StepArrived { seq: 0 })),
        // It crashes too: the stage faults again, nothing restarts it.
        (
            490,
            Input::WorkerExited {
                op: OpId(3),
                reason: "killed by signal 9".into(),
            },
        ),
        (500, provision(1)),
    ]);
    let mut m = Machine::new(config(boot::WorkerStartPolicy::Required), Instant(0));
    for (t, input) in script.clone() {
        m.handle(Instant(t), input);
    }
    assert_eq!(m.respawns(), 1, "one respawn, for the first repair");
    let text = transcript(boot::WorkerStartPolicy::Required, script);
    assert_eq!(text.matches("=> SpawnWorker").count(), 2, "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn worker_that_never_starts_faults_the_boot() {
    let failed = {
        let mut s = vec![(0, Input::Start)];
        s.extend(boot_facts(10));
        s.push((
            20,
            Input::WorkerSpawned {
                op: OpId(1),
                result: Err("no such binary: drover-worker".into()),
            },
        ));
        s.push((30, provision(1)));
        s
    };
    let silent = {
        let mut s = vec![(0, Input::Start)];
        s.extend(boot_facts(10));
        s.push((30_000, Input::Tick));
        s
    };
    let text = [failed, silent]
        .into_iter()
        .map(|s| transcript(boot::WorkerStartPolicy::Required, s))
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}

#[test]
fn deferred_worker_gates_provisioning_not_availability() {
    let mut script = vec![(0, Input::Start)];
    script.extend(boot_facts(10));
    script.extend([
        (
            20,
            Input::WorkerSpawned {
                op: OpId(1),
                result: Ok(()),
            },
        ),
        (30, provision(1)),
        (40, Input::WorkerReady { op: OpId(1) }),
        (50, provision(1)),
    ]);
    insta::assert_snapshot!(transcript(boot::WorkerStartPolicy::Deferred, script));
}

#[test]
fn mismatched_commands_and_answers_are_ignored_and_counted() {
    let mut script = vec![
        (0, Input::Start),
        (1, Input::Start),
        (2, provision(1)),
        (3, Input::Boot(boot::Input::WorkerReady)),
        (4, Input::WorkerReady { op: OpId(9) }),
        (5, fact(1, stage::Input::WeightsReady)),
    ];
    script.extend(boot_facts(10));
    script.extend([
        (20, Input::WorkerReady { op: OpId(1) }),
        (
            21,
            Input::WorkerSpawned {
                op: OpId(1),
                result: Ok(()),
            },
        ),
        // The report is resent, bounded: three reports in all.
        (1_020, Input::Tick),
        (2_020, Input::Tick),
        (3_020, Input::Tick),
        (
            3_100,
            Input::ReadyAck {
                from: AgentId::from("mallory"),
                run_id: RunId(7),
                readiness_id: 2,
            },
        ),
        (
            3_110,
            Input::ReadyAck {
                from: AgentId::from("orch"),
                run_id: RunId(8),
                readiness_id: 2,
            },
        ),
        (3_120, ack(5)),
        (3_200, provision(1)),
        (3_210, provision(2)),
        (3_220, provision(0)),
        (
            3_300,
            Input::StopStage {
                from: AgentId::from("mallory"),
                run_id: RunId(7),
                stage: 1,
            },
        ),
        (3_310, stop(2)),
        // No controller for stage 0 was ever made: it is stopped already.
        (3_320, stop(0)),
    ]);
    insta::assert_snapshot!(transcript(boot::WorkerStartPolicy::Required, script));
}
