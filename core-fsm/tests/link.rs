//! The agent's control link: which hello each dial sends, the backoff
//! between dials, giving up at the deadline, rejoining at once after a
//! loss, the one `Rejoin` after a refused `Join` that followed an
//! unanswered one; and, over random inputs, the properties that hold on
//! every path.

use core_fsm::Machine as _;
use core_fsm::ids::LogicalNodeId;
use core_fsm::link::{Config, Effect, Exit, Hello, Input, Machine, Phase};
use core_fsm::time::{Duration, Instant};
use proptest::prelude::*;

fn config() -> Config {
    Config {
        node: LogicalNodeId::from("w-0"),
        reconnect_for: Duration::from_secs(10),
        backoff_base: Duration::from_millis(100),
        backoff_max: Duration::from_secs(2),
    }
}

fn failed() -> Input {
    Input::DialFailed {
        reason: "refused".into(),
    }
}

fn dials(effects: &[Effect]) -> Vec<Hello> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Dial { hello, .. } => Some(*hello),
            _ => None,
        })
        .collect()
}

/// Feeds `input` at `now`, then ticks at the wait's end if it waits;
/// returns every effect and the time after.
fn step(m: &mut Machine, now: Instant, input: Input) -> (Vec<Effect>, Instant) {
    let mut effects = m.handle(now, input);
    m.check_invariants();
    let mut now = now;
    if let Some(at) = m.next_deadline() {
        now = at;
        effects.extend(m.handle(now, Input::Tick));
        m.check_invariants();
    }
    (effects, now)
}

#[test]
fn a_first_dial_joins_and_failures_back_off_doubling_to_the_max() {
    let mut m = Machine::new(config());
    let effects = m.handle(Instant(0), Input::Start);
    assert_eq!(
        effects,
        vec![Effect::Dial {
            hello: Hello::Join,
            deadline: Instant(10_000)
        }]
    );
    let mut now = Instant(0);
    let mut waits = Vec::new();
    for _ in 0..7 {
        let before = now;
        let (effects, after) = step(&mut m, now, failed());
        assert_eq!(dials(&effects), vec![Hello::Join]);
        waits.push(after.0 - before.0);
        now = after;
    }
    assert_eq!(waits, vec![100, 200, 400, 800, 1600, 2000, 2000]);
    assert!(matches!(m.phase(), Phase::Dialing { .. }));
}

#[test]
fn it_gives_up_only_once_the_link_was_down_for_reconnect_for() {
    let mut m = Machine::new(config());
    m.handle(Instant(0), Input::Start);
    let mut now = Instant(0);
    // 100 ms doubling to 2 s: the 10 s deadline passes within 12 dials.
    for _ in 0..12 {
        let (effects, after) = step(&mut m, now, failed());
        if let Some(Effect::Exit(exit)) = effects.last() {
            assert_eq!(*exit, Exit::Unreachable);
            assert_eq!(exit.code(), 4);
            assert!(now >= Instant(10_000), "gave up at {now}");
            assert!(effects.contains(&Effect::Warn("giving up: refused".into())));
            break;
        }
        assert!(now < Instant(10_000), "still dialling at {now}");
        now = after;
    }
    assert!(matches!(m.phase(), Phase::Exited(_)), "{:?}", m.phase());
    // Ended: anything more is ignored.
    assert!(m.handle(now, Input::Welcomed).is_empty());
    assert_eq!(m.ignored().out_of_phase, 1);
}

#[test]
fn a_welcomed_link_that_is_lost_rejoins_at_once_with_a_fresh_deadline() {
    let mut m = Machine::new(config());
    m.handle(Instant(0), Input::Start);
    let welcome = m.handle(Instant(50), Input::Welcomed);
    assert_eq!(
        welcome,
        vec![Effect::Say("joined the orchestrator as node w-0".into())]
    );
    let lost = m.handle(
        Instant(60_000),
        Input::Lost {
            reason: "timed out".into(),
        },
    );
    assert_eq!(
        lost,
        vec![
            Effect::Warn("connection lost (timed out); rejoining".into()),
            Effect::Dial {
                hello: Hello::Rejoin,
                deadline: Instant(70_000)
            }
        ]
    );
    // A failed rejoin keeps rejoining; never the token again.
    let (effects, now) = step(&mut m, Instant(60_010), failed());
    assert_eq!(dials(&effects), vec![Hello::Rejoin]);
    let again = m.handle(now, Input::Welcomed);
    assert_eq!(
        again,
        vec![Effect::Say("rejoined the orchestrator as node w-0".into())]
    );
}

#[test]
fn a_join_refused_after_an_unanswered_one_rejoins_once_then_a_refusal_is_final() {
    let mut m = Machine::new(config());
    m.handle(Instant(0), Input::Start);
    let unanswered = Input::Unanswered {
        reason: "no answer to hello".into(),
    };
    let (effects, now) = step(&mut m, Instant(10), unanswered);
    assert_eq!(dials(&effects), vec![Hello::Join]);
    let refused = || Input::Refused {
        reason: "token spent".into(),
    };
    let (effects, now) = step(&mut m, now, refused());
    assert!(
        effects.contains(&Effect::Warn(
            "dial failed (join refused (token spent) after an unanswered join); retrying in 200 ms"
                .into()
        ))
    );
    assert_eq!(dials(&effects), vec![Hello::Rejoin]);
    let effects = m.handle(now, refused());
    let rejected = Exit::Rejected {
        reason: "token spent".into(),
    };
    assert_eq!(
        effects,
        vec![
            Effect::Warn("rejected: token spent".into()),
            Effect::Exit(rejected.clone())
        ]
    );
    assert_eq!(m.phase(), &Phase::Exited(rejected));
}

#[test]
fn a_refused_first_join_and_a_shutdown_are_final() {
    let mut m = Machine::new(config());
    m.handle(Instant(0), Input::Start);
    let effects = m.handle(
        Instant(5),
        Input::Refused {
            reason: "bad token".into(),
        },
    );
    assert_eq!(
        effects
            .last()
            .map(|e| matches!(e, Effect::Exit(x) if x.code() == 3)),
        Some(true)
    );
    let mut m = Machine::new(config());
    m.handle(Instant(0), Input::Start);
    m.handle(Instant(5), Input::Welcomed);
    assert_eq!(
        m.handle(Instant(9), Input::Shutdown),
        vec![Effect::Exit(Exit::Shutdown)]
    );
    assert_eq!(Exit::Shutdown.code(), 0);
}

fn input() -> impl Strategy<Value = Input> {
    // Ticks and failures often, the final answers rarely, so that paths
    // wait, redial and back off many times before they end.
    prop_oneof![
        2 => Just(Input::Start),
        6 => Just(Input::Tick),
        4 => Just(failed()),
        2 => Just(Input::Unanswered { reason: "u".into() }),
        2 => Just(Input::Welcomed),
        1 => Just(Input::Refused { reason: "r".into() }),
        2 => Just(Input::Lost { reason: "l".into() }),
        1 => Just(Input::Shutdown),
    ]
}

/// Time between two inputs: often less than the first backoff (a tick
/// that comes early), sometimes seconds.
fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..150, 0u64..3_000]
}

proptest! {
    /// On every path: the invariants hold; the token is never sent after a
    /// welcome, nor a `Rejoin` before one except after a refused `Join`
    /// that followed an unanswered one; before a welcome a refused `Rejoin`
    /// ends the agent; the agent gives up only after `reconnect_for` down;
    /// nothing follows the exit.
    #[test]
    fn every_path_keeps_the_link_rules(steps in prop::collection::vec((input(), advance()), 1..120)) {
        let config = config();
        let mut m = Machine::new(config.clone());
        let mut now = Instant(0);
        let mut welcomed = false;
        let mut unanswered_join = false;
        let mut rejoin_allowed = false;
        let mut down_since: Option<Instant> = None;
        let mut last_hello = None;
        let mut exited = false;
        for (input, advance) in steps {
            now = Instant(now.0 + advance);
            let phase = m.phase().clone();
            let effects = m.handle(now, input.clone());
            m.check_invariants();
            prop_assert!(!exited || effects.is_empty(), "{effects:?} after the exit");
            let dialing = matches!(phase, Phase::Dialing { .. });
            match (&input, dialing) {
                (Input::Start, _) if phase == Phase::Idle => down_since = Some(now),
                (Input::Unanswered { .. }, true) if last_hello == Some(Hello::Join) => {
                    unanswered_join = true;
                }
                (Input::Refused { .. }, true) if last_hello == Some(Hello::Join) && unanswered_join => {
                    rejoin_allowed = true;
                }
                (Input::Refused { .. }, true) => {
                    let rejected = matches!(effects.last(), Some(Effect::Exit(Exit::Rejected { .. })));
                    prop_assert!(rejected, "a refusal that is not final: {:?}", effects);
                }
                (Input::Welcomed, true) => {
                    welcomed = true;
                    down_since = None;
                }
                (Input::Lost { .. }, _) if phase == Phase::Connected => down_since = Some(now),
                _ => {}
            }
            for effect in &effects {
                match effect {
                    Effect::Dial { .. } if matches!(input, Input::Tick) => {
                        // A wait ends at its time, never before.
                        let Phase::Waiting { until, .. } = phase else {
                            panic!("a dial on a tick outside a wait: {phase:?}");
                        };
                        prop_assert!(now >= until, "dialled at {now}, before {until}");
                    }
                    _ => {}
                }
                match effect {
                    Effect::Dial { hello, deadline } => {
                        let since = down_since.expect("a dial while the link is up");
                        prop_assert_eq!(*deadline, since + config.reconnect_for);
                        match hello {
                            Hello::Join => prop_assert!(!welcomed && !rejoin_allowed),
                            Hello::Rejoin => prop_assert!(welcomed || rejoin_allowed),
                        }
                        last_hello = Some(*hello);
                    }
                    Effect::Exit(Exit::Unreachable) => {
                        let since = down_since.expect("down");
                        prop_assert!(now >= since + config.reconnect_for, "gave up early at {now}");
                    }
                    Effect::Exit(_) => {}
                    Effect::Say(_) | Effect::Warn(_) => {}
                }
                if matches!(effect, Effect::Exit(_)) {
                    exited = true;
                }
            }
        }
    }
}
