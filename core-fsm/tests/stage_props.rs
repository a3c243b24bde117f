//! StageController properties over random input sequences: determinism,
//! readiness only after all four facts, steps in sequence one at a time,
//! silence after a fault, and a stop that always ends.

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LogicalNodeId, RunId};
use core_fsm::stage::{
    Config, Edge, EdgeKind, Effect, Input, LayerRange, Machine, Provision, Report,
};
use core_fsm::time::{Duration, Instant};
use proptest::prelude::*;

fn config() -> Config {
    Config {
        run_id: RunId(7),
        node: LogicalNodeId::from("workers-0"),
        orchestrator: AgentId::from("orch"),
        stop_step_timeout: Duration::from_millis(500),
        ring: 0,
    }
}

fn provision(from: &str, node: &str) -> Input {
    Input::Provision {
        from: AgentId::from(from),
        provision: Provision {
            run_id: RunId(7),
            orchestrator: AgentId::from(from),
            node: LogicalNodeId::from(node),
            stage: 0,
            stage_count: 1,
            layers: LayerRange {
                start: 0,
                end_exclusive: 4,
            },
            inbound: Edge {
                id: 0,
                kind: EdgeKind::TokenIn,
            },
            outbound: Edge {
                id: 1,
                kind: EdgeKind::TokenOut,
            },
            model_id: "m".into(),
        },
    }
}

/// Inputs weighted so that most sequences get ready and execute steps.
fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        6 => Just(provision("orch", "workers-0")),
        1 => Just(provision("mallory", "workers-0")),
        1 => Just(provision("orch", "workers-9")),
        4 => Just(Input::WorkerReady),
        4 => Just(Input::WeightsReady),
        4 => Just(Input::InboundReady),
        4 => Just(Input::OutboundReady),
        1 => Just(Input::LoadFailed { reason: "x".into() }),
        10 => (0u64..4).prop_map(|seq| Input::StepArrived { seq }),
        10 => (0u64..4).prop_map(|seq| Input::StepCompleted { seq }),
        1 => (0u64..4).prop_map(|seq| Input::StepFailed { seq, reason: "x".into() }),
        1 => Just(Input::WorkerCrashed { reason: "x".into() }),
        1 => Just(Input::EdgeFault { reason: "x".into() }),
        2 => (7u64..9).prop_map(|r| Input::Stop { run_id: RunId(r) }),
        2 => Just(Input::LocalEdgesStopped),
        2 => Just(Input::RingsQuiesced),
        2 => Just(Input::DeviceObjectsReleased),
        2 => Just(Input::WorkerRoleReset),
        3 => Just(Input::Tick),
    ]
}

/// A healthy life (provision, the four facts in random order, `steps`
/// steps) with random inputs inserted at random places, so that sequences
/// reach readiness and steps as well as every fault.
fn sequence() -> impl Strategy<Value = Vec<Input>> {
    let facts = Just(vec![
        Input::WorkerReady,
        Input::WeightsReady,
        Input::InboundReady,
        Input::OutboundReady,
    ])
    .prop_shuffle();
    let noise = prop::collection::vec((any::<prop::sample::Index>(), input()), 0..6);
    (facts, 0u64..6, noise).prop_map(|(facts, steps, noise)| {
        let mut inputs = vec![provision("orch", "workers-0")];
        inputs.extend(facts);
        for seq in 0..steps {
            inputs.push(Input::StepArrived { seq });
            inputs.push(Input::StepCompleted { seq });
        }
        for (at, input) in noise {
            let at = at.index(inputs.len() + 1);
            inputs.insert(at, input);
        }
        inputs
    })
}

/// Runs `inputs` 100 ms apart; returns each step's input and effects.
fn run(inputs: &[Input]) -> (Machine, Vec<(Input, Vec<Effect>)>) {
    let mut m = Machine::new(config());
    let mut log = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let effects = m.handle(Instant(100 * i as u64), input.clone());
        m.check_invariants();
        log.push((input.clone(), effects));
    }
    (m, log)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn same_inputs_same_transcript(inputs in prop_oneof![sequence(), prop::collection::vec(input(), 0..80)]) {
        let (_, a) = run(&inputs);
        let (_, b) = run(&inputs);
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn ready_only_after_four_facts_and_steps_in_sequence(inputs in prop_oneof![sequence(), prop::collection::vec(input(), 0..80)]) {
        let (_, log) = run(&inputs);
        let mut facts = [false; 4];
        let mut accepted = false;
        let mut ready = false;
        let mut faulted = false;
        let mut executing: Option<u64> = None;
        let mut next_step = 0;
        for (input, effects) in &log {
            // Facts only count once a provision has been accepted.
            if accepted {
                match input {
                    Input::WorkerReady => facts[0] = true,
                    Input::WeightsReady => facts[1] = true,
                    Input::InboundReady => facts[2] = true,
                    Input::OutboundReady => facts[3] = true,
                    Input::StepCompleted { seq } if executing == Some(*seq) => executing = None,
                    _ => {}
                }
            }
            for effect in effects {
                prop_assert!(!faulted || matches!(effect, Effect::Report(Report::StageStopped { .. })) || is_stop_step(effect),
                    "{effect:?} after a fault");
                match effect {
                    Effect::LoadWeights { .. } => accepted = true,
                    Effect::Report(Report::StageReady { .. }) => {
                        prop_assert!(facts.iter().all(|f| *f), "ready with facts {facts:?}");
                        prop_assert!(!ready, "ready twice");
                        ready = true;
                    }
                    Effect::ExecuteStep { seq } => {
                        prop_assert!(ready, "step before ready");
                        prop_assert_eq!(executing, None, "two steps at once");
                        prop_assert_eq!(*seq, next_step, "steps out of sequence");
                        executing = Some(*seq);
                        next_step += 1;
                    }
                    Effect::Report(Report::StageFault { .. }) => {
                        prop_assert!(!faulted, "faulted twice");
                        faulted = true;
                    }
                    _ => {}
                }
            }
        }
    }

    /// A stop ends in `StageStopped` whether every answer arrives or none.
    #[test]
    fn stop_always_ends(inputs in prop_oneof![sequence(), prop::collection::vec(input(), 0..60)], answers in any::<bool>()) {
        let (mut m, log) = run(&inputs);
        let mut t = 100 * log.len() as u64;
        let mut effects = m.handle(Instant(t), Input::Stop { run_id: RunId(7) });
        let finish: Vec<Input> = if answers {
            vec![Input::LocalEdgesStopped, Input::RingsQuiesced, Input::DeviceObjectsReleased, Input::WorkerRoleReset]
        } else {
            vec![Input::Tick; 4]
        };
        for input in finish {
            t += 500;
            effects.extend(m.handle(Instant(t), input));
            m.check_invariants();
        }
        prop_assert!(m.is_stopped());
        prop_assert_eq!(m.next_deadline(), None);
        let already = log.iter().flat_map(|(_, e)| e).any(is_stopped_report);
        let now = effects.iter().filter(|e| is_stopped_report(e)).count();
        prop_assert_eq!(now, usize::from(!already), "exactly one StageStopped");
    }
}

fn is_stop_step(effect: &Effect) -> bool {
    matches!(
        effect,
        Effect::StopLocalEdges
            | Effect::QuiesceRings
            | Effect::ReleaseDeviceObjects
            | Effect::ResetWorkerRole
    )
}

fn is_stopped_report(effect: &Effect) -> bool {
    matches!(effect, Effect::Report(Report::StageStopped { .. }))
}

/// The sequences above are worth something only if they reach readiness and
/// execute steps; this counts how often they do over a fixed, seeded sample.
#[test]
fn sequences_reach_ready_steps_and_faults() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = sequence();
    let (mut ready, mut steps, mut faults) = (0, 0, 0);
    for _ in 0..200 {
        let inputs = strategy.new_tree(&mut runner).expect("inputs").current();
        let (_, log) = run(&inputs);
        let effects: Vec<&Effect> = log.iter().flat_map(|(_, e)| e).collect();
        let has = |f: fn(&Effect) -> bool| usize::from(effects.iter().any(|e| f(e)));
        ready += has(|e| matches!(e, Effect::Report(Report::StageReady { .. })));
        steps += has(|e| matches!(e, Effect::ExecuteStep { seq: 1.. }));
        faults += has(|e| matches!(e, Effect::Report(Report::StageFault { .. })));
    }
    let counts = format!("ready={ready} steps={steps} faults={faults}");
    assert!(ready >= 40 && steps >= 10 && faults >= 40, "{counts}");
}
