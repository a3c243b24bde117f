//! A lost control connection makes a member Suspect at once; its death
//! still waits for the silence bound, and a rejoin's heartbeat revives it.

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::membership::{Config, Effect, Input, Liveness, Machine};
use core_fsm::time::{Duration, Instant};

fn machine() -> Machine {
    Machine::new(Config {
        suspect_after: Duration::from_secs(2),
        dead_after: Duration::from_secs(5),
        ..Config::default()
    })
}

fn node() -> LogicalNodeId {
    LogicalNodeId::from("workers-0")
}

fn agent() -> AgentId {
    AgentId::from("agent-0")
}

fn changes(effects: Vec<Effect>) -> Vec<Liveness> {
    effects
        .into_iter()
        .map(|Effect::Changed { liveness, .. }| liveness)
        .collect()
}

fn step(m: &mut Machine, t: u64, input: Input) -> Vec<Liveness> {
    let out = changes(m.handle(Instant(t), input));
    m.check_invariants();
    out
}

#[test]
fn a_lost_connection_is_suspect_at_once_and_a_rejoin_revives_it() {
    let mut m = machine();
    let lost = || Input::ConnectionLost {
        node: node(),
        agent: agent(),
    };
    let beat = || Input::Heartbeat {
        node: node(),
        agent: agent(),
    };
    assert_eq!(
        step(
            &mut m,
            0,
            Input::Track {
                node: node(),
                agent: agent()
            }
        ),
        [Liveness::Alive]
    );
    assert_eq!(step(&mut m, 500, lost()), [Liveness::Suspect]);
    // Said again: nothing new.
    assert!(step(&mut m, 600, lost()).is_empty());
    // The rejoined agent's heartbeat revives it.
    assert_eq!(step(&mut m, 900, beat()), [Liveness::Alive]);
    // Lost again and silent: Dead `dead_after` after the last heartbeat.
    assert_eq!(step(&mut m, 1_000, lost()), [Liveness::Suspect]);
    assert!(step(&mut m, 5_000, Input::Tick).is_empty());
    assert_eq!(step(&mut m, 5_900, Input::Tick), [Liveness::Dead]);
    // Another identity's connection says nothing of this member.
    let other = Input::ConnectionLost {
        node: node(),
        agent: AgentId::from("agent-9"),
    };
    assert!(step(&mut m, 6_000, other).is_empty());
    assert_eq!(m.ignored().wrong_agent, 1);
}

#[test]
fn an_observer_away_past_the_slack_condemns_nobody_for_it() {
    // M9: ticks more than `late_slack` (1 s) after the earliest deadline
    // mean the orchestrator was not listening; the silence it missed is not
    // the agent's, up to `dead_after` per silence.
    let mut m = machine();
    let beat = || Input::Heartbeat {
        node: node(),
        agent: agent(),
    };
    let track = Input::Track {
        node: node(),
        agent: agent(),
    };
    assert_eq!(step(&mut m, 0, track), [Liveness::Alive]);
    // Suspect was due at 2 s, Dead at 5 s; the loop wakes at 6 s (4 s late):
    // the timers move to 6 s and 9 s, and the heartbeats queued behind the
    // tick revive nothing because nothing changed.
    assert!(step(&mut m, 6_000, Input::Tick).is_empty());
    assert!(step(&mut m, 6_010, beat()).is_empty());
    // Silent from 6.01 s on an attentive loop: Suspect at 8.01 s, Dead at
    // 11.01 s, on time.
    assert!(step(&mut m, 8_000, Input::Tick).is_empty());
    assert_eq!(step(&mut m, 8_010, Input::Tick), [Liveness::Suspect]);
    assert_eq!(step(&mut m, 11_010, Input::Tick), [Liveness::Dead]);
}

#[test]
fn an_observer_always_late_still_declares_a_death_within_twice_the_bound() {
    let mut m = machine();
    let track = Input::Track {
        node: node(),
        agent: agent(),
    };
    assert_eq!(step(&mut m, 0, track), [Liveness::Alive]);
    // Every tick comes 2 s late. The credit per silence is `dead_after`
    // (5 s), so the member dies by 2 x 5 s + one late tick.
    let mut t = 0;
    let mut seen = Vec::new();
    while seen.last() != Some(&Liveness::Dead) {
        let due = m.next_deadline().expect("armed");
        t = due.0 + 2_000;
        seen.extend(step(&mut m, t, Input::Tick));
        assert!(t <= 12_000, "still not dead at {t} ms: {seen:?}");
    }
    assert_eq!(seen, [Liveness::Suspect, Liveness::Dead]);
    assert!(t >= 10_000, "dead at {t} ms: the credit was not given");
}
