//! Membership transcripts: Alive, Suspect, revival, sticky death, identities.

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::membership::{Config, Effect, Input, Liveness, Machine, Phase};
use core_fsm::time::{Duration, Instant};
use proptest::prelude::*;
use std::fmt::Write as _;

fn config() -> Config {
    Config {
        suspect_after: Duration::from_millis(1_000),
        dead_after: Duration::from_millis(3_000),
        members_max: 2,
        buried_max: 8,
        // These scripts tick sparsely on purpose; the lateness credit (M9)
        // has its own test.
        late_slack: Duration::from_secs(3_600),
        rejoin_grace: Duration::from_millis(2_000),
    }
}

fn track(node: &str, agent: &str) -> Input {
    Input::Track {
        node: LogicalNodeId::from(node),
        agent: AgentId::from(agent),
    }
}

fn beat(node: &str, agent: &str) -> Input {
    Input::Heartbeat {
        node: LogicalNodeId::from(node),
        agent: AgentId::from(agent),
    }
}

fn show_input(input: &Input) -> String {
    match input {
        Input::Tick => "Tick".into(),
        Input::Track { node, agent } => format!("Track {node} {agent}"),
        Input::Expect { node, agent } => format!("Expect {node} {agent}"),
        Input::Heartbeat { node, agent } => format!("Heartbeat {node} {agent}"),
        Input::Forget { node } => format!("Forget {node}"),
        Input::ConnectionLost { node, agent } => format!("ConnectionLost {node} {agent}"),
    }
}

fn show_member(phase: &Phase) -> String {
    match phase {
        Phase::Alive {
            agent,
            last_heartbeat,
        } => format!("Alive({agent}, last={})", last_heartbeat.0),
        Phase::Suspect {
            agent,
            last_heartbeat,
        } => format!("Suspect({agent}, last={})", last_heartbeat.0),
        Phase::Dead { agent } => format!("Dead({agent})"),
    }
}

fn transcript(script: Vec<(u64, Input)>) -> String {
    let mut m = Machine::new(config());
    let mut text = String::new();
    for (t, input) in script {
        let shown = show_input(&input);
        let effects = m.handle(Instant(t), input);
        m.check_invariants();
        let members: Vec<String> = m
            .members()
            .map(|(n, p)| format!("{n}={}", show_member(p)))
            .collect();
        writeln!(text, "t={t:<5} {shown}").unwrap();
        writeln!(text, "        members: {}", members.join(" ")).unwrap();
        for Effect::Changed {
            node,
            agent,
            liveness,
        } in effects
        {
            writeln!(text, "        => {node} ({agent}) is {liveness:?}").unwrap();
        }
    }
    writeln!(text, "ignored: {:?}", m.ignored()).unwrap();
    text
}

#[test]
fn alive_suspect_revived_then_dead_for_good() {
    let script = vec![
        (0, track("workers-0", "a0")),
        (500, beat("workers-0", "a0")),
        (1_400, Input::Tick),
        (1_500, Input::Tick),
        (2_000, beat("workers-0", "a0")),
        (3_000, Input::Tick),
        (5_000, Input::Tick),
        (5_100, beat("workers-0", "a0")),
        (5_200, track("workers-0", "a0")),
    ];
    insta::assert_snapshot!(transcript(script));
}

fn expect(node: &str, agent: &str) -> Input {
    Input::Expect {
        node: LogicalNodeId::from(node),
        agent: AgentId::from(agent),
    }
}

#[test]
fn an_expected_agent_is_suspect_until_heard_and_dead_after_the_grace() {
    // A restarted orchestrator expects each restored node's agent: Suspect
    // (not heard since the restart) until its first heartbeat. a0 never
    // comes back: Dead after dead_after (3 s) plus rejoin_grace (2 s). a1
    // rejoins (its track is a duplicate) and its heartbeat makes it Alive.
    let script = vec![
        (0, expect("workers-0", "a0")),
        (0, expect("workers-1", "a1")),
        (1_500, track("workers-1", "a1")),
        (1_600, beat("workers-1", "a1")),
        (2_400, beat("workers-1", "a1")),
        (3_200, beat("workers-1", "a1")),
        (4_000, beat("workers-1", "a1")),
        (4_999, Input::Tick),
        (4_999, beat("workers-1", "a1")),
        (5_000, Input::Tick),
        (5_100, beat("workers-0", "a0")),
    ];
    let text = transcript(script);
    assert!(
        text.contains(
            "t=0     Expect workers-0 a0\n        members: workers-0=Suspect(a0, last=0)"
        )
    );
    assert!(text.contains("t=1600  Heartbeat workers-1 a1\n        members: workers-0=Suspect(a0, last=0) workers-1=Alive(a1, last=1600)\n        => workers-1 (a1) is Alive"));
    assert!(text.contains("t=4999  Tick\n        members: workers-0=Suspect(a0, last=0)"));
    assert!(text.contains("t=5000  Tick\n        members: workers-0=Dead(a0)"));
    insta::assert_snapshot!(text);
}

#[test]
fn identities_unknown_nodes_capacity_and_forget() {
    let script = vec![
        (0, beat("workers-0", "a0")),
        (0, track("workers-0", "a0")),
        (0, track("workers-0", "a0")),
        (10, beat("workers-0", "impostor")),
        (15, track("workers-1", "a0")),
        (20, track("workers-1", "a1")),
        (30, track("workers-2", "a2")),
        // A new identity for a node is a new join, watched afresh.
        (40, track("workers-1", "a1-rejoined")),
        (50, beat("workers-1", "a1")),
        (
            60,
            Input::Forget {
                node: LogicalNodeId::from("workers-0"),
            },
        ),
        (
            70,
            Input::Forget {
                node: LogicalNodeId::from("workers-0"),
            },
        ),
        // Both silent timers of a member fire in one late tick, in order.
        (5_000, Input::Tick),
    ];
    insta::assert_snapshot!(transcript(script));
}

#[test]
fn past_buried_max_deaths_a_new_identity_is_refused() {
    // M6: eight identities die on one node (buried_max 8); the ninth is
    // refused rather than risk forgetting a death.
    let mut m = Machine::new(config());
    let mut t = 0;
    for i in 0..8 {
        m.handle(Instant(t), track("workers-0", &format!("a{i}")));
        t += 3_000;
        m.handle(Instant(t), Input::Tick);
        m.check_invariants();
    }
    assert!(matches!(
        m.member(&LogicalNodeId::from("workers-0")),
        Some(Phase::Dead { .. })
    ));
    assert_eq!(m.ignored().over_capacity, 0);
    let refused = m.handle(Instant(t), track("workers-0", "a8"));
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(m.ignored().over_capacity, 1);
    assert_eq!(
        m.member(&LogicalNodeId::from("workers-0"))
            .map(Phase::agent),
        Some(&AgentId::from("a7"))
    );
}

#[test]
fn a_dead_agent_is_replaced_only_by_a_new_identity() {
    let script = vec![
        (0, track("workers-0", "a0")),
        (3_000, Input::Tick),
        (3_100, beat("workers-0", "a0")),
        (3_200, track("workers-0", "a0")),
        (3_300, track("workers-0", "a0-new")),
        (3_400, beat("workers-0", "a0-new")),
    ];
    insta::assert_snapshot!(transcript(script));
}

proptest! {
    /// Determinism, the timer invariants after every step, and M5: once an
    /// identity is reported Dead it is never reported again, whatever its
    /// node went through since (re-track, another identity, forget).
    #[test]
    fn deterministic_and_death_is_sticky(steps in prop::collection::vec((0u64..800, 0u8..5, 0u8..3, 0u8..2), 0..60)) {
        let script: Vec<(u64, Input)> = steps
            .iter()
            .scan(0u64, |t, (dt, kind, node, agent)| {
                *t += dt;
                let node = format!("workers-{node}");
                let agent = format!("a{agent}");
                let input = match kind {
                    0 => Input::Tick,
                    1 => track(&node, &agent),
                    2 => beat(&node, &agent),
                    3 => expect(&node, &agent),
                    _ => Input::Forget { node: LogicalNodeId::new(node) },
                };
                Some((*t, input))
            })
            .collect();
        let a = transcript(script.clone());
        let b = transcript(script.clone());
        prop_assert_eq!(&a, &b);
        let mut m = Machine::new(config());
        let mut dead: std::collections::BTreeSet<AgentId> = Default::default();
        for (t, input) in script {
            for Effect::Changed { node, agent, liveness } in m.handle(Instant(t), input) {
                prop_assert!(!dead.contains(&agent), "{node} {agent} spoke after death");
                if liveness == Liveness::Dead {
                    dead.insert(agent);
                }
            }
            m.check_invariants();
        }
    }
}
