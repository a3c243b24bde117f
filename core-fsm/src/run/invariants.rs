//! The run's invariants (RN1-RN5, RN19, RN20), checked after every step
//! by tests and the oracle.

use super::{Machine, Phase, Serving, TimerKind};

/// The run's invariants, checked after every step by tests and the oracle.
pub(super) fn check(m: &Machine) {
    let armed = |k| m.timers.is_set(&k);
    // RN1: each phase owns its timers; none outlives it.
    let expected: &[TimerKind] = match &m.phase {
        Phase::AwaitingReadiness(_) => &[TimerKind::Readiness],
        Phase::Acknowledging(_) => &[TimerKind::AckDeadline],
        Phase::LoadingWeights { .. } => &[TimerKind::WeightLoad],
        Phase::AwaitingStageReady(_) => &[TimerKind::StageReady],
        Phase::OpeningPrompt { .. } => &[TimerKind::PromptOpen],
        Phase::Serving(_) => &[],
        Phase::Repairing(_) => &[TimerKind::Repair],
        Phase::TearingDown(_) => &[TimerKind::Stop],
        Phase::Stopped | Phase::Failed(_) => &[],
    };
    for kind in expected {
        assert!(armed(*kind), "run: {kind:?} not armed in {:?}", m.phase);
    }
    let extra = usize::from(
        matches!(m.phase, Phase::Acknowledging(_)) && armed(TimerKind::AckRetry)
            || matches!(&m.phase, Phase::Serving(s) if s.active.is_some()),
    );
    assert_eq!(m.timers.len(), expected.len() + extra, "run: stray timers");
    match &m.phase {
        Phase::Serving(serving) => {
            // RN2: the queue is bounded and waits only behind an active request.
            assert!(serving.queue.len() <= m.config.queue_max);
            assert!(serving.active.is_some() || serving.queue.is_empty());
            // RN3: the token-gap timer runs exactly while a request is active.
            assert_eq!(armed(TimerKind::TokenGap), serving.active.is_some());
        }
        Phase::LoadingWeights { stage, .. } => {
            // RN4: stages are provisioned one at a time, in order.
            assert!(m.provisioned.iter().copied().eq(0..=*stage));
        }
        Phase::AwaitingReadiness(_) => assert!(m.workers.is_empty()),
        _ => {}
    }
    // RN5: past the barrier, every stage has the agent that passed it.
    let past_barrier = matches!(
        m.phase,
        Phase::Acknowledging(_)
            | Phase::LoadingWeights { .. }
            | Phase::AwaitingStageReady(_)
            | Phase::OpeningPrompt { .. }
            | Phase::Serving(_)
    );
    if past_barrier {
        assert_eq!(m.workers.len(), m.config.stages as usize);
    }
    // RN19: a repair's carry lives from its start until serving resumes,
    // through the startup phases that rebuild the pipeline, and it holds
    // what serving would; repairs stay within their bound.
    let rebuilding = matches!(
        m.phase,
        Phase::Repairing(_)
            | Phase::Acknowledging(_)
            | Phase::LoadingWeights { .. }
            | Phase::AwaitingStageReady(_)
    ) || (matches!(m.phase, Phase::OpeningPrompt { .. }) && !m.prompt_open);
    if matches!(m.phase, Phase::Repairing(_)) {
        assert!(m.carry.is_some(), "RN19: a repair without its carry");
    }
    if let Some(carry) = &m.carry {
        assert!(rebuilding, "RN19: a carry in {:?}", m.phase);
        assert!(
            carry.queue.len() <= m.config.queue_max,
            "RN19: carried queue"
        );
        if let Some(active) = &carry.active {
            assert_eq!(active.generated.len() as u64, active.next_seq, "RN19");
        }
    }
    if let Phase::Serving(Serving {
        active: Some(active),
        ..
    }) = &m.phase
    {
        // RN20: the tokens kept for a resume are exactly those given.
        assert_eq!(active.generated.len() as u64, active.next_seq, "RN20");
    }
    assert!(m.repairs <= m.config.repairs_max, "RN19: repairs bound");
}
