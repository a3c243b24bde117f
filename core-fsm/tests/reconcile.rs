//! The reconciler, scenario by scenario: each transcript line is one pass
//! (time, what the ledger holds, what the reconciler decided), and between
//! passes the world applies the decision and moves on as the test says.

mod reconcile_world;

use core_fsm::ids::GroupId;
use core_fsm::plan::{ReplacementPolicy, RunPlan, desired};
use core_fsm::reconcile::{
    self, Condition, Config, Decision, Desired, Quarantine, excluded_hosts, is_quarantined,
};
use core_fsm::{Duration, Instant};
use reconcile_world::{Outcome, World, decision_text, view, views_text};
use std::fmt::Write as _;

const NONE: Config = Config {
    replacement: ReplacementPolicy::None,
};

fn bounded(attempts_max: u32) -> Config {
    Config {
        replacement: ReplacementPolicy::Bounded {
            attempts_max,
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(8),
            quarantine_after_failures: 2,
        },
    }
}

fn want(groups: &[(&str, u32)]) -> Desired {
    Desired {
        groups: groups
            .iter()
            .map(|(g, c)| (GroupId::from(*g), *c))
            .collect(),
    }
}

fn secs(s: u64) -> Instant {
    Instant(s * 1000)
}

/// Records passes as transcript lines.
#[derive(Default)]
struct Transcript(String);

impl Transcript {
    fn note(&mut self, text: &str) {
        writeln!(self.0, "# {text}").unwrap();
    }

    fn pass(&mut self, config: &Config, want: &Desired, world: &World, now: Instant) -> Decision {
        let decision = reconcile_world::pass(config, want, world, now);
        writeln!(self.0, "{now}: {}", views_text(&world.views())).unwrap();
        writeln!(self.0, "  => {}", decision_text(&decision)).unwrap();
        decision
    }
}

#[test]
fn scale_up_from_nothing_and_then_quiescence() {
    let mut t = Transcript::default();
    let want = desired(&RunPlan::local(3));
    let mut world = World::default();
    t.note("an empty ledger: every wanted node is created, in index order");
    let d = t.pass(&NONE, &want, &world, secs(0));
    world.apply(&d);
    t.note("the same pass again before anything settles: nothing new (idempotence)");
    t.pass(&NONE, &want, &world, secs(1));
    world.settle(secs(2), |_| Outcome::Ready(1));
    t.note("all ready: quiescent");
    t.pass(&NONE, &want, &world, secs(3));
    t.note("the plan grows to 5: only the two new indexes are created");
    let d = t.pass(&NONE, &want_n("workers", 5), &world, secs(4));
    world.apply(&d);
    t.pass(&NONE, &want_n("workers", 5), &world, secs(5));
    insta::assert_snapshot!(t.0);
}

fn want_n(group: &str, count: u32) -> Desired {
    want(&[(group, count)])
}

#[test]
fn scale_down_destroys_from_the_tail() {
    let mut t = Transcript::default();
    let mut world = World::from_views(vec![
        view("workers", 0, 1, Condition::Ready),
        view("workers", 1, 1, Condition::Provisioning),
        view("workers", 2, 2, Condition::Failed { at: secs(1) }),
        view("workers", 3, 1, Condition::Ready),
        view("workers", 4, 1, Condition::Destroying),
        view("workers", 5, 1, Condition::Destroyed),
    ]);
    t.note(
        "count 1: every record at index >= 1 goes, highest first; in-flight and gone ones are left",
    );
    let d = t.pass(&bounded(3), &want_n("workers", 1), &world, secs(10));
    world.apply(&d);
    t.pass(&bounded(3), &want_n("workers", 1), &world, secs(11));
    world.settle(secs(12), |_| Outcome::Wait);
    t.note("destroys complete: quiescent");
    t.pass(&bounded(3), &want_n("workers", 1), &world, secs(13));
    t.note("the group leaves the plan: its last node goes too");
    t.pass(&bounded(3), &want(&[]), &world, secs(14));
    t.note("the group comes back at 3 (the last destroy was not applied, workers-0 stays): destroyed ids 1 and 2 are not reused (R7), so nothing is created");
    t.pass(&bounded(3), &want_n("workers", 3), &world, secs(15));
    insta::assert_snapshot!(t.0);
}

#[test]
fn mvp_policy_never_replaces() {
    let mut t = Transcript::default();
    let want = want_n("workers", 2);
    let mut world = World::default();
    let d = t.pass(&NONE, &want, &world, secs(0));
    world.apply(&d);
    world.settle(secs(5), |v| {
        if v.index == 0 {
            Outcome::Fail(1)
        } else {
            Outcome::Ready(2)
        }
    });
    t.note("workers-0 failed: with policy None it stays failed, now and much later");
    t.pass(&NONE, &want, &world, secs(6));
    t.pass(&NONE, &want, &world, secs(100_000));
    insta::assert_snapshot!(t.0);
}

#[test]
fn bounded_replacement_backs_off_and_stops_at_attempts_max() {
    let mut t = Transcript::default();
    let config = bounded(3);
    let want = want_n("workers", 1);
    let mut world = World::from_views(vec![view(
        "workers",
        0,
        1,
        Condition::Failed { at: secs(10) },
    )]);
    t.note("attempt 1 failed at 10s; backoff 5s: requeue at 15s");
    t.pass(&config, &want, &world, secs(12));
    t.note("a spurious early call changes nothing");
    t.pass(&config, &want, &world, secs(14));
    let d = t.pass(&config, &want, &world, secs(15));
    world.apply(&d);
    t.pass(&config, &want, &world, secs(15));
    world.settle(secs(20), |_| Outcome::Fail(2));
    t.note("attempt 2 failed at 20s; backoff 10s capped at 8s: requeue at 28s");
    t.pass(&config, &want, &world, secs(21));
    let d = t.pass(&config, &want, &world, secs(28));
    world.apply(&d);
    world.settle(secs(30), |_| Outcome::Fail(3));
    t.note("attempt 3 (= attempts_max) failed: it stays failed, no requeue");
    t.pass(&config, &want, &world, secs(31));
    t.pass(&config, &want, &world, secs(1000));
    insta::assert_snapshot!(t.0);
}

#[test]
fn several_failures_requeue_at_the_earliest_backoff() {
    let mut t = Transcript::default();
    let world = World::from_views(vec![
        view("a", 0, 2, Condition::Failed { at: secs(0) }),
        view("a", 1, 1, Condition::Failed { at: secs(4) }),
        view("b", 0, 1, Condition::Failed { at: secs(0) }),
        view("b", 1, 1, Condition::Ready),
    ]);
    let want = want(&[("a", 3), ("b", 1)]);
    t.note("b-0 is due, a-0 (8s) and a-1 (9s) are not; b-1 is unwanted; a-2 is missing");
    t.note("order: destroys, replaces, creates");
    t.pass(&bounded(4), &want, &world, secs(5));
    insta::assert_snapshot!(t.0);
}

#[test]
fn quarantine_excludes_hosts_that_failed_too_often() {
    let mut t = Transcript::default();
    let config = bounded(4);
    let threshold = config.quarantine_threshold().unwrap();
    let want = want_n("workers", 2);
    let mut world = World::default();
    let mut now = secs(0);
    // The provider places each new lease on the first host not excluded.
    for round in 0..6 {
        let d = t.pass(&config, &want, &world, now);
        world.apply(&d);
        let excluded = excluded_hosts(&world.quarantine, threshold);
        writeln!(t.0, "  excluded hosts: {excluded:?}").unwrap();
        let host = (1..)
            .find(|h| !excluded.contains(&reconcile_world::host_name(*h)))
            .unwrap();
        world.settle(now, |_| {
            if host == 3 {
                Outcome::Ready(host)
            } else {
                Outcome::Fail(host)
            }
        });
        now = d
            .requeue_at
            .unwrap_or(now)
            .max(now + Duration::from_secs(1));
        if round == 5 {
            t.pass(&config, &want, &world, now);
        }
    }
    assert!(is_quarantined(&world.quarantine, "host-1", threshold));
    assert!(is_quarantined(&world.quarantine, "host-2", threshold));
    assert!(!is_quarantined(&world.quarantine, "host-3", threshold));
    assert!(
        !is_quarantined(&world.quarantine, "host-1", 0),
        "threshold 0 quarantines nothing"
    );
    assert_eq!(NONE.quarantine_threshold(), None);
    insta::assert_snapshot!(t.0);
}

#[test]
fn nodes_outside_the_ledger_are_never_touched() {
    let mut t = Transcript::default();
    t.note("the provider may hold leases the ledger does not (e.g. workers-7 from a lost create);");
    t.note("the reconciler sees only ledger records and names only them, or creates wanted ids");
    let world = World::from_views(vec![view("workers", 0, 1, Condition::Ready)]);
    let d = t.pass(&bounded(2), &want_n("workers", 2), &world, secs(0));
    for action in &d.actions {
        if let reconcile::Action::Destroy { node } | reconcile::Action::Replace { node, .. } =
            action
        {
            assert!(world.nodes.contains_key(node));
        }
    }
    let empty = reconcile::reconcile(&NONE, &want(&[]), &[], &Quarantine::default(), secs(0));
    assert!(empty.is_quiescent());
    insta::assert_snapshot!(t.0);
}

#[test]
fn backoff_doubles_and_saturates() {
    let base = Duration::from_secs(1);
    let max = Duration::from_secs(60);
    let waits: Vec<u64> = (0..9)
        .map(|a| core_fsm::time::backoff(a, base, max).as_millis() / 1000)
        .collect();
    assert_eq!(waits, [1, 1, 2, 4, 8, 16, 32, 60, 60]);
    assert_eq!(core_fsm::time::backoff(u32::MAX, base, max), max);
    assert_eq!(
        core_fsm::time::backoff(200, Duration(u64::MAX / 2), Duration(u64::MAX)),
        Duration(u64::MAX)
    );
}

#[test]
#[should_panic(expected = "two node views for workers-0")]
fn duplicate_ledger_records_are_a_programmer_error() {
    let v = view("workers", 0, 1, Condition::Ready);
    reconcile::reconcile(
        &NONE,
        &want_n("workers", 1),
        &[v.clone(), v],
        &Quarantine::default(),
        secs(0),
    );
}
