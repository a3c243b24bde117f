//! StageController transcripts: every logical state of SPEC.md "The stage controller" and
//! every sticky fault, one script each.

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
use core_fsm::stage::{
    Config, Edge, EdgeKind, Effect, Input, LayerRange, Machine, Phase, Provision, Report,
};
use core_fsm::time::{Duration, Instant};
use std::fmt::Write as _;

fn config() -> Config {
    Config {
        run_id: RunId(7),
        node: LogicalNodeId::from("workers-1"),
        orchestrator: AgentId::from("orch"),
        stop_step_timeout: Duration::from_millis(500),
        ring: 0,
    }
}

fn provision() -> Provision {
    Provision {
        run_id: RunId(7),
        orchestrator: AgentId::from("orch"),
        node: LogicalNodeId::from("workers-1"),
        stage: 1,
        stage_count: 3,
        layers: LayerRange {
            start: 4,
            end_exclusive: 8,
        },
        inbound: Edge {
            id: 1,
            kind: EdgeKind::Activation,
        },
        outbound: Edge {
            id: 2,
            kind: EdgeKind::Activation,
        },
        model_id: "tiny-llama".into(),
    }
}

fn provide() -> Input {
    Input::Provision {
        from: AgentId::from("orch"),
        provision: provision(),
    }
}

fn phase(p: &Phase) -> String {
    match p {
        Phase::Unprovisioned => "Unprovisioned".into(),
        Phase::AwaitingReady { facts, .. } => format!("AwaitingReady {facts:?}"),
        Phase::Ready { next_seq, .. } => format!("Ready next_seq={next_seq}"),
        Phase::Busy { seq, .. } => format!("Busy seq={seq}"),
        Phase::Faulted { fault, .. } => format!("Faulted {fault:?}"),
        Phase::Stopping { step, clean, .. } => format!("Stopping {step:?} clean={clean}"),
        Phase::Stopped => "Stopped".into(),
    }
}

fn effect(e: &Effect) -> String {
    match e {
        Effect::Report(Report::StageFault { stage, fault, .. }) => {
            format!("report StageFault stage={stage:?} {fault:?}")
        }
        Effect::Report(Report::StageStopped { stage, clean, .. }) => {
            format!("report StageStopped stage={stage:?} clean={clean}")
        }
        Effect::Report(Report::StageReady { stage, .. }) => format!("report StageReady {stage}"),
        Effect::Report(Report::WeightsReady { stage, .. }) => {
            format!("report WeightsReady {stage}")
        }
        other => format!("{other:?}"),
    }
}

/// Drives a fresh controller through `script` and returns its transcript.
fn transcript(script: Vec<(u64, Input)>) -> String {
    let mut m = Machine::new(config());
    let mut text = String::new();
    for (t, input) in script {
        let shown = match &input {
            Input::Provision { from, provision } => format!(
                "Provision from={from} node={} run={}",
                provision.node, provision.run_id
            ),
            other => format!("{other:?}"),
        };
        let effects = m.handle(Instant(t), input);
        m.check_invariants();
        writeln!(text, "t={t:<5} {shown}").unwrap();
        writeln!(text, "        phase: {}", phase(m.phase())).unwrap();
        for e in &effects {
            writeln!(text, "        => {}", effect(e)).unwrap();
        }
    }
    writeln!(text, "ignored: {:?}", m.ignored()).unwrap();
    text
}

fn ready_script() -> Vec<(u64, Input)> {
    vec![
        (0, provide()),
        (10, Input::OutboundReady),
        (20, Input::WeightsReady),
        (30, Input::InboundReady),
        (40, Input::WorkerReady),
    ]
}

#[test]
fn happy_path_ready_steps_and_ordered_stop() {
    let mut script = ready_script();
    script.extend([
        (50, Input::StepArrived { seq: 0 }),
        (60, Input::StepCompleted { seq: 0 }),
        (70, Input::StepArrived { seq: 1 }),
        (80, Input::StepCompleted { seq: 1 }),
        // Another run's stop is not this stage's: counted, ignored.
        (85, Input::Stop { run_id: RunId(8) }),
        (90, Input::Stop { run_id: RunId(7) }),
        (100, Input::LocalEdgesStopped),
        (110, Input::RingsQuiesced),
        (120, Input::DeviceObjectsReleased),
        (130, Input::WorkerRoleReset),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn readiness_facts_duplicates_and_early_steps_are_ignored() {
    let script = vec![
        (0, Input::StepArrived { seq: 0 }),
        (5, provide()),
        (10, Input::WeightsReady),
        (11, Input::WeightsReady),
        (12, Input::StepArrived { seq: 0 }),
        (13, Input::StepCompleted { seq: 0 }),
        (20, Input::WorkerReady),
        (30, Input::InboundReady),
        (40, provide()),
        (50, Input::OutboundReady),
        (60, Input::LocalEdgesStopped),
    ];
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn unauthorised_orchestrator_faults_for_good() {
    let script = vec![
        (
            0,
            Input::Provision {
                from: AgentId::from("mallory"),
                provision: provision(),
            },
        ),
        (10, provide()),
        (20, Input::WorkerReady),
        (30, Input::Stop { run_id: RunId(7) }),
    ];
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn provision_for_another_node_faults() {
    let mut other = provision();
    other.node = LogicalNodeId::from("workers-2");
    let script = vec![
        (
            0,
            Input::Provision {
                from: AgentId::from("orch"),
                provision: other.clone(),
            },
        ),
        (10, Input::Stop { run_id: RunId(7) }),
    ];
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn unauthorised_reprovision_of_a_ready_stage_faults() {
    let mut script = ready_script();
    let mut forged = provision();
    forged.orchestrator = AgentId::from("mallory");
    script.push((
        50,
        Input::Provision {
            from: AgentId::from("mallory"),
            provision: forged,
        },
    ));
    script.push((60, Input::StepArrived { seq: 0 }));
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn wrong_sequence_is_a_sticky_violation() {
    let mut script = ready_script();
    script.extend([
        (50, Input::StepArrived { seq: 0 }),
        (60, Input::StepCompleted { seq: 0 }),
        (70, Input::StepArrived { seq: 2 }),
        (80, Input::StepArrived { seq: 1 }),
        (
            90,
            Input::WorkerCrashed {
                reason: "late".into(),
            },
        ),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn second_object_while_busy_is_an_overrun() {
    let mut script = ready_script();
    script.extend([
        (50, Input::StepArrived { seq: 0 }),
        (55, Input::StepCompleted { seq: 9 }),
        (60, Input::StepArrived { seq: 1 }),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn worker_crash_step_failure_edge_fault_and_load_failure() {
    let crash = {
        let mut s = ready_script();
        s.push((
            50,
            Input::WorkerCrashed {
                reason: "exit status 137".into(),
            },
        ));
        s
    };
    let step = {
        let mut s = ready_script();
        s.push((50, Input::StepArrived { seq: 0 }));
        s.push((
            60,
            Input::StepFailed {
                seq: 0,
                reason: "cuda oom".into(),
            },
        ));
        s.push((70, Input::StepCompleted { seq: 0 }));
        s
    };
    let edge = vec![
        (0, provide()),
        (
            10,
            Input::EdgeFault {
                reason: "inbound reset".into(),
            },
        ),
        (20, Input::InboundReady),
    ];
    let load = vec![
        (0, provide()),
        (
            10,
            Input::LoadFailed {
                reason: "checksum mismatch".into(),
            },
        ),
    ];
    let text = [crash, step, edge, load]
        .into_iter()
        .map(transcript)
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}

#[test]
fn stop_times_out_step_by_step_and_still_stops() {
    let mut script = ready_script();
    script.extend([
        (50, Input::Stop { run_id: RunId(8) }),
        (60, Input::Stop { run_id: RunId(7) }),
        (70, Input::RingsQuiesced),
        (560, Input::Tick),
        (600, Input::RingsQuiesced),
        (1100, Input::Tick),
        (1600, Input::Tick),
        (1700, Input::WorkerRoleReset),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn stop_before_provision_and_while_busy() {
    let before = vec![(0, Input::Stop { run_id: RunId(7) }), (10, provide())];
    let busy = {
        let mut s = ready_script();
        s.extend([
            (50, Input::StepArrived { seq: 0 }),
            (60, Input::Stop { run_id: RunId(7) }),
            (70, Input::StepCompleted { seq: 0 }),
            (80, Input::LocalEdgesStopped),
            (90, Input::RingsQuiesced),
            (100, Input::DeviceObjectsReleased),
            (110, Input::WorkerRoleReset),
        ]);
        s
    };
    let text = [before, busy]
        .into_iter()
        .map(transcript)
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}
