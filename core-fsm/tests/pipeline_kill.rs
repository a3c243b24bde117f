//! The operator's kill drill through the pipeline host: only an agent
//! membership holds Alive or Suspect is killed (`KillAgent` names the
//! tracked identity); an unknown node or a Dead agent is ignored and
//! counted. The death that follows is membership's, as after any crash.

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::membership::{self, Liveness};
use core_fsm::pipeline::{Effect, Input, Machine};
use core_fsm::time::{Duration, Instant};

fn host() -> Machine {
    Machine::new(membership::Config {
        suspect_after: Duration::from_secs(2),
        dead_after: Duration::from_secs(5),
        ..membership::Config::default()
    })
}

fn step(m: &mut Machine, t: u64, input: Input) -> Vec<Effect> {
    let out = m.handle(Instant(t), input);
    m.check_invariants();
    out
}

fn kill(node: &str) -> Input {
    Input::Kill {
        node: LogicalNodeId::from(node),
    }
}

#[test]
fn a_kill_names_the_tracked_agent_and_its_death_comes_from_silence() {
    let mut m = host();
    let (node, agent) = (LogicalNodeId::from("workers-1"), AgentId::from("agent-1"));
    // Nobody tracked yet: ignored.
    assert!(step(&mut m, 0, kill("workers-1")).is_empty());
    assert_eq!(m.ignored().kill_not_alive, 1);
    let track = membership::Input::Track {
        node: node.clone(),
        agent: agent.clone(),
    };
    step(&mut m, 0, Input::Membership(track));
    assert_eq!(
        step(&mut m, 100, kill("workers-1")),
        [Effect::KillAgent {
            node: node.clone(),
            agent: agent.clone()
        }]
    );
    // The kill itself changes nothing: the agent is still Alive until its
    // silence says otherwise.
    assert_eq!(
        m.membership().member(&node).unwrap().liveness(),
        Liveness::Alive
    );
    // Ticks on time (a late one would be the observer's, M9).
    step(&mut m, 2_000, Input::Tick);
    let died = step(&mut m, 5_000, Input::Tick);
    assert!(
        died.iter().any(|e| matches!(
            e,
            Effect::Liveness {
                liveness: Liveness::Dead,
                ..
            }
        )),
        "{died:?}"
    );
    // Dead: a second kill is ignored.
    assert!(step(&mut m, 5_100, kill("workers-1")).is_empty());
    assert_eq!(m.ignored().kill_not_alive, 2);
}
