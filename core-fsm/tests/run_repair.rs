//! The run's repair (SPEC.md "The run, OrchestratorRun" "Repair"): a stage
//! lost while serving rebuilds the pipeline on the nodes' current agents
//! and resumes the active request from its next token; past the bound, or
//! out of time, the run fails as before.

mod run_support;

use core_fsm::Machine as _;
use core_fsm::ids::AgentId;
use core_fsm::membership::Liveness;
use core_fsm::run::{Effect, Input, Machine, Phase, PromptEvent, RequestId, TokenEndpoint};
use core_fsm::time::{Duration, Instant};
use run_support::*;

fn repairing_config(repairs_max: u32) -> core_fsm::run::Config {
    let mut c = config();
    c.repairs_max = repairs_max;
    c.repair_timeout = Duration::from_secs(30);
    c
}

fn serving(repairs_max: u32) -> Machine {
    let mut m = Machine::new(repairing_config(repairs_max), Instant(0)).expect("plannable");
    drive(&mut m, to_serving(0));
    assert!(matches!(m.phase(), Phase::Serving(_)));
    m
}

/// Node 1's replacement: a new agent, Alive, then its report.
fn replacement(t: u64) -> Vec<(u64, Input)> {
    let agent = AgentId::from("agent-1-new");
    vec![
        (
            t,
            Input::RuntimeReady {
                run_id: RUN,
                node: node(1),
                stage: 1,
                agent: agent.clone(),
                readiness_id: 900,
            },
        ),
        (
            t + 1,
            Input::Liveness {
                node: node(1),
                agent,
                liveness: Liveness::Alive,
            },
        ),
    ]
}

fn acked_by(i: u32, agent: &str, readiness_id: u64) -> Input {
    Input::ReadyAcked {
        run_id: RUN,
        node: node(i),
        stage: i,
        agent: AgentId::from(agent),
        readiness_id,
    }
}

/// The rebuilt pipeline's startup: acknowledgements, weights, readiness.
fn rebuild(t: u64) -> Vec<(u64, Input)> {
    vec![
        (t, acked(0)),
        (t, acked_by(1, "agent-1-new", 900)),
        (t, acked(2)),
        (t + 1, weights(0)),
        (t + 2, weights(1)),
        (t + 3, weights(2)),
        (t + 4, endpoint(TokenEndpoint::In)),
        (t + 4, endpoint(TokenEndpoint::Out)),
        (t + 5, stage_ready(0)),
        (t + 5, stage_ready(1)),
        (t + 5, stage_ready(2)),
    ]
}

#[test]
fn a_stage_lost_mid_request_is_rebuilt_and_the_request_resumes_at_its_next_token() {
    let mut m = serving(2);
    let mut script = vec![
        (100, submit(1, 5)),
        (101, token(1, 0, false)),
        (102, token(1, 1, false)),
        // Node 1 dies: its neighbours' edges fault first, then membership.
        (103, stage_fault(2, "edge 2 closed")),
        (104, submit(2, 2)),
        (105, stopped(0)),
        (106, stopped(2)),
        (107, closed()),
        (108, liveness(1, Liveness::Dead)),
        // A tick while repairing, before any deadline, changes nothing.
        (150, Input::Tick),
    ];
    script.extend(replacement(200));
    script.extend(rebuild(210));
    script.extend([
        (300, token(1, 2, false)),
        (301, token(1, 3, false)),
        (302, token(1, 4, false)),
        (310, token(2, 0, false)),
        (311, token(2, 1, false)),
    ]);
    let text = drive(&mut m, script);
    assert!(matches!(m.phase(), Phase::Serving(s) if s.active.is_none()));
    assert_eq!(m.repairs(), 1);
    assert_eq!(m.ignored().unexpected, 0, "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn the_stream_has_every_token_once_across_repairs() {
    // Two repairs in one request; each client sees seq 0..n exactly once.
    let mut m = serving(2);
    let mut effects = Vec::new();
    let mut step = |m: &mut Machine, t: u64, input: Input| {
        effects.extend(m.handle(Instant(t), input));
        m.check_invariants();
    };
    step(&mut m, 100, submit(1, 6));
    step(&mut m, 101, token(1, 0, false));
    for (round, t) in [(0u64, 1000u64), (1, 2000)] {
        step(&mut m, t, liveness(1, Liveness::Dead));
        step(&mut m, t + 1, stopped(0));
        step(&mut m, t + 1, stopped(2));
        step(&mut m, t + 2, closed());
        let name = format!("agent-1-r{round}");
        let id = 900 + round;
        step(
            &mut m,
            t + 3,
            Input::Liveness {
                node: node(1),
                agent: AgentId::from(name.as_str()),
                liveness: Liveness::Alive,
            },
        );
        step(
            &mut m,
            t + 4,
            Input::RuntimeReady {
                run_id: RUN,
                node: node(1),
                stage: 1,
                agent: AgentId::from(name.as_str()),
                readiness_id: id,
            },
        );
        for (at, input) in rebuild(t + 5) {
            let input = match input {
                Input::ReadyAcked { stage: 1, .. } => acked_by(1, &name, id),
                other => other,
            };
            step(&mut m, at, input);
        }
        // One token between the repairs, then more after the last.
        let next = 1 + round * 2;
        step(&mut m, t + 50, token(1, next, false));
        step(&mut m, t + 51, token(1, next + 1, false));
    }
    step(&mut m, 3000, token(1, 5, false));
    let seqs: Vec<u64> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Prompt {
                request: RequestId(1),
                event: PromptEvent::Token { seq, .. },
            } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (0..6).collect::<Vec<_>>());
    let resumes: Vec<(u64, u32, usize)> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Inject {
                seq, pos, tokens, ..
            } if *pos == 0 && *seq > 0 => Some((*seq, *pos, tokens.len())),
            _ => None,
        })
        .collect();
    // Prompt (3 tokens) plus the tokens given before each repair.
    assert_eq!(resumes, vec![(1, 0, 4), (3, 0, 6)]);
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Prompt {
            request: RequestId(1),
            event: PromptEvent::Done { tokens: 6, .. }
        }
    )));
    assert_eq!(m.repairs(), 2);
    // Each replacement's agent was told its stage once it was Alive.
    let enlisted: Vec<String> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Enlist {
                agent, stage: 1, ..
            } => Some(agent.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(enlisted, ["agent-1-r0", "agent-1-r1"]);
}

#[test]
fn past_the_bound_or_out_of_time_a_loss_fails_the_run_and_every_request() {
    // No repairs allowed: policy `none`.
    let none = vec![
        (100, submit(1, 8)),
        (101, submit(2, 8)),
        (110, liveness(1, Liveness::Dead)),
        (130, stopped(0)),
        (131, stopped(2)),
        (132, closed()),
    ];
    // One allowed, and the replacement never comes.
    let late = vec![
        (100, submit(1, 8)),
        (110, liveness(1, Liveness::Dead)),
        (111, stopped(0)),
        (112, stopped(2)),
        (113, closed()),
        (114, submit(2, 8)),
        (30_200, Input::Tick),
        (30_201, stopped(0)),
        (30_202, stopped(2)),
        (30_203, closed()),
    ];
    // One allowed, a second loss while rebuilding.
    let mut twice = vec![
        (100, submit(1, 8)),
        (110, liveness(1, Liveness::Dead)),
        (111, stopped(0)),
        (112, stopped(2)),
        (113, closed()),
    ];
    twice.extend(replacement(120));
    twice.extend([
        (130, liveness(2, Liveness::Dead)),
        (131, stopped(0)),
        (132, stopped(1)),
        (133, closed()),
    ]);
    let mut text = String::new();
    for (script, repairs) in [(none, 0), (late, 1), (twice, 1)] {
        let mut m = serving(repairs);
        text.push_str(&drive(&mut m, script));
        assert!(matches!(m.phase(), Phase::Failed(_)), "{:?}", m.phase());
        text.push_str("----\n");
    }
    insta::assert_snapshot!(text);
}

#[test]
fn a_stop_while_repairing_ends_the_run_in_order() {
    let mut m = serving(1);
    let script = vec![
        (100, submit(1, 8)),
        (110, liveness(1, Liveness::Dead)),
        (111, Input::Shutdown),
        (112, stopped(0)),
        (113, stopped(2)),
        (114, closed()),
    ];
    let text = drive(&mut m, script);
    assert!(matches!(m.phase(), Phase::Stopped), "{:?}", m.phase());
    insta::assert_snapshot!(text);
}

#[test]
fn a_fault_of_a_stage_the_run_has_not_provisioned_is_another_lifes_and_ignored() {
    // A restarted orchestrator begins the run again with the same run id;
    // an agent's old pipeline side may report a fault of its old stage
    // before it is told to start afresh.
    let mut m = Machine::new(repairing_config(0), Instant(0)).expect("plannable");
    let mut script = vec![(0, alive(0)), (0, alive(1)), (0, alive(2))];
    script.push((5, stage_fault(1, "edge 1: connection lost")));
    drive(&mut m, script);
    assert!(
        matches!(m.phase(), Phase::AwaitingReadiness(_)),
        "{:?}",
        m.phase()
    );
    assert_eq!(m.ignored().unexpected, 1);
    // Once the stage is provisioned, its fault is the run's.
    drive(&mut m, to_serving(10));
    drive(&mut m, vec![(100, stage_fault(1, "cuda error"))]);
    assert!(
        matches!(m.phase(), Phase::TearingDown(_)),
        "{:?}",
        m.phase()
    );
}

#[test]
fn a_repairs_repeated_stop_and_close_reports_are_ignored_and_counted() {
    let mut m = serving(2);
    let before = m.ignored().duplicate;
    drive(
        &mut m,
        vec![
            (100, submit(1, 5)),
            (101, token(1, 0, false)),
            (103, stage_fault(2, "edge 2 closed")),
            (105, stopped(0)),
            (106, stopped(0)),
            (107, closed()),
            (108, closed()),
        ],
    );
    assert!(matches!(m.phase(), Phase::Repairing(_)), "{:?}", m.phase());
    assert_eq!(m.ignored().duplicate, before + 2);
}

#[test]
fn a_node_dead_at_the_barrier_waits_for_its_replacement_then_the_service_opens() {
    // A restarted orchestrator: node 1's agent is expected (Suspect) and
    // never comes back. With a repair allowed, the barrier waits for the
    // node's replacement instead of failing the run; the rebuilt pipeline
    // then opens the prompt service, which was never open.
    let mut script = vec![
        (0, alive(0)),
        (0, alive(2)),
        (0, liveness(1, Liveness::Suspect)),
        (1, ready(0)),
        (1, ready(2)),
        (15, liveness(1, Liveness::Dead)),
    ];
    script.extend(replacement(200));
    script.extend(rebuild(210));
    script.push((230, opened()));
    script.extend([(240, submit(1, 2)), (241, token(1, 0, false))]);
    let mut m = Machine::new(repairing_config(1), Instant(0)).expect("plannable");
    let text = drive(&mut m, script.clone());
    assert!(matches!(m.phase(), Phase::Serving(_)), "{:?}", m.phase());
    assert_eq!(m.repairs(), 1);
    assert!(text.contains("Repairing { cause: NodeDead { node: workers-1, during: Readiness }, repair: 1, request: None }"), "{text}");
    assert_eq!(text.matches("OpenPromptService").count(), 1, "{text}");
    assert!(
        text.contains("Repaired { repair: 1, resumed: None }"),
        "{text}"
    );
    // Without a repair (policy `none`), the same death fails the run.
    let mut none = Machine::new(repairing_config(0), Instant(0)).expect("plannable");
    drive(&mut none, script[..6].to_vec());
    assert!(
        matches!(none.phase(), Phase::Failed(_)),
        "{:?}",
        none.phase()
    );
    insta::assert_snapshot!(text);
}
