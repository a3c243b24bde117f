//! OrchestratorRun properties over random action plans: determinism, token
//! order, one active request, one terminal per request, silence after the
//! terminal, and a teardown that always ends.

mod run_support;

use core_fsm::Machine as _;
use core_fsm::membership::Liveness;
use core_fsm::run::{Effect, Input, Machine, Phase, PromptEvent, RequestId};
use core_fsm::time::Instant;
use proptest::prelude::*;
use run_support::*;
use std::collections::{BTreeMap, BTreeSet};

/// What the plan does next; turned into an input against the machine's
/// current state, so most plans reach serving and generate tokens.
#[derive(Clone, Debug)]
enum Action {
    Startup,
    Submit { max_tokens: u32 },
    StaleSubmit,
    GoodToken { eos: bool },
    BadToken { offset: u64 },
    ForeignToken,
    PromptFault,
    Wait { ms: u64 },
    Liveness { stage: u32, dead: bool },
    StageFault { stage: u32 },
    Shutdown,
    Stopped { stage: u32 },
    Closed,
}

fn action() -> impl Strategy<Value = Action> {
    // Fatal actions are rare so that most plans get far enough to serve.
    prop_oneof![
        300 => Just(Action::Startup),
        60 => (0u32..5).prop_map(|max_tokens| Action::Submit { max_tokens }),
        5 => Just(Action::StaleSubmit),
        120 => prop::bool::weighted(0.2).prop_map(|eos| Action::GoodToken { eos }),
        3 => (1u64..3).prop_map(|offset| Action::BadToken { offset }),
        10 => Just(Action::ForeignToken),
        5 => Just(Action::PromptFault),
        20 => (0u64..2_500).prop_map(|ms| Action::Wait { ms }),
        4 => (0u32..3, any::<bool>()).prop_map(|(stage, dead)| Action::Liveness { stage, dead }),
        2 => (0u32..3).prop_map(|stage| Action::StageFault { stage }),
        2 => Just(Action::Shutdown),
        10 => (0u32..3).prop_map(|stage| Action::Stopped { stage }),
        5 => Just(Action::Closed),
    ]
}

struct Driver {
    m: Machine,
    now: u64,
    startup: std::vec::IntoIter<(u64, Input)>,
    next_request: u64,
    /// Every step's input and effects, for the checks.
    log: Vec<(Input, Vec<Effect>)>,
}

impl Driver {
    fn new() -> Driver {
        Driver {
            m: Machine::new(config(), Instant(0)).expect("plannable"),
            now: 0,
            startup: to_serving(0).into_iter(),
            next_request: 1,
            log: Vec::new(),
        }
    }

    fn input_for(&mut self, action: Action) -> Input {
        let active = match self.m.phase() {
            Phase::Serving(s) => s.active.as_ref().map(|a| (a.request, a.next_seq)),
            _ => None,
        };
        match action {
            Action::Startup => match self.startup.next() {
                Some((_, input)) => input,
                None => Input::Tick,
            },
            Action::Submit { max_tokens } => {
                self.next_request += 1;
                Input::Submit {
                    request: RequestId(self.next_request),
                    prompt: vec![9],
                    max_tokens,
                }
            }
            Action::StaleSubmit => submit(1, 3),
            Action::GoodToken { eos } => match active {
                Some((r, seq)) => token(r.0, seq, eos),
                None => Input::Tick,
            },
            Action::BadToken { offset } => match active {
                Some((r, seq)) => token(r.0, seq + offset, false),
                None => Input::Tick,
            },
            Action::ForeignToken => token(self.next_request + 100, 0, false),
            Action::PromptFault => Input::PromptFault {
                run_id: RUN,
                request: active.map_or(RequestId(0), |(r, _)| r),
                reason: "model fault".into(),
            },
            Action::Wait { ms } => {
                self.now += ms;
                Input::Tick
            }
            Action::Liveness { stage, dead } => liveness(
                stage,
                if dead {
                    Liveness::Dead
                } else {
                    Liveness::Suspect
                },
            ),
            Action::StageFault { stage } => stage_fault(stage, "injected"),
            Action::Shutdown => Input::Shutdown,
            Action::Stopped { stage } => stopped(stage),
            Action::Closed => closed(),
        }
    }

    fn apply(&mut self, input: Input) {
        let effects = self.m.handle(Instant(self.now), input.clone());
        self.m.check_invariants();
        self.log.push((input, effects));
    }

    fn run(actions: &[Action]) -> Driver {
        let mut d = Driver::new();
        for a in actions {
            let input = d.input_for(a.clone());
            d.apply(input);
            d.now += 1;
        }
        d
    }

    fn transcript(&self) -> String {
        self.log
            .iter()
            .map(|(i, e)| format!("{i:?} -> {e:?}\n"))
            .collect()
    }
}

/// Checks the per-request contract over a whole log.
fn check_requests(log: &[(Input, Vec<Effect>)]) -> Result<(), TestCaseError> {
    let mut next_seq: BTreeMap<RequestId, u64> = BTreeMap::new();
    let mut ended: BTreeSet<RequestId> = BTreeSet::new();
    let mut active: Option<RequestId> = None;
    for effect in log.iter().flat_map(|(_, e)| e) {
        let (request, event) = match effect {
            Effect::Inject {
                request, seq: 0, ..
            } => {
                // One active request at most: a new one starts only after
                // the previous one ended.
                prop_assert!(
                    active.is_none(),
                    "{request} started while {active:?} active"
                );
                prop_assert!(!ended.contains(request));
                active = Some(*request);
                continue;
            }
            Effect::Inject { request, .. } => {
                prop_assert_eq!(Some(*request), active);
                continue;
            }
            Effect::Prompt { request, event } => (*request, event),
            _ => continue,
        };
        prop_assert!(!ended.contains(&request), "{request} spoke after its end");
        match event {
            PromptEvent::Token { seq, .. } => {
                let expected = next_seq.entry(request).or_default();
                prop_assert_eq!(*seq, *expected, "tokens of {} out of order", request);
                *expected += 1;
            }
            _ => {
                ended.insert(request);
                if active == Some(request) {
                    active = None;
                }
            }
        }
    }
    Ok(())
}

/// The requests the plan submitted with a fresh id.
fn submitted(log: &[(Input, Vec<Effect>)]) -> BTreeSet<RequestId> {
    let mut last = None;
    let mut fresh = BTreeSet::new();
    for (input, _) in log {
        if let Input::Submit { request, .. } = input
            && last.is_none_or(|l| *request > l)
        {
            last = Some(*request);
            fresh.insert(*request);
        }
    }
    fresh
}

fn terminals(log: &[(Input, Vec<Effect>)]) -> BTreeMap<RequestId, usize> {
    let mut count = BTreeMap::new();
    for effect in log.iter().flat_map(|(_, e)| e) {
        if let Effect::Prompt { request, event } = effect
            && event.is_terminal()
        {
            *count.entry(*request).or_default() += 1;
        }
    }
    count
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn same_plan_same_transcript(actions in prop::collection::vec(action(), 0..120)) {
        let a = Driver::run(&actions).transcript();
        let b = Driver::run(&actions).transcript();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn requests_keep_their_contract(actions in prop::collection::vec(action(), 0..160)) {
        let d = Driver::run(&actions);
        check_requests(&d.log)?;
    }

    /// Teardown ends when every stop fact arrives, and ends anyway when none
    /// does; either way each submitted request got exactly one terminal.
    #[test]
    fn teardown_always_ends(actions in prop::collection::vec(action(), 0..120), facts in any::<bool>()) {
        let mut d = Driver::run(&actions);
        if !d.m.phase().is_terminal() {
            d.apply(Input::Shutdown);
        }
        if facts {
            for stage in 0..3 {
                d.apply(stopped(stage));
            }
            d.apply(closed());
        } else {
            d.now += config().stop_timeout.as_millis();
            d.apply(Input::Tick);
        }
        prop_assert!(d.m.phase().is_terminal(), "not terminal: {:?}", d.m.phase());
        prop_assert_eq!(d.m.next_deadline(), None);
        let finished = d.log.iter().flat_map(|(_, e)| e).filter(|e| matches!(e, Effect::Finished(_))).count();
        prop_assert_eq!(finished, 1);
        check_requests(&d.log)?;
        let terminals = terminals(&d.log);
        for request in submitted(&d.log) {
            prop_assert_eq!(terminals.get(&request).copied(), Some(1), "{} terminals", request);
        }
    }
}

/// The plans above are worth something only if they reach the interesting
/// states; this counts how often they do over a fixed, seeded sample.
#[test]
fn plans_reach_serving_tokens_and_every_ending() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = prop::collection::vec(action(), 60..160);
    let (mut serving, mut tokens, mut done, mut stopped, mut failed) = (0, 0, 0, 0, 0);
    for _ in 0..200 {
        let actions = strategy.new_tree(&mut runner).expect("a plan").current();
        let d = Driver::run(&actions);
        let effects: Vec<&Effect> = d.log.iter().flat_map(|(_, e)| e).collect();
        serving += usize::from(
            d.log
                .iter()
                .any(|(i, _)| matches!(i, Input::PromptServiceOpened { .. })),
        );
        tokens += usize::from(effects.iter().any(|e| {
            matches!(
                e,
                Effect::Prompt {
                    event: PromptEvent::Token { .. },
                    ..
                }
            )
        }));
        done += usize::from(effects.iter().any(|e| {
            matches!(
                e,
                Effect::Prompt {
                    event: PromptEvent::Done { .. },
                    ..
                }
            )
        }));
        stopped += usize::from(matches!(d.m.phase(), Phase::Stopped));
        failed += usize::from(matches!(d.m.phase(), Phase::Failed(_)));
    }
    let counts =
        format!("serving={serving} tokens={tokens} done={done} stopped={stopped} failed={failed}");
    assert!(serving >= 50 && tokens >= 30 && done >= 20, "{counts}");
    assert!(stopped >= 1 && failed >= 20, "{counts}");
}
