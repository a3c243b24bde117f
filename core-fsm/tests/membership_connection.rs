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
