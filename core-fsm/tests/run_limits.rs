//! The run's request limits (no cap, the context, an empty prompt), the
//! explicit layer split, and the pipeline host that feeds membership's
//! changes to the run.

mod run_support;

use core_fsm::Machine as _;
use core_fsm::membership::{self, Liveness};
use core_fsm::pipeline;
use core_fsm::run::{
    self, DoneReason, Effect, Input, Machine, Phase, PlanningError, PromptEvent, PromptFault,
    RequestId, RunError, plan_split,
};
use core_fsm::stage::LayerRange;
use core_fsm::time::{Duration, Instant};
use run_support::*;

fn serving(context: u32) -> Machine {
    let mut m = Machine::new(
        run::Config {
            context,
            ..config()
        },
        Instant(0),
    )
    .unwrap();
    for (t, input) in to_serving(0) {
        m.handle(Instant(t), input);
        m.check_invariants();
    }
    assert!(matches!(m.phase(), Phase::Serving(_)));
    m
}

fn events(effects: &[Effect]) -> Vec<PromptEvent> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Prompt { event, .. } => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// Feeds tokens `0..n` of request 1 (none EOS); the events of the last.
fn feed(m: &mut Machine, n: u64) -> Vec<PromptEvent> {
    let mut last = Vec::new();
    for seq in 0..n {
        last = events(&m.handle(Instant(200 + seq), token(1, seq, false)));
        m.check_invariants();
    }
    last
}

#[test]
fn no_cap_runs_until_the_context_is_full() {
    // Context 10, prompt of 3: tokens 0..=7 feed positions 3..=10, and the
    // 8th token (seq 7) would need position 10, outside the context.
    let mut m = serving(10);
    let started = m.handle(Instant(100), submit(1, 0));
    assert!(
        started
            .iter()
            .any(|e| matches!(e, Effect::Inject { seq: 0, .. }))
    );
    let before = feed(&mut m, 7);
    assert!(before.iter().all(|e| !e.is_terminal()), "{before:?}");
    let last = events(&m.handle(Instant(300), token(1, 7, false)));
    assert_eq!(
        last.last(),
        Some(&PromptEvent::Done {
            tokens: 8,
            reason: DoneReason::Context
        })
    );
}

#[test]
fn a_cap_ends_before_the_context_and_eos_is_not_counted() {
    let mut m = serving(512);
    m.handle(Instant(100), submit(1, 4));
    let last = feed(&mut m, 4);
    assert_eq!(
        last.last(),
        Some(&PromptEvent::Done {
            tokens: 4,
            reason: DoneReason::MaxTokens
        })
    );
    m.handle(Instant(400), submit(2, 0));
    m.handle(Instant(401), token(2, 0, false));
    let eos = events(&m.handle(Instant(402), token(2, 1, true)));
    assert_eq!(
        eos.last(),
        Some(&PromptEvent::Done {
            tokens: 1,
            reason: DoneReason::Eos
        })
    );
}

#[test]
fn a_prompt_that_fills_the_context_or_is_empty_is_invalid() {
    let mut m = serving(3);
    let full = events(&m.handle(Instant(100), submit(1, 5)));
    assert!(
        matches!(&full[..], [PromptEvent::Fault(PromptFault::Invalid { reason })] if reason.contains("fill the context of 3")),
        "{full:?}"
    );
    let empty = Input::Submit {
        request: RequestId(2),
        prompt: Vec::new(),
        max_tokens: 5,
    };
    let empty = events(&m.handle(Instant(101), empty));
    assert!(
        matches!(
            &empty[..],
            [PromptEvent::Fault(PromptFault::Invalid { .. })]
        ),
        "{empty:?}"
    );
    m.check_invariants();
}

#[test]
fn an_explicit_split_is_followed_and_checked() {
    let nodes: Vec<_> = (0..3).map(node).collect();
    let plan = plan_split(5, 3, &nodes, &[1, 3, 1]).unwrap();
    let layers: Vec<LayerRange> = plan.iter().map(|a| a.layers).collect();
    assert_eq!(
        layers.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["0..1", "1..4", "4..5"]
    );
    assert_eq!(
        plan_split(5, 3, &nodes, &[2, 2]),
        Err(PlanningError::SplitLength {
            stages: 3,
            given: 2
        })
    );
    for bad in [[1, 3, 2], [0, 4, 1]] {
        assert_eq!(
            plan_split(5, 3, &nodes, &bad),
            Err(PlanningError::SplitLayers {
                split: bad.to_vec(),
                layers: 5
            })
        );
    }
    let balanced = plan_split(5, 3, &nodes, &[]).unwrap();
    let lens: Vec<u32> = balanced.iter().map(|a| a.layers.len()).collect();
    assert_eq!(lens, [2, 2, 1]);
}

fn host() -> pipeline::Machine {
    let membership = membership::Config {
        suspect_after: Duration::from_secs(2),
        dead_after: Duration::from_secs(5),
        ..membership::Config::default()
    };
    pipeline::Machine::new(membership)
}

fn begin() -> pipeline::Input {
    pipeline::Input::Begin(Box::new(config()))
}

fn track(i: u32) -> pipeline::Input {
    pipeline::Input::Membership(membership::Input::Track {
        node: node(i),
        agent: agent(i),
    })
}

#[test]
fn the_host_passes_the_barrier_only_with_tracked_alive_members() {
    let mut h = host();
    // Before the run, run inputs are ignored and counted.
    h.handle(Instant(0), pipeline::Input::Run(ready(0)));
    assert_eq!(h.ignored().no_run, 1);
    h.handle(Instant(0), begin());
    h.handle(Instant(0), begin());
    assert_eq!(h.ignored().duplicate_begin, 1);
    // Reports without membership do not pass the barrier.
    for i in 0..3 {
        h.handle(Instant(1), pipeline::Input::Run(ready(i)));
        h.check_invariants();
    }
    assert!(matches!(
        h.run().unwrap().phase(),
        Phase::AwaitingReadiness(_)
    ));
    let mut acks = 0;
    for i in 0..3 {
        let effects = h.handle(Instant(2), track(i));
        h.check_invariants();
        assert!(effects.iter().any(|e| matches!(
            e,
            pipeline::Effect::Liveness {
                liveness: Liveness::Alive,
                ..
            }
        )));
        acks += effects
            .iter()
            .filter(|e| matches!(e, pipeline::Effect::Run(Effect::SendReadyAck { .. })))
            .count();
    }
    assert_eq!(acks, 3, "the barrier opens once every member is Alive");
    assert!(matches!(h.run().unwrap().phase(), Phase::Acknowledging(_)));
}

#[test]
fn a_silent_member_dies_and_fails_the_run_through_the_host() {
    let mut h = host();
    // Members tracked before the run: the run begins with their liveness.
    for i in 0..3 {
        h.handle(Instant(1), track(i));
    }
    h.handle(Instant(1), begin());
    for i in 0..3 {
        h.handle(Instant(1), pipeline::Input::Run(ready(i)));
    }
    assert!(matches!(h.run().unwrap().phase(), Phase::Acknowledging(_)));
    // Heartbeats from 0 and 1 only; 2 goes silent.
    for t in [1000, 2000, 3000, 4000, 5000] {
        for i in 0..2 {
            let beat = membership::Input::Heartbeat {
                node: node(i),
                agent: agent(i),
            };
            h.handle(Instant(t), pipeline::Input::Membership(beat));
            h.check_invariants();
        }
        h.handle(Instant(t), pipeline::Input::Tick);
        h.check_invariants();
    }
    let effects = h.handle(Instant(6001), pipeline::Input::Tick);
    h.check_invariants();
    assert!(effects.iter().any(|e| matches!(
        e,
        pipeline::Effect::Liveness { node: n, liveness: Liveness::Dead, .. } if *n == node(2)
    )));
    // Nothing was provisioned yet, so teardown has nothing to wait for.
    let run = h.run().unwrap();
    assert_eq!(
        run.outcome(),
        Some(Err(&RunError::NodeDead {
            node: node(2),
            during: run::PhaseName::Acknowledgement,
        }))
    );
    assert_eq!(run.member(&node(2)).map(|(_, l)| l), Some(Liveness::Dead));
}

#[test]
fn a_stale_acknowledgement_a_neighbours_fault_while_loading_and_late_inputs_are_told_apart() {
    use core_fsm::run::{Phase, RunError};
    let mut m = Machine::new(config(), Instant(0)).expect("plannable");
    let mut script: Vec<(u64, Input)> = (0..3).map(|i| (0, alive(i))).collect();
    script.extend((0..3).map(|i| (1, ready(i))));
    // An acknowledgement of an older report (another readiness id) is not
    // this barrier's: counted, nothing acknowledged.
    script.push((5, acked_report(0, 99)));
    drive(&mut m, script);
    assert_eq!(m.ignored().unexpected, 1);
    assert!(matches!(m.phase(), Phase::Acknowledging(a) if a.acked.is_empty()));
    // Stage 0 loaded; while stage 1 loads, stage 0's worker faults: a
    // provisioned stage's fault, not the loading stage's weight failure.
    let acks: Vec<(u64, Input)> = (0..3).map(|i| (10, acked(i))).collect();
    drive(&mut m, acks);
    drive(
        &mut m,
        vec![(20, weights(0)), (21, stage_fault(0, "cuda error"))],
    );
    let Phase::TearingDown(teardown) = m.phase() else {
        panic!("{:?}", m.phase());
    };
    assert!(
        matches!(
            &teardown.outcome,
            Err(RunError::StageProvisionFailed { stage: 0, .. })
        ),
        "{:?}",
        teardown.outcome
    );
    // Tokens after the end began change nothing, and are counted.
    let before = m.ignored().unexpected;
    drive(&mut m, vec![(30, token(1, 0, false))]);
    assert_eq!(m.ignored().unexpected, before + 1);
    // Once the run has ended, an endpoint's fault starts nothing.
    drive(
        &mut m,
        vec![(31, stopped(0)), (32, stopped(1)), (33, closed())],
    );
    assert!(matches!(m.phase(), Phase::Failed(_)), "{:?}", m.phase());
    let fault = Input::EndpointFault {
        run_id: RUN,
        reason: "the token-out edge closed".into(),
    };
    let effects = m.handle(Instant(40), fault);
    assert!(effects.is_empty(), "{effects:?}");
    assert!(matches!(m.phase(), Phase::Failed(_)), "{:?}", m.phase());
}

#[test]
fn an_acknowledgement_from_another_agent_is_counted_and_acknowledges_nothing() {
    use core_fsm::run::Phase;
    let mut m = Machine::new(config(), Instant(0)).expect("plannable");
    let mut script: Vec<(u64, Input)> = (0..3).map(|i| (0, alive(i))).collect();
    script.extend((0..3).map(|i| (1, ready(i))));
    script.push((
        5,
        Input::ReadyAcked {
            run_id: RUN,
            node: node(0),
            stage: 0,
            agent: agent(1),
            readiness_id: 100,
        },
    ));
    drive(&mut m, script);
    assert_eq!(m.ignored().wrong_agent, 1);
    assert!(matches!(m.phase(), Phase::Acknowledging(a) if a.acked.is_empty()));
}

#[test]
fn a_layer_range_is_empty_only_when_it_holds_no_layer() {
    let range = |start, end_exclusive| LayerRange {
        start,
        end_exclusive,
    };
    assert!(range(2, 2).is_empty());
    assert!(!range(2, 3).is_empty());
    assert_eq!(range(2, 5).len(), 3);
}

/// A prompt's chunks cover it in order, none over `max` tokens (so its
/// activations fit an edge frame), no more than `in_flight` of them
/// unless `max` asks for more, and as even as they come.
#[test]
fn prefill_chunks_cover_the_prompt_within_their_bounds() {
    use core_fsm::run::prefill_chunks;
    for len in 0..300usize {
        for (min, in_flight, max) in [(32, 8, 0), (2, 8, 3), (32, 8, 7), (1, 1, 5), (4, 3, 4)] {
            let chunks = prefill_chunks(len, min, in_flight, max);
            assert_eq!(
                chunks.iter().sum::<usize>(),
                len,
                "{len} {min} {in_flight} {max}"
            );
            assert!(chunks.iter().all(|&c| c > 0));
            if max > 0 {
                assert!(chunks.iter().all(|&c| c <= max), "{chunks:?} over {max}");
            }
            let needed = if max == 0 { 1 } else { len.div_ceil(max) };
            assert!(
                chunks.len() <= in_flight.max(needed),
                "{len} tokens in {} chunks",
                chunks.len()
            );
            // Every chunk but the last is the same size, the last no larger.
            if let Some((last, rest)) = chunks.split_last() {
                let size = rest.first().unwrap_or(last);
                assert!(rest.iter().all(|c| c == size) && last <= size, "{chunks:?}");
            }
        }
    }
    // The runtime's own sizes: 32 tokens at least, 8 in flight.
    assert_eq!(prefill_chunks(33, 32, 8, 0), [17, 16]);
    assert_eq!(prefill_chunks(5000, 32, 8, 0).len(), 8);
    // A wide model's long prompt: chunks of at most 1000 tokens, so more
    // than 8.
    let wide = prefill_chunks(20_000, 32, 8, 1000);
    assert_eq!(wide, vec![1000; 20]);
}
