//! The stage controller's inbound ring: steps that arrive while one
//! executes wait in sequence, up to the ring's size, and each goes as soon
//! as the one before it completes; one more is an overrun, one out of
//! sequence a sequence violation.

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
use core_fsm::stage::{
    Config, Edge, EdgeKind, Effect, Fault, Input, LayerRange, Machine, Phase, Provision,
};
use core_fsm::time::{Duration, Instant};

fn ready(ring: u64) -> Machine {
    let mut m = Machine::new(Config {
        run_id: RunId(7),
        node: LogicalNodeId::from("workers-0"),
        orchestrator: AgentId::from("orch"),
        stop_step_timeout: Duration::from_millis(500),
        ring,
    });
    let provision = Provision {
        run_id: RunId(7),
        orchestrator: AgentId::from("orch"),
        node: LogicalNodeId::from("workers-0"),
        stage: 0,
        stage_count: 2,
        layers: LayerRange {
            start: 0,
            end_exclusive: 2,
        },
        inbound: Edge {
            id: 0,
            kind: EdgeKind::TokenIn,
        },
        outbound: Edge {
            id: 1,
            kind: EdgeKind::Activation,
        },
        model_id: "m".into(),
    };
    let from = AgentId::from("orch");
    let inputs = [
        Input::Provision { from, provision },
        Input::WorkerReady,
        Input::WeightsReady,
        Input::InboundReady,
        Input::OutboundReady,
    ];
    for input in inputs {
        m.handle(Instant(0), input);
        m.check_invariants();
    }
    assert!(matches!(m.phase(), Phase::Ready { next_seq: 0, .. }));
    m
}

fn step(m: &mut Machine, input: Input) -> Vec<Effect> {
    let out = m.handle(Instant(1), input);
    m.check_invariants();
    out
}

fn executes(effects: &[Effect]) -> Vec<u64> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ExecuteStep { seq } => Some(*seq),
            _ => None,
        })
        .collect()
}

#[test]
fn waiting_steps_go_in_order_as_each_completes() {
    let mut m = ready(3);
    assert_eq!(executes(&step(&mut m, Input::StepArrived { seq: 0 })), [0]);
    for seq in 1..=3 {
        assert!(executes(&step(&mut m, Input::StepArrived { seq })).is_empty());
    }
    assert!(matches!(
        m.phase(),
        Phase::Busy {
            seq: 0,
            queued: 3,
            ..
        }
    ));
    for seq in 0..3 {
        let next = executes(&step(&mut m, Input::StepCompleted { seq }));
        assert_eq!(next, [seq + 1]);
    }
    assert!(executes(&step(&mut m, Input::StepCompleted { seq: 3 })).is_empty());
    assert!(matches!(m.phase(), Phase::Ready { next_seq: 4, .. }));
    assert_eq!(m.steps_completed(), 4);
}

#[test]
fn one_more_than_the_ring_is_an_overrun_and_a_gap_a_violation() {
    let mut m = ready(1);
    step(&mut m, Input::StepArrived { seq: 0 });
    step(&mut m, Input::StepArrived { seq: 1 });
    step(&mut m, Input::StepArrived { seq: 2 });
    assert!(
        matches!(
            m.phase(),
            Phase::Faulted {
                fault: Fault::Overrun { busy: 0, got: 2 },
                ..
            }
        ),
        "{:?}",
        m.phase()
    );
    let mut m = ready(4);
    step(&mut m, Input::StepArrived { seq: 0 });
    step(&mut m, Input::StepArrived { seq: 2 });
    assert!(
        matches!(
            m.phase(),
            Phase::Faulted {
                fault: Fault::SequenceViolation {
                    expected: 1,
                    got: 2
                },
                ..
            }
        ),
        "{:?}",
        m.phase()
    );
    // No ring: an arrival while busy is an overrun, as before.
    let mut m = ready(0);
    step(&mut m, Input::StepArrived { seq: 0 });
    step(&mut m, Input::StepArrived { seq: 1 });
    assert!(matches!(
        m.phase(),
        Phase::Faulted {
            fault: Fault::Overrun { .. },
            ..
        }
    ));
}
