//! The composite's pipeline host: a join on the node's lease is tracked by
//! membership, membership's Dead fails the node in the same step (and the
//! reconciler replaces it), a verdict that comes before the node is at
//! rest fails it the moment it would be ready (O11), and a composite
//! without a host counts what is meant for one.

mod orchestrator_harness;

use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::membership::{self, Liveness};
use core_fsm::node::Lifecycle;
use core_fsm::pipeline;
use core_fsm::port::{Effect, Input};
use orchestrator_harness::{Harness, bounded_plan, joined};

fn id(node: &str) -> LogicalNodeId {
    LogicalNodeId::from(node)
}

fn watched() -> Harness {
    Harness::with_pipeline(bounded_plan(), membership::Config::default())
}

fn liveness(h: &Harness, node: &str) -> Option<(AgentId, Liveness)> {
    let host = h.orchestrator.pipeline().expect("a pipeline host");
    let member = host.membership().member(&id(node))?;
    Some((member.agent().clone(), member.liveness()))
}

fn beat(node: &str, agent: &str) -> Input {
    Input::Pipeline(Box::new(pipeline::Input::Membership(
        membership::Input::Heartbeat {
            node: id(node),
            agent: AgentId::from(agent),
        },
    )))
}

fn stage(h: &Harness, node: &str) -> Lifecycle {
    h.orchestrator
        .node(&id(node))
        .expect("a ledger node")
        .stage()
}

/// Up to the join: lease, endpoint, bootstrap, waiting for the agent.
fn to_join(h: &mut Harness) {
    h.at(0, Input::Start);
    h.grant(1_000, "workers-0", 123, true);
    h.bootstrap_to_join(1_100, "workers-0");
}

#[test]
fn a_handed_off_agent_is_watched_and_its_death_fails_and_replaces_the_node() {
    let mut h = watched();
    to_join(&mut h);
    h.join_and_close(2_000, "workers-0", 123, "agent-a");
    assert!(h.orchestrator.node(&id("workers-0")).unwrap().is_ready());
    assert_eq!(
        liveness(&h, "workers-0"),
        Some((AgentId::from("agent-a"), Liveness::Alive))
    );
    h.note("heartbeats keep it Alive past dead_after");
    for t in (5_000..=20_000).step_by(4_000) {
        h.at(t, beat("workers-0", "agent-a"));
    }
    h.at(21_000, Input::Tick);
    assert_eq!(liveness(&h, "workers-0").unwrap().1, Liveness::Alive);
    h.note("silence: Suspect after 5 s, Dead after 15 s; the node fails at once");
    h.tick();
    assert_eq!(liveness(&h, "workers-0").unwrap().1, Liveness::Suspect);
    let effects = h.tick();
    assert_eq!(liveness(&h, "workers-0").unwrap().1, Liveness::Dead);
    let dead = effects.iter().position(|e| {
        matches!(e, Effect::Pipeline(p) if matches!(**p,
            pipeline::Effect::Liveness { liveness: Liveness::Dead, .. }))
    });
    let failed = effects.iter().position(|e| {
        matches!(e, Effect::NodeChanged { stage: Lifecycle::Failed, failed_reason: Some(r), .. }
            if r == core_fsm::orchestrator::DEAD_REASON)
    });
    assert!(
        dead.is_some() && failed > dead,
        "the verdict, then the node's failure, in one step: {effects:?}"
    );
    h.note("the backoff expires: the dead lease is destroyed, a new one asked for");
    h.tick();
    assert!(h.destroy("vastai:123").0 > 0);
    assert_eq!(stage(&h, "workers-0"), Lifecycle::Destroying);
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn a_verdict_before_the_node_is_at_rest_fails_it_when_it_would_be_ready() {
    let mut h = watched();
    to_join(&mut h);
    h.at(2_000, joined("workers-0", 123, "agent-a"));
    assert_eq!(stage(&h, "workers-0"), Lifecycle::AgentJoined);
    h.note("the session never closes SSH; the agent falls silent");
    h.tick();
    h.tick();
    assert_eq!(liveness(&h, "workers-0").unwrap().1, Liveness::Dead);
    assert_eq!(
        stage(&h, "workers-0"),
        Lifecycle::AgentJoined,
        "a node not at rest ignores the loss"
    );
    let session = h.session("workers-0");
    let now = h.now.0;
    h.at(now + 100, Input::SshClosed { op: h.ssh(session) });
    assert_eq!(
        stage(&h, "workers-0"),
        Lifecycle::Failed,
        "O11: never ready with a Dead agent"
    );
    let record = h.orchestrator.node(&id("workers-0")).unwrap().record();
    assert_eq!(
        record.failed_reason.as_deref(),
        Some(core_fsm::orchestrator::DEAD_REASON)
    );
}

#[test]
fn only_an_agent_on_the_nodes_current_lease_is_watched() {
    let mut h = watched();
    to_join(&mut h);
    h.note("a join for another lease of the node is ignored and not watched");
    h.at(2_000, joined("workers-0", 999, "agent-stale"));
    assert_eq!(liveness(&h, "workers-0"), None);
    h.at(2_100, joined("workers-0", 123, "agent-a"));
    assert_eq!(
        liveness(&h, "workers-0").unwrap().0,
        AgentId::from("agent-a")
    );
    h.note("a heartbeat of an identity nobody tracks changes nothing");
    h.at(2_200, beat("workers-0", "agent-other"));
    assert_eq!(
        liveness(&h, "workers-0").unwrap().0,
        AgentId::from("agent-a")
    );
}

#[test]
fn a_composite_without_a_host_counts_pipeline_inputs_and_watches_nobody() {
    let mut h = Harness::new(bounded_plan());
    to_join(&mut h);
    h.join_and_close(2_000, "workers-0", 123, "agent-a");
    assert!(h.orchestrator.pipeline().is_none());
    let effects = h.at(2_100, beat("workers-0", "agent-a"));
    assert!(effects.is_empty());
    assert_eq!(h.orchestrator.counters().no_pipeline, 1);
    h.note("no membership: an hour of silence leaves the node ready");
    h.at(3_600_000, Input::Tick);
    assert!(h.orchestrator.node(&id("workers-0")).unwrap().is_ready());
}
