//! The operator's `SetDesired { group, count }` (the dashboard's +1 / -1):
//! a group grows by a new node the reconciler creates, shrinks from its
//! tail, refuses what it cannot do, and a restart resumes the same pool.

mod orchestrator_harness;

use core_fsm::ids::{GroupId, LogicalNodeId};
use core_fsm::node::Lifecycle;
use core_fsm::orchestrator::ScaleRefusal;
use core_fsm::plan::RunPlan;
use core_fsm::port::{Effect, Input, JournalRecord};
use orchestrator_harness::Harness;

fn id(node: &str) -> LogicalNodeId {
    LogicalNodeId::from(node)
}

fn workers() -> GroupId {
    GroupId::from("workers")
}

fn scale(count: u32) -> Input {
    Input::SetDesired {
        group: workers(),
        count,
    }
}

/// Brings `node` from its create to Dormant on lease `contract`.
fn bring_up(h: &mut Harness, ms: u64, node: &str, contract: u32) {
    h.grant(ms, node, contract, true);
    h.bootstrap_to_join(ms + 100, node);
    h.join_and_close(ms + 200, node, contract, &format!("agent-{contract}"));
    assert!(
        h.orchestrator.node(&id(node)).unwrap().is_ready(),
        "{node} ready"
    );
}

fn stage(h: &Harness, node: &str) -> Lifecycle {
    h.orchestrator
        .node(&id(node))
        .expect("a ledger node")
        .stage()
}

fn creates_of(h: &Harness, node: &str) -> Vec<core_fsm::ids::Nonce> {
    (h.effects.iter())
        .filter_map(|e| match e {
            Effect::CreateLease { request, .. } if request.node.as_str() == node => {
                Some(request.nonce)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn set_desired_grows_shrinks_refuses_and_survives_a_restart() {
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    bring_up(&mut h, 1_000, "workers-0", 100);
    bring_up(&mut h, 2_000, "workers-1", 101);

    h.note("+1: the count is journaled, then the reconciler creates workers-2");
    let effects = h.at(3_000, scale(3));
    assert_eq!(
        effects.first(),
        Some(&Effect::Persist(JournalRecord::DesiredSet {
            group: workers(),
            count: 3
        })),
        "the count is journaled before anything it causes"
    );
    assert_eq!(creates_of(&h, "workers-2").len(), 1);
    bring_up(&mut h, 3_100, "workers-2", 102);
    assert_eq!(h.orchestrator.desired_count(&workers()), Some(3));

    h.note("refused: above the group limit, an unknown group; counted, nothing journaled");
    let ignored = h.orchestrator.counters().ignored_commands;
    assert!(h.at(4_000, scale(5_000)).is_empty());
    let unknown = Input::SetDesired {
        group: GroupId::from("nope"),
        count: 1,
    };
    assert_eq!(
        h.orchestrator.scale_refusal(&GroupId::from("nope"), 1),
        Some(ScaleRefusal::UnknownGroup)
    );
    assert!(h.at(4_010, unknown).is_empty());
    assert_eq!(h.orchestrator.counters().ignored_commands, ignored + 2);
    h.note("the same count again changes nothing");
    assert!(h.at(4_020, scale(3)).is_empty());

    h.note("-1: the tail node's lease is destroyed");
    h.at(5_000, scale(2));
    assert_eq!(stage(&h, "workers-2"), Lifecycle::Destroying);
    h.note("+1 while it is still going is refused");
    assert_eq!(
        h.orchestrator.scale_refusal(&workers(), 3),
        Some(ScaleRefusal::StillGoing(id("workers-2")))
    );
    assert!(h.at(5_010, scale(3)).is_empty());
    let destroy = h.destroy("vastai:102");
    h.at(
        5_100,
        Input::LeaseDestroyed {
            op: destroy,
            result: Ok(()),
        },
    );
    assert_eq!(stage(&h, "workers-2"), Lifecycle::Destroyed);
    let destroys = (h.effects.iter())
        .filter(|e| matches!(e, Effect::DestroyLease { lease, .. } if lease.lease_id.as_str() == "vastai:102"))
        .count();
    assert_eq!(destroys, 1, "the lease is destroyed once");
    assert_eq!(stage(&h, "workers-0"), Lifecycle::Dormant);
    assert_eq!(stage(&h, "workers-1"), Lifecycle::Dormant);

    h.note("+1 again: a new workers-2, with a nonce of its own");
    h.at(6_000, scale(3));
    let nonces = creates_of(&h, "workers-2");
    assert_eq!(nonces.len(), 2);
    assert_ne!(nonces[0], nonces[1], "a new node draws a new nonce");
    bring_up(&mut h, 6_100, "workers-2", 103);

    h.note("+1 past the plan's first count: workers-3, then a restart");
    h.at(7_000, scale(4));
    bring_up(&mut h, 7_100, "workers-3", 104);
    let journal = h.journal();
    insta::assert_snapshot!(h.transcript);

    let mut r = Harness::restore(RunPlan::example_two_workers(), &journal);
    assert_eq!(r.orchestrator.desired_count(&workers()), Some(4));
    let ids: Vec<String> = r
        .orchestrator
        .nodes()
        .map(|n| n.record().node().to_string())
        .collect();
    assert_eq!(ids, ["workers-0", "workers-1", "workers-2", "workers-3"]);
    assert!(
        r.orchestrator
            .nodes()
            .all(|n| n.stage() == Lifecycle::Dormant)
    );
    r.at(0, Input::Start);
    assert!(
        r.effects
            .iter()
            .all(|e| !matches!(e, Effect::CreateLease { .. } | Effect::DestroyLease { .. })),
        "the restored pool is the journaled one: nothing created or destroyed"
    );
    r.at(10, Input::Teardown);
    let destroyed: Vec<&str> = (r.effects.iter())
        .filter_map(|e| match e {
            Effect::DestroyLease { lease, .. } => Some(lease.lease_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        destroyed,
        ["vastai:100", "vastai:101", "vastai:103", "vastai:104"]
    );
}

#[test]
fn a_restart_between_a_re_grow_and_its_create_creates_the_node() {
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    bring_up(&mut h, 1_000, "workers-0", 100);
    bring_up(&mut h, 2_000, "workers-1", 101);
    h.at(3_000, scale(1));
    let destroy = h.destroy("vastai:101");
    h.at(
        3_100,
        Input::LeaseDestroyed {
            op: destroy,
            result: Ok(()),
        },
    );
    assert_eq!(stage(&h, "workers-1"), Lifecycle::Destroyed);
    // The count is journaled; the crash comes before its create.
    let mut journal = h.journal();
    journal.push(JournalRecord::DesiredSet {
        group: workers(),
        count: 2,
    });
    let mut r = Harness::restore(RunPlan::example_two_workers(), &journal);
    assert_eq!(r.orchestrator.desired_count(&workers()), Some(2));
    assert_eq!(
        stage(&r, "workers-1"),
        Lifecycle::New,
        "its old story forgotten"
    );
    r.at(0, Input::Start);
    assert_eq!(
        creates_of(&r, "workers-1").len(),
        1,
        "created anew on Start"
    );
    assert_eq!(stage(&r, "workers-1"), Lifecycle::LeaseRequested);
}
