//! The run phase under madsim (tier 2): the same run cases as tier 1's
//! run world, played through the real effect loop. The orchestrator's
//! pipeline host (run and membership) and every stage's agent each run in
//! a `driver::Driver` on a madsim node of their own; control frames,
//! activation edges and token edges are madsim streams, so madsim's
//! latency, partitions and kills act on them; the workers run tier 1's
//! stand-in model, and tier 1's oracle judges every transition. The
//! orchestrator's node drives the composite (`core_fsm::orchestrator`),
//! which provisions the nodes, starts their agents and owns the pipeline
//! host, as `drover up` drives it.
//!
//! Of the run fault alphabet this tier plays the faults its effect sides
//! can carry out ([`SUPPORTED`]: worker crashes, failed and slow steps,
//! lost and duplicated provisions, agent deaths in every phase, the
//! operator's kill, an orchestrator crash in every run phase); the rest
//! act on single messages and are tier 1's. It adds its own: a stage's
//! node cut off from everything for a while (`partition`), and latency on
//! every hop. A node's death kills its madsim node; membership declares
//! it Dead, the composite fails the node and, under a repairing profile
//! (`Bounded`), replaces it: a new lease, a new node, a new identity.

mod agent;
mod host;
mod net;
mod seen;
mod shared;
mod supervisor;
mod worker;

use conformance::battery::Failure;
use conformance::coverage::Coverage;
use conformance::run::{RunCase, RunFault, RunScenario, generate_run};
use conformance::{RunOptions, RunOutcome};
use shared::{Shared, Slot, State};
use sim::run_world::kit::{RunOracle, fatal, fault_index};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The scenario's name in `cargo xtask sim --madsim`.
pub const SCENARIO: &str = "pipeline";

/// The run faults this tier plays.
pub const SUPPORTED: [RunFault; 14] = [
    RunFault::WorkerCrashLoad,
    RunFault::WorkerCrashStep,
    RunFault::StepFails,
    RunFault::SlowStage,
    RunFault::ProvisionLost,
    RunFault::ProvisionDuplicated,
    RunFault::AgentDiesBeforeLoad,
    RunFault::AgentDiesLoading,
    RunFault::AgentDiesLoaded,
    RunFault::AgentDiesMidRequest,
    RunFault::OperatorKill,
    RunFault::OrchestratorCrash,
    RunFault::ReplacementCreateFails,
    RunFault::ReplacementBootFails,
];

/// The case of `seed`: tier 1's serving, repair and fatal scenarios in
/// turn, keeping the faults this tier plays.
pub fn generate(seed: u64) -> RunCase {
    let scenario = RunScenario::ALL[(seed % RunScenario::ALL.len() as u64) as usize];
    let mut case = generate_run(scenario, seed);
    case.items.retain(|i| SUPPORTED.contains(&i.fault));
    let enabled = case.enabled();
    case.profile
        .rates
        .retain(|(name, _)| enabled.contains(name.as_str()));
    case
}

/// The one command that runs seed `seed` of this tier's run scenario.
pub fn reproduce_line(seed: u64) -> String {
    crate::reproduce_line(SCENARIO, seed)
}

/// Runs `case` once in a fresh madsim runtime, on a thread of its own.
pub fn run_case(case: &RunCase, options: RunOptions) -> RunOutcome {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(format!("madsim-run-{}", case.seed))
            .spawn_scoped(scope, || run_here(case, options))
            .expect("a thread can be spawned")
            .join()
            .unwrap_or_else(|_| panic!("the madsim run world of seed {} panicked", case.seed))
    })
}

fn run_here(case: &RunCase, options: RunOptions) -> RunOutcome {
    let p = &case.profile;
    let mut config = madsim::Config::default();
    let hop = (p.latency_ms / 4).max(1);
    config.net.send_latency =
        Duration::from_millis(hop)..Duration::from_millis((p.latency_ms / 2).max(hop) + 1);
    let mut faults: BTreeMap<RunFault, Vec<(u32, u64)>> = BTreeMap::new();
    for item in &case.items {
        faults
            .entry(item.fault)
            .or_default()
            .push((item.target, item.arg));
    }
    let stages = p.stages.max(1);
    let slot = Slot {
        generation: 0,
        starts: 0,
        lease: None,
        incarnation: 0,
        alive: false,
        agent: None,
        stage_steps: 0,
    };
    let state = State {
        case: case.clone(),
        faults: fault_index(case),
        fired: Default::default(),
        oracle: RunOracle::new(p, fatal(case)),
        digest: Default::default(),
        step_digests: Vec::new(),
        step: 0,
        now_ms: 0,
        coverage: Coverage::default(),
        transcript: options.transcript.then(Vec::new),
        violation: None,
        inc: 0,
        inbox: None,
        host: None,
        journal: Vec::new(),
        leases: BTreeMap::new(),
        replacement_creates: 0,
        replacement_leases: BTreeMap::new(),
        slots: vec![slot; stages as usize],
        steps_executed: 0,
        submitted: 0,
        shutdown_sent: false,
        ended_at: None,
        healed: false,
        control: None,
    };
    let shared = Arc::new(Shared::new(state));
    let runtime = madsim::runtime::Runtime::with_seed_and_config(case.seed, config);
    let world = Arc::clone(&shared);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(supervisor::supervise(world))
    }));
    drop(runtime);
    let mut w = shared.lock();
    if let Err(panic) = run {
        let message = format!(
            "the world panicked: {}",
            conformance::backend::panic_text(&*panic)
        );
        w.violate("RW0", message);
    }
    let injected: Vec<&'static str> = w.oracle.injected.iter().copied().collect();
    w.coverage.faults.extend(injected);
    let outcome = w
        .host
        .as_ref()
        .and_then(|h| h.run())
        .and_then(|r| r.outcome());
    let stats = conformance::Stats {
        steps: w.step,
        end_ms: w.now_ms,
        nodes_ready: w.oracle.done_requests(),
        nodes_failed: u32::from(matches!(outcome, Some(Err(_)))),
        restarts: w.inc.saturating_sub(1),
        leases_created: w.leases.len() as u32,
    };
    RunOutcome {
        violation: w.violation.clone(),
        digest: w.digest,
        step_digests: std::mem::take(&mut w.step_digests),
        coverage: w.coverage.clone(),
        transcript: w.transcript.take().unwrap_or_default(),
        stats,
    }
}

/// Runs `case` twice and judges it: the oracle silent, the digests of
/// every step equal (tier 1's rule).
pub fn check(case: &RunCase) -> (RunOutcome, Option<Failure>) {
    sim::run_world::battery::check_twice(case, run_case)
}

/// One seed's verdict.
#[derive(Debug)]
pub struct Verdict {
    /// The seed.
    pub seed: u64,
    /// Its case.
    pub case: RunCase,
    /// What the first run saw.
    pub outcome: RunOutcome,
    /// What broke, if anything.
    pub failure: Option<Failure>,
}

/// What a battery of this tier's run scenario found.
#[derive(Debug)]
pub struct Report {
    /// Every seed's verdict, in seed order.
    pub verdicts: Vec<Verdict>,
    /// Wall time.
    pub elapsed: Duration,
}

impl Report {
    /// The failing verdicts.
    pub fn failures(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.failure.is_some())
    }

    /// Per fault name: (cases that enabled it, cases that injected it).
    pub fn hits(&self) -> BTreeMap<&'static str, (u32, u32)> {
        let mut hits = BTreeMap::new();
        for v in &self.verdicts {
            let mut names = v.case.enabled();
            names.insert("partition");
            for name in names {
                let entry = hits.entry(name).or_insert((0, 0));
                let on = name != "partition" || v.outcome.coverage.faults.contains(name);
                entry.0 += u32::from(on);
                entry.1 += u32::from(v.outcome.coverage.faults.contains(name));
            }
        }
        hits
    }

    /// Everything the battery exercised.
    pub fn coverage(&self) -> Coverage {
        let mut coverage = Coverage::default();
        for v in &self.verdicts {
            coverage.merge(&v.outcome.coverage);
        }
        coverage
    }

    /// Leases created beyond one per stage: the composite's replacements
    /// (a restarted orchestrator re-creates a lease only for a node whose
    /// create it lost, which happens before the run, where no crash is).
    pub fn replacements(&self) -> u32 {
        self.verdicts
            .iter()
            .map(|v| {
                let stages = v.case.profile.stages.max(1);
                v.outcome.stats.leases_created.saturating_sub(stages)
            })
            .sum()
    }

    /// A readable summary: failures with their reproduce lines, hit rates,
    /// counts.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for v in self.failures() {
            let failure = v
                .failure
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            out.push_str(&format!(
                "FAIL {SCENARIO} seed {}: {failure}\n  reproduce: {}\n",
                v.seed,
                reproduce_line(v.seed)
            ));
        }
        for (name, (on, hit)) in self.hits() {
            out.push_str(&format!(
                "  {name:<24} hit in {hit:>4} of {on:>4} profiles\n"
            ));
        }
        let steps: u64 = self.verdicts.iter().map(|v| v.outcome.stats.steps).sum();
        let done: u32 = self
            .verdicts
            .iter()
            .map(|v| v.outcome.stats.nodes_ready)
            .sum();
        let restarts: u32 = self.verdicts.iter().map(|v| v.outcome.stats.restarts).sum();
        let leases: u32 = self
            .verdicts
            .iter()
            .map(|v| v.outcome.stats.leases_created)
            .sum();
        let replaced = self.replacements();
        let failed = self.failures().count();
        out.push_str(&format!(
            "madsim {SCENARIO}: {} passed, {failed} failed ({} seeds, each run twice, in {:.1}s); {steps} steps, {done} requests done, {leases} leases created, {replaced} nodes replaced, {restarts} orchestrator restarts\n",
            self.verdicts.len() - failed,
            self.verdicts.len(),
            self.elapsed.as_secs_f64(),
        ));
        out
    }
}

/// Runs `seeds` on `jobs` threads, each seed twice.
pub fn battery(seeds: impl IntoIterator<Item = u64>, jobs: usize) -> Report {
    let started = std::time::Instant::now();
    let verdicts = crate::backend::on_threads(seeds, jobs, |seed| {
        let case = generate(seed);
        let (outcome, failure) = check(&case);
        Verdict {
            seed,
            case,
            outcome,
            failure,
        }
    });
    Report {
        verdicts,
        elapsed: started.elapsed(),
    }
}
