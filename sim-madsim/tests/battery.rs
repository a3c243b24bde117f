//! The madsim tier's battery (simulator build only):
//! `CARGO_TARGET_DIR=target/madsim RUSTFLAGS="--cfg madsim" cargo test --release -p sim-madsim`.
//!
//! `MADSIM_BATTERY_SEEDS` sets the seeds per scenario (default 200).

#![cfg(madsim)]

use conformance::battery::{Failure, check_case};
use conformance::{Backend, NodeView, Scenario, System};
use core_fsm::Machine;
use core_fsm::plan::RunPlan;
use core_fsm::port::{Effect, Input, JournalRecord};
use core_fsm::time::Instant;
use sim_madsim::backend::{self, Real, TierTwo};
use sim_madsim::compare;
use sim_madsim::mutants::{Bug, DoubleCreate, NoIntent, NoTeardown};
use std::sync::atomic::{AtomicU64, Ordering};

fn seeds() -> u64 {
    std::env::var("MADSIM_BATTERY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

#[test]
fn every_scenario_passes_with_identical_digests_in_both_runs_of_each_seed() {
    let real = Real::default();
    let mut failed = Vec::new();
    for scenario in Scenario::ALL {
        let report = backend::battery(&real, scenario, 0..seeds(), backend::default_jobs());
        print!("{}", report.summary());
        failed.extend(report.failures().map(|v| (scenario, v.seed)));
    }
    assert!(
        failed.is_empty(),
        "failing seeds (each line above reproduces one): {failed:?}"
    );
}

#[test]
fn a_seed_runs_the_same_alone_as_in_a_batch() {
    let real = Real::default();
    let report = backend::battery(&real, Scenario::CrashStorm, 0..16, 2);
    for verdict in &report.verdicts {
        let case = conformance::generate(Scenario::CrashStorm, verdict.seed);
        let alone = real.run(&case, conformance::RunOptions::default());
        assert_eq!(
            alone.step_digests, verdict.outcome.step_digests,
            "seed {}: alone and in a batch differ",
            verdict.seed
        );
        assert!(verdict.outcome.stats.steps > 0, "seed {} ran", verdict.seed);
    }
}

#[test]
fn the_tiers_agree_on_the_real_composite_and_on_every_planted_bug() {
    let table = compare::tiers(Scenario::SmallPool, 0..50, backend::default_jobs());
    print!("{}", table.render());
    assert!(table.agrees(), "{}", table.render());
    let expected = [
        ("real", "pass"),
        (NoIntent::NAME, NoIntent::EXPECTED),
        (DoubleCreate::NAME, DoubleCreate::EXPECTED),
        (NoTeardown::NAME, NoTeardown::EXPECTED),
    ];
    for (row, (name, verdict)) in table.rows.iter().zip(expected) {
        assert_eq!((row.system, row.expected), (name, verdict));
    }
}

/// Boots counted across the whole test binary: a system that reads it is
/// not a function of its inputs, which the digest comparison must catch.
static BOOTS: AtomicU64 = AtomicU64::new(0);

/// The real composite, plus one extra log line on its fifth step in every
/// other boot.
struct Flaky {
    inner: sim::system::Composite,
    odd: bool,
    steps: u32,
}

impl Machine for Flaky {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        self.steps += 1;
        let mut effects = self.inner.handle(now, input);
        if self.odd && self.steps == 5 {
            effects.push(Effect::RevokeJoin(core_fsm::port::JoinBinding {
                run_id: core_fsm::ids::RunId(0),
                node: core_fsm::ids::LogicalNodeId::from("nobody"),
                lease_id: core_fsm::ids::LeaseId::from("none"),
            }));
        }
        effects
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.inner.next_deadline()
    }

    fn check_invariants(&self) {
        self.inner.check_invariants();
    }
}

impl System for Flaky {
    fn boot(plan: &RunPlan, seed: u64) -> Self {
        Flaky {
            inner: sim::system::Composite::boot(plan, seed),
            odd: BOOTS.fetch_add(1, Ordering::SeqCst) % 2 == 1,
            steps: 0,
        }
    }

    fn restore(plan: &RunPlan, seed: u64, journal: &[JournalRecord]) -> Self {
        Flaky {
            inner: sim::system::Composite::restore(plan, seed, journal),
            odd: false,
            steps: 5,
        }
    }

    fn visit_nodes(&self, visit: &mut dyn FnMut(NodeView<'_>)) {
        self.inner.visit_nodes(visit);
    }

    fn is_settled(&self) -> bool {
        self.inner.is_settled()
    }

    fn is_torn_down(&self) -> bool {
        self.inner.is_torn_down()
    }
}

#[test]
fn a_divergence_between_the_two_runs_names_its_first_step() {
    let flaky = TierTwo::<Flaky>::default();
    let case = conformance::generate(Scenario::Standard, 3);
    let (_, failure) = check_case(&flaky, &case);
    match failure {
        // Step index 4 is the fifth step, where the odd boot differs.
        Some(Failure::Diverged { step, .. }) => assert_eq!(step, 4),
        other => panic!("expected a divergence, got {other:?}"),
    }
}
