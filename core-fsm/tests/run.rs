//! OrchestratorRun transcripts: every logical state of SPEC.md "The run, OrchestratorRun" and
//! every startup and serving failure of §10.7-10.10, one script each.

mod run_support;

use core_fsm::ids::{AgentId, LogicalNodeId, OpId, RunId};
use core_fsm::membership::Liveness;
use core_fsm::run::{Input, PlanningError, RequestId, TokenEndpoint, plan_stages};
use core_fsm::stage::Report;
use run_support::*;

#[test]
fn happy_path_from_barrier_to_stopped() {
    let mut script = to_serving(0);
    script.extend([
        (100, submit(1, 3)),
        (110, token(1, 0, false)),
        (120, token(1, 1, false)),
        (130, token(1, 2, false)),
        (200, submit(2, 8)),
        (201, submit(3, 8)),
        (210, token(2, 0, false)),
        (220, token(2, 1, true)),
        (230, token(3, 0, true)),
        (300, Input::Shutdown),
        (310, stopped(2)),
        (311, stopped(0)),
        (312, closed()),
        (313, stopped(1)),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn barrier_needs_report_alive_member_and_matching_agent() {
    let script = vec![
        // A report before membership knows the node is kept, not yet counted.
        (0, ready(0)),
        (1, alive(0)),
        // Mismatched reports: another run, a node outside the plan, a stage
        // that is not the node's, an agent that is not the node's.
        (
            2,
            Input::RuntimeReady {
                run_id: RunId(8),
                node: node(1),
                stage: 1,
                agent: agent(1),
                readiness_id: 1,
            },
        ),
        (
            3,
            Input::RuntimeReady {
                run_id: RUN,
                node: LogicalNodeId::from("strangers-0"),
                stage: 1,
                agent: agent(1),
                readiness_id: 1,
            },
        ),
        (
            4,
            Input::RuntimeReady {
                run_id: RUN,
                node: node(1),
                stage: 2,
                agent: agent(1),
                readiness_id: 1,
            },
        ),
        (5, alive(1)),
        (
            6,
            Input::RuntimeReady {
                run_id: RUN,
                node: node(1),
                stage: 1,
                agent: AgentId::from("impostor"),
                readiness_id: 1,
            },
        ),
        (7, ready(1)),
        (8, ready(1)),
        // A suspect member does not pass, even with its report in.
        (9, ready(2)),
        (10, liveness(2, Liveness::Suspect)),
        (11, alive(2)),
    ];
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn readiness_timeout_fails_before_anything_is_provisioned() {
    let script = vec![
        (0, alive(0)),
        (0, ready(0)),
        (0, alive(1)),
        (0, ready(1)),
        (0, alive(2)),
        (59_999, core_fsm::run::Input::Tick),
        (60_000, core_fsm::run::Input::Tick),
        (60_001, ready(2)),
    ];
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn acknowledgements_are_retried_then_time_out() {
    let mut script: Vec<_> = (0..3)
        .flat_map(|i| [(0, alive(i)), (0, ready(i))])
        .collect();
    script.extend([
        (10, acked(1)),
        (11, acked_report(0, 99)),
        (1_000, Input::Tick),
        (1_500, acked(1)),
        (2_000, Input::Tick),
        (3_000, Input::Tick),
        (5_000, Input::Tick),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn weights_load_one_stage_at_a_time_and_a_fault_fails_startup() {
    let mut script: Vec<_> = (0..3)
        .flat_map(|i| [(0, alive(i)), (0, ready(i))])
        .collect();
    script.extend((0..3).map(|i| (10, acked(i))));
    script.extend([
        // Out of order: stage 2's weights before stage 1 was even provisioned.
        (20, weights(2)),
        (21, weights(0)),
        (22, weights(0)),
        (23, endpoint(TokenEndpoint::In)),
        (24, stage_fault(1, "exit status 1")),
        (25, weights(1)),
        (30, stopped(0)),
        (31, closed()),
        (32, stopped(1)),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn weight_load_timeout_and_dead_node_while_loading() {
    let prefix = || {
        let mut s: Vec<_> = (0..3)
            .flat_map(|i| [(0, alive(i)), (0, ready(i))])
            .collect();
        s.extend((0..3).map(|i| (10, acked(i))));
        s
    };
    let mut timeout = prefix();
    timeout.extend([
        (20, weights(0)),
        (30_020, Input::Tick),
        (30_030, stopped(0)),
        (30_031, stopped(1)),
        (30_032, closed()),
    ]);
    let mut dead = prefix();
    dead.extend([
        (20, weights(0)),
        (25, liveness(1, Liveness::Dead)),
        (30, stopped(0)),
        (31, closed()),
    ]);
    let text = [timeout, dead]
        .into_iter()
        .map(transcript)
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}

#[test]
fn stage_readiness_timeout_and_prompt_bind_failure() {
    let mut waiting: Vec<_> = to_serving(0)
        .into_iter()
        .filter(|(_, i)| {
            !matches!(
                i,
                Input::Stage(Report::StageReady { stage: 1, .. })
                    | Input::TokenEndpointReady {
                        endpoint: TokenEndpoint::Out,
                        ..
                    }
                    | Input::PromptServiceOpened { .. }
            )
        })
        .collect();
    waiting.push((10_022, Input::Tick));
    let mut bind: Vec<_> = to_serving(0)
        .into_iter()
        .filter(|(_, i)| !matches!(i, Input::PromptServiceOpened { .. }))
        .collect();
    bind.extend([
        (
            40,
            Input::PromptServiceOpened {
                op: OpId(9),
                result: Ok(()),
            },
        ),
        (
            41,
            Input::PromptServiceOpened {
                op: OpId(1),
                result: Err("address in use".into()),
            },
        ),
    ]);
    let text = [waiting, bind]
        .into_iter()
        .map(transcript)
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}

#[test]
fn shutdown_during_startup_is_a_startup_error() {
    let mut script: Vec<_> = (0..3)
        .flat_map(|i| [(0, alive(i)), (0, ready(i))])
        .collect();
    script.extend((0..3).map(|i| (10, acked(i))));
    script.extend([
        (15, submit(1, 4)),
        (20, Input::Shutdown),
        (21, Input::Shutdown),
        (22, stopped(0)),
        (23, closed()),
    ]);
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn send_failure_and_endpoint_fault_fail_the_run() {
    let send: Vec<_> = vec![
        (0, alive(0)),
        (
            1,
            Input::SendFailed {
                node: node(0),
                reason: "no route".into(),
            },
        ),
    ];
    let endpoint_fault = {
        let mut s = to_serving(0);
        s.extend([
            (100, submit(1, 4)),
            (
                101,
                Input::EndpointFault {
                    run_id: RUN,
                    reason: "token-out reset".into(),
                },
            ),
            (200, stopped(0)),
            (200, stopped(1)),
            (200, stopped(2)),
            (200, closed()),
        ]);
        s
    };
    let text = [send, endpoint_fault]
        .into_iter()
        .map(transcript)
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}

#[test]
fn serving_queue_limits_and_request_level_faults() {
    let script = vec![
        (100, submit(1, 4)),
        (101, submit(2, 4)),
        (102, submit(3, 4)),
        // The queue holds two: the fourth is refused.
        (103, submit(4, 4)),
        // Ids only increase: a replay of an old id is ignored.
        (104, submit(2, 4)),
        (105, submit(5, 0)),
        // Records of other requests or runs never touch the active one.
        (110, token(2, 0, false)),
        (
            111,
            Input::Token {
                run_id: RunId(8),
                request: RequestId(1),
                seq: 0,
                token: 1,
                eos: false,
            },
        ),
        (112, token(1, 0, false)),
        // A prompt fault of a request that is not the active one is
        // counted and dropped.
        (
            115,
            Input::PromptFault {
                run_id: RUN,
                request: RequestId(2),
                reason: "not the active request".into(),
            },
        ),
        (
            120,
            Input::PromptFault {
                run_id: RUN,
                request: RequestId(1),
                reason: "tokenizer failed".into(),
            },
        ),
        (121, token(1, 1, false)),
        // Request 2 is silent for token_timeout.
        (2_120, Input::Tick),
        (2_130, token(3, 0, true)),
    ];
    insta::assert_snapshot!(serving_transcript(script));
}

#[test]
fn token_out_of_sequence_faults_the_request_and_fails_the_run() {
    let script = vec![
        (100, submit(1, 8)),
        (101, submit(2, 8)),
        (110, token(1, 0, false)),
        (120, token(1, 2, false)),
        (121, token(1, 1, false)),
        (130, submit(3, 8)),
        (140, stopped(0)),
        (141, stopped(1)),
        (142, stopped(2)),
        (143, closed()),
    ];
    insta::assert_snapshot!(serving_transcript(script));
}

#[test]
fn dead_node_or_stage_fault_while_serving_fails_the_run() {
    let dead = vec![
        (100, submit(1, 8)),
        (101, submit(2, 8)),
        (110, liveness(1, Liveness::Suspect)),
        (120, liveness(1, Liveness::Dead)),
        (130, stopped(0)),
        (131, stopped(2)),
        (132, closed()),
    ];
    let replaced = vec![(
        100,
        Input::Liveness {
            node: node(2),
            agent: AgentId::from("agent-2-rejoined"),
            liveness: Liveness::Alive,
        },
    )];
    let fault = vec![
        (100, submit(1, 8)),
        (110, stage_fault(2, "cuda error")),
        (120, stage_fault(1, "second fault")),
        (130, stopped(0)),
        (131, stopped(1)),
        (132, stopped(2)),
        (133, closed()),
        (134, token(1, 0, false)),
    ];
    let text = [dead, replaced, fault]
        .into_iter()
        .map(serving_transcript)
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}

#[test]
fn teardown_ends_even_when_stop_facts_never_arrive() {
    let controlled = vec![
        (100, Input::Shutdown),
        (110, stopped(1)),
        (10_099, Input::Tick),
        (10_100, Input::Tick),
        (10_200, stopped(0)),
    ];
    let failed = vec![(100, stage_fault(0, "crash")), (10_100, Input::Tick)];
    let text = [controlled, failed]
        .into_iter()
        .map(serving_transcript)
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!(text);
}

#[test]
fn planning_balances_layers_and_rejects_impossible_pipelines() {
    let nodes = |n: u32| (0..n).map(node).collect::<Vec<_>>();
    let mut text = String::new();
    for (layers, stages) in [(10, 3), (8, 4), (5, 1), (3, 3), (32, 5)] {
        text.push_str(&format!("layers={layers} stages={stages}\n"));
        for a in plan_stages(layers, stages, &nodes(stages)).expect("plannable") {
            text.push_str(&format!(
                "  stage {} on {}: layers {} in {:?} out {:?}\n",
                a.stage, a.node, a.layers, a.inbound, a.outbound
            ));
        }
    }
    let errors = [
        plan_stages(10, 0, &[]),
        plan_stages(2, 3, &nodes(3)),
        plan_stages(10, 3, &nodes(2)),
        plan_stages(10, 2, &[node(0), node(0)]),
    ];
    for e in errors {
        let e: PlanningError = e.expect_err("unplannable");
        text.push_str(&format!("error: {e} ({e:?})\n"));
    }
    insta::assert_snapshot!(text);
}

/// Whether `effects` end `request` with a token timeout.
fn timed_out(effects: &[core_fsm::run::Effect], request: u64) -> bool {
    use core_fsm::run::{Effect, PromptEvent, PromptFault};
    effects.iter().any(|e| {
        matches!(e, Effect::Prompt { request: r, event: PromptEvent::Fault(PromptFault::Timeout) }
            if *r == RequestId(request))
    })
}

#[test]
fn a_prefill_gets_time_in_proportion_to_its_tokens_and_later_tokens_do_not() {
    use core_fsm::Machine as _;
    use core_fsm::run::Machine;
    use core_fsm::time::{Duration, Instant};
    let mut config = config();
    config.prefill_per_token = Duration::from_millis(100);
    let mut m = Machine::new(config, Instant(0)).expect("plannable");
    drive(&mut m, to_serving(0));
    // A prompt of 3 tokens: its first token is due 2 s + 3 x 100 ms on.
    assert!(!timed_out(&m.handle(Instant(100), submit(1, 8)), 1));
    assert!(!timed_out(&m.handle(Instant(101), submit(2, 8)), 1));
    assert!(!timed_out(&m.handle(Instant(2_399), Input::Tick), 1));
    assert!(timed_out(&m.handle(Instant(2_400), Input::Tick), 1));
    m.check_invariants();
    // Request 2 starts at once; after its first token, the plain gap.
    assert!(!timed_out(&m.handle(Instant(2_500), token(2, 0, false)), 2));
    assert!(!timed_out(&m.handle(Instant(4_499), Input::Tick), 2));
    assert!(timed_out(&m.handle(Instant(4_500), Input::Tick), 2));
    m.check_invariants();
}
