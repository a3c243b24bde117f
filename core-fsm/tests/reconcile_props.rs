//! Reconciler properties over generated ledgers: it acts only on recorded
//! nodes or wanted ids, a decision applied and re-reconciled is a no-op, and
//! repeated passes against a scripted world converge within a bound.

mod reconcile_world;

use core_fsm::ids::GroupId;
use core_fsm::plan::{ReplacementPolicy, node_id};
use core_fsm::reconcile::{
    Action, Condition, Config, Desired, NodeView, excluded_hosts, is_quarantined, reconcile,
};
use core_fsm::rng::DetRng;
use core_fsm::{Duration, Instant};
use proptest::prelude::*;
use reconcile_world::{Outcome, World, view};
use std::collections::BTreeMap;

const GROUPS: [&str; 3] = ["a", "b", "c"];

fn config() -> impl Strategy<Value = Config> {
    let bounded = (1u32..=4, 1u64..=5, 1u64..=8, 1u32..=3).prop_map(|(attempts, base, mult, q)| {
        ReplacementPolicy::Bounded {
            attempts_max: attempts,
            backoff_base: Duration::from_secs(base),
            backoff_max: Duration::from_secs(base * mult),
            quarantine_after_failures: q,
        }
    });
    prop_oneof![Just(ReplacementPolicy::None), bounded]
        .prop_map(|replacement| Config { replacement })
}

fn desired() -> impl Strategy<Value = Desired> {
    proptest::collection::vec(proptest::option::of(0u32..=4), 3).prop_map(|counts| Desired {
        groups: GROUPS
            .iter()
            .zip(counts)
            .filter_map(|(g, c)| c.map(|c| (GroupId::from(*g), c)))
            .collect(),
    })
}

fn condition() -> impl Strategy<Value = Condition> {
    prop_oneof![
        Just(Condition::Provisioning),
        Just(Condition::Ready),
        (0u64..=60).prop_map(|s| Condition::Failed {
            at: Instant(s * 1000)
        }),
        Just(Condition::Destroying),
        Just(Condition::Destroyed),
    ]
}

/// Up to 6 records per group, each slot present or not.
fn ledger() -> impl Strategy<Value = Vec<NodeView>> {
    proptest::collection::vec(proptest::option::of((1u32..=5, condition())), 18).prop_map(|slots| {
        slots
            .into_iter()
            .enumerate()
            .filter_map(|(i, slot)| {
                let (attempt, condition) = slot?;
                Some(view(GROUPS[i / 6], (i % 6) as u32, attempt, condition))
            })
            .collect()
    })
}

fn attempts_max(config: &Config) -> Option<u32> {
    match config.replacement {
        ReplacementPolicy::None => None,
        ReplacementPolicy::Bounded { attempts_max, .. } => Some(attempts_max),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(512)
    })]

    /// R1, R2, R8: only recorded nodes are destroyed or replaced, only wanted
    /// unrecorded ids are created, each node at most once, in the fixed order.
    #[test]
    fn acts_only_on_known_nodes(config in config(), want in desired(), nodes in ledger(), now in 0u64..=120) {
        let world = World::from_views(nodes.clone());
        let now = Instant(now * 1000);
        let d = reconcile(&config, &want, &nodes, &world.quarantine, now);
        prop_assert_eq!(&d, &reconcile(&config, &want, &nodes, &world.quarantine, now));
        let mut named = std::collections::BTreeSet::new();
        let mut last_kind = 0;
        for action in &d.actions {
            let (kind, node) = match action {
                Action::Destroy { node } => (0, node.clone()),
                Action::Replace { node, attempt } => {
                    let v = &world.nodes[node];
                    let failed = matches!(v.condition, Condition::Failed { .. });
                    prop_assert!(failed, "replace of a node that has not failed");
                    prop_assert_eq!(*attempt, v.attempt + 1);
                    prop_assert!(Some(v.attempt) < attempts_max(&config));
                    prop_assert!(v.index < want.groups[&v.group]);
                    (1, node.clone())
                }
                Action::Create { group, index } => {
                    prop_assert!(*index < want.groups[group]);
                    let node = node_id(group, *index);
                    prop_assert!(!world.nodes.contains_key(&node));
                    (2, node)
                }
            };
            if kind < 2 {
                prop_assert!(world.nodes.contains_key(&node), "{node} is not in the ledger");
            }
            prop_assert!(kind >= last_kind, "actions out of order: {:?}", d.actions);
            last_kind = kind;
            prop_assert!(named.insert(node.clone()), "{node} named twice");
        }
        if let Some(at) = d.requeue_at {
            prop_assert!(at > now);
        }
    }

    /// R9: applying a decision and reconciling again with the world otherwise
    /// unchanged yields no actions and the same requeue time.
    #[test]
    fn applied_decision_is_a_fixed_point(config in config(), want in desired(), nodes in ledger(), now in 0u64..=120) {
        let mut world = World::from_views(nodes);
        let now = Instant(now * 1000);
        let first = reconcile_world::pass(&config, &want, &world, now);
        world.apply(&first);
        let second = reconcile_world::pass(&config, &want, &world, now);
        prop_assert!(second.actions.is_empty(), "second pass acted: {:?}", second.actions);
        prop_assert_eq!(second.requeue_at, first.requeue_at);
    }

    /// R10: against a world whose provisioning succeeds, fails or stalls per
    /// a seeded script, repeated passes converge within a bounded number of
    /// passes: every wanted node Ready or finally Failed, every unwanted one
    /// Destroyed.
    #[test]
    fn repeated_passes_converge(config in config(), want in desired(), nodes in ledger(), seed in any::<u64>()) {
        // R7: a wanted id already being destroyed is not reused.
        let initially_destroyed: Vec<_> = nodes.iter()
            .filter(|v| matches!(v.condition, Condition::Destroying | Condition::Destroyed))
            .map(|v| v.node.clone())
            .collect();
        let mut world = World::from_views(nodes);
        let script_rng = DetRng::new(seed);
        let mut passes_seen: BTreeMap<(String, u32), u64> = BTreeMap::new();
        let attempts = u64::from(attempts_max(&config).unwrap_or(1));
        let passes_max = 10 + 8 * attempts * 18;
        let mut now = Instant(60_000);
        let mut passes = 0;
        loop {
            prop_assert!(passes < passes_max, "no convergence after {passes} passes");
            passes += 1;
            let d = reconcile_world::pass(&config, &want, &world, now);
            let settled = world.nodes.values().all(|v| {
                !matches!(v.condition, Condition::Provisioning | Condition::Destroying)
            });
            if d.is_quiescent() && settled {
                break;
            }
            world.apply(&d);
            world.settle(now, |v| {
                let key = (v.node.to_string(), v.attempt);
                let seen = passes_seen.entry(key).or_insert(0);
                *seen += 1;
                let mut rng = script_rng.derive(u64::from(v.attempt) << 32 ^ u64::from(v.index) << 8 ^ v.group.as_str().as_bytes()[0] as u64);
                let waits = rng.below(3);
                let host = rng.below(4) as u8;
                if *seen <= waits { Outcome::Wait }
                else if rng.ratio(1, 2) { Outcome::Ready(host) }
                else { Outcome::Fail(host) }
            });
            now = match d.requeue_at {
                Some(at) if d.actions.is_empty() && settled => at,
                _ => now + Duration::from_secs(1),
            };
        }
        for v in world.nodes.values() {
            let wanted = want.groups.get(&v.group).is_some_and(|c| v.index < *c);
            let done = match v.condition {
                Condition::Ready => wanted,
                Condition::Failed { .. } => wanted && attempts_max(&config).is_none_or(|m| v.attempt >= m),
                Condition::Destroyed => !wanted || initially_destroyed.contains(&v.node),
                _ => false,
            };
            prop_assert!(done, "{} ended {:?} (wanted: {wanted})", v.node, v.condition);
        }
        for (group, count) in &want.groups {
            for index in 0..*count {
                prop_assert!(world.nodes.contains_key(&node_id(group, index)));
            }
        }
    }

    /// The quarantine helpers agree with each other.
    #[test]
    fn excluded_hosts_are_exactly_the_quarantined(failures in proptest::collection::btree_map(0u8..8, 0u32..5, 0..8), threshold in 0u32..4) {
        let mut world = World::default();
        for (host, n) in &failures {
            for _ in 0..*n {
                world.quarantine.record_failure(&reconcile_world::host_name(*host));
            }
        }
        let excluded = excluded_hosts(&world.quarantine, threshold);
        for host in 0u8..8 {
            let name = reconcile_world::host_name(host);
            let expected = threshold > 0 && failures.get(&host).is_some_and(|n| *n >= threshold);
            prop_assert_eq!(is_quarantined(&world.quarantine, &name, threshold), expected);
            prop_assert_eq!(excluded.contains(&name), expected);
        }
    }
}
