//! The two tiers side by side. The same cases (scenario, seeds) run in
//! tier 1 and here, against the real composite and the planted bugs; a
//! seed's verdict is `pass` or the id of the first invariant that broke.
//! This tier runs twice: without its own network chaos (only the kit's
//! faults, the fairest comparison) and with it.
//!
//! The trajectories differ between the tiers (the network delays and
//! reorders), so a planted bug can break a different invariant first, or
//! not be reached at all, on a few seeds. The tiers agree when, per class of
//! seeds (scenario, system): the real composite passes every seed in every
//! run; each planted bug's verdict in every run is dominated by its
//! expected invariant, and at least 90% of the seeds get the same verdict
//! in all three runs. Every seed whose verdicts differ is listed.

use crate::backend::TierTwo;
use crate::chaos::Level;
use crate::mutants::{Bug, DoubleCreate, NoIntent, NoTeardown, Planted};
use conformance::battery::check_case;
use conformance::{Backend, Scenario, System};
use sim::backend::TierOne;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

/// One system's verdicts in the three runs.
#[derive(Debug)]
pub struct Row {
    /// The system.
    pub system: &'static str,
    /// The verdict the system must get (`pass` for the real composite).
    pub expected: &'static str,
    /// Verdict per seed: tier 1, madsim without chaos, madsim with chaos.
    pub verdicts: Vec<(u64, [String; 3])>,
    /// Seeds per second of each run (each seed ran twice when it passed).
    pub rates: [f64; 3],
}

impl Row {
    /// Seeds whose verdicts differ.
    pub fn disagreements(&self) -> Vec<&(u64, [String; 3])> {
        self.verdicts
            .iter()
            .filter(|(_, v)| v[0] != v[1] || v[0] != v[2])
            .collect()
    }

    /// Share of seeds with one verdict in all three runs, in percent.
    pub fn agreement_percent(&self) -> u64 {
        let same = self.verdicts.len() - self.disagreements().len();
        (same * 100 / self.verdicts.len().max(1)) as u64
    }

    /// The most common verdict of run `run` (ties: the smaller name).
    pub fn dominant(&self, run: usize) -> &str {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, v) in &self.verdicts {
            *counts.entry(v[run].as_str()).or_default() += 1;
        }
        let best = counts.values().copied().max().unwrap_or(0);
        counts
            .into_iter()
            .find(|(_, n)| *n == best)
            .map_or("", |(k, _)| k)
    }

    /// The class rule of the module docs.
    pub fn agrees(&self) -> bool {
        if self.expected == "pass" {
            return self
                .verdicts
                .iter()
                .all(|(_, v)| v.iter().all(|x| x == "pass"));
        }
        (0..3).all(|run| self.dominant(run) == self.expected) && self.agreement_percent() >= 90
    }
}

/// The comparison of one scenario.
#[derive(Debug)]
pub struct Table {
    /// The scenario.
    pub scenario: Scenario,
    /// One row per system.
    pub rows: Vec<Row>,
}

impl Table {
    /// Whether every class agrees (see the module docs).
    pub fn agrees(&self) -> bool {
        self.rows.iter().all(Row::agrees)
    }

    /// Verdict counts per run, seeds/s per run, and every disagreement.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "tiers compared on {}:", self.scenario.name());
        let _ = writeln!(
            out,
            "  {:<14} {:<28} {:<28} {:<28}",
            "system", "tier 1", "madsim (no chaos)", "madsim (chaos)"
        );
        for row in &self.rows {
            let mut cells = Vec::new();
            for (tier, rate) in row.rates.iter().enumerate() {
                let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
                for (_, v) in &row.verdicts {
                    *counts.entry(v[tier].as_str()).or_default() += 1;
                }
                let counts: Vec<String> = counts.iter().map(|(k, n)| format!("{k}:{n}")).collect();
                cells.push(format!("{} ({rate:.0}/s)", counts.join(" ")));
            }
            let _ = writeln!(
                out,
                "  {:<14} {:<28} {:<28} {:<28} same verdict on {}% of seeds, expected {}: {}",
                row.system,
                cells[0],
                cells[1],
                cells[2],
                row.agreement_percent(),
                row.expected,
                if row.agrees() { "agree" } else { "DISAGREE" }
            );
            for (seed, v) in row.disagreements() {
                let _ = writeln!(
                    out,
                    "    differs: {} seed {seed}: tier 1 {}, madsim {}, madsim+chaos {}",
                    row.system, v[0], v[1], v[2]
                );
            }
        }
        let verdict = if self.agrees() { "agree" } else { "DISAGREE" };
        let _ = writeln!(out, "  the tiers {verdict}");
        out
    }
}

/// Verdict of one seed in one backend: `pass` or the broken invariant.
fn verdicts(
    backend: &dyn Backend,
    scenario: Scenario,
    seeds: &[u64],
    jobs: usize,
) -> (Vec<String>, f64) {
    let started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut found: Vec<(usize, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&seed) = seeds.get(i) else { break };
                        let case = conformance::generate(scenario, seed);
                        let failure = check_case(backend, &case).1;
                        let verdict = failure.map_or("pass".to_owned(), |f| f.id().to_owned());
                        done.push((i, verdict));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a comparison worker panicked"))
            .collect()
    });
    found.sort();
    let rate = seeds.len() as f64 / started.elapsed().as_secs_f64().max(1e-9);
    (found.into_iter().map(|(_, v)| v).collect(), rate)
}

fn row<S: System + 'static>(
    name: &'static str,
    expected: &'static str,
    scenario: Scenario,
    seeds: &[u64],
    jobs: usize,
) -> Row {
    let (one, r1) = verdicts(&TierOne::<S>::default(), scenario, seeds, jobs);
    let (calm, r2) = verdicts(&TierTwo::<S>::new(Level::Off), scenario, seeds, jobs);
    let (wild, r3) = verdicts(&TierTwo::<S>::new(Level::On), scenario, seeds, jobs);
    let verdicts = seeds
        .iter()
        .enumerate()
        .map(|(i, seed)| (*seed, [one[i].clone(), calm[i].clone(), wild[i].clone()]))
        .collect();
    Row {
        system: name,
        expected,
        verdicts,
        rates: [r1, r2, r3],
    }
}

fn planted<B: Bug>(scenario: Scenario, seeds: &[u64], jobs: usize) -> Row {
    row::<Planted<B>>(B::NAME, B::EXPECTED, scenario, seeds, jobs)
}

/// Runs the real composite and every planted bug in both tiers.
pub fn tiers(scenario: Scenario, seeds: impl IntoIterator<Item = u64>, jobs: usize) -> Table {
    let seeds: Vec<u64> = seeds.into_iter().collect();
    let rows = vec![
        row::<sim::system::Composite>("real", "pass", scenario, &seeds, jobs),
        planted::<NoIntent>(scenario, &seeds, jobs),
        planted::<DoubleCreate>(scenario, &seeds, jobs),
        planted::<NoTeardown>(scenario, &seeds, jobs),
    ];
    Table { scenario, rows }
}
