//! `drover-madsim`: runs the madsim tier's battery.
//!
//! ```text
//! drover-madsim [--scenario NAME|all] [--seeds N] [--first S] [--seed S]
//!               [--trace FILE] [--jobs J] [--no-chaos] [--transcript] [--compare]
//! drover-madsim --bench [--seeds N] [--jobs J]
//! ```
//!
//! `--seed S` runs one seed (twice, digests compared) and, with
//! `--transcript`, prints its transcript; `--trace FILE` does the same for a
//! case written as a trace (tier 1's failures and shrunk cases run here too).
//! `--bench` runs the standard scenario (each seed once) on one thread and
//! on `--jobs` threads and prints seeds/s per core. `--compare` also runs tier 1 on the
//! same cases and the planted-bug systems in both tiers, and prints the
//! verdicts side by side. Exit status 1 when a seed fails or a verdict
//! differs. Built without `--cfg madsim` it only says how to build it.

#[cfg(not(madsim))]
fn main() {
    eprintln!(
        "drover-madsim is a simulator build; run it as\n  {}",
        sim_madsim::reproduce_line("small-pool", 0).replace(" --seed 0", " --seeds 200")
    );
    std::process::exit(2);
}

#[cfg(madsim)]
fn main() {
    std::process::exit(cli::main(std::env::args().skip(1).collect()));
}

#[cfg(madsim)]
mod cli {
    use conformance::Scenario;
    use sim_madsim::backend::{self, TierTwo};
    use sim_madsim::chaos::Level;
    use sim_madsim::compare;

    struct Args {
        scenarios: Vec<Scenario>,
        seeds: u64,
        first: u64,
        one: Option<u64>,
        jobs: usize,
        level: Level,
        transcript: bool,
        compare: bool,
        trace: Option<String>,
        bench: bool,
        /// The run phase's scenario (`--scenario pipeline`, or `all`).
        pipeline: bool,
    }

    fn parse(args: Vec<String>) -> Result<Args, String> {
        let mut parsed = Args {
            scenarios: vec![Scenario::SmallPool],
            seeds: 200,
            first: 0,
            one: None,
            jobs: backend::default_jobs(),
            level: Level::On,
            transcript: false,
            compare: false,
            trace: None,
            bench: false,
            pipeline: false,
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            let number = |text: String| text.parse::<u64>().map_err(|e| format!("{text}: {e}"));
            match flag.as_str() {
                "--scenario" => {
                    let name = value()?;
                    parsed.pipeline = name == "all" || name == sim_madsim::run::SCENARIO;
                    parsed.scenarios = if name == "all" {
                        Scenario::ALL.to_vec()
                    } else if name == sim_madsim::run::SCENARIO {
                        Vec::new()
                    } else {
                        vec![Scenario::parse(&name).ok_or(format!("unknown scenario {name}"))?]
                    };
                }
                "--seeds" => parsed.seeds = number(value()?)?,
                "--first" => parsed.first = number(value()?)?,
                "--seed" => parsed.one = Some(number(value()?)?),
                "--jobs" => parsed.jobs = number(value()?)? as usize,
                "--no-chaos" => parsed.level = Level::Off,
                "--transcript" => parsed.transcript = true,
                "--compare" => parsed.compare = true,
                "--trace" => parsed.trace = Some(value()?),
                "--bench" => parsed.bench = true,
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(parsed)
    }

    pub fn main(args: Vec<String>) -> i32 {
        let args = match parse(args) {
            Ok(args) => args,
            Err(e) => {
                eprintln!("drover-madsim: {e}");
                return 2;
            }
        };
        if args.bench {
            let seeds = if args.seeds == 200 { 500 } else { args.seeds };
            println!("{}", backend::bench_line(&backend::bench(seeds, 1)));
            println!("{}", backend::bench_line(&backend::bench(seeds, args.jobs)));
            let seeds = (seeds / 5).max(1);
            let report = sim_madsim::run::battery(0..seeds, 1);
            let runs = 2 * report.verdicts.len();
            println!(
                "pipeline: {runs} runs on 1 thread in {:.1}s: {:.1} seeds/s per core",
                report.elapsed.as_secs_f64(),
                runs as f64 / report.elapsed.as_secs_f64().max(1e-9)
            );
            return i32::from(report.failures().next().is_some());
        }
        let real = TierTwo::<sim::system::Composite>::new(args.level);
        if let Some(path) = &args.trace {
            let case = std::fs::read_to_string(path)
                .map_err(|e| format!("{path}: {e}"))
                .and_then(|text| conformance::trace::parse(&text));
            return match case {
                Ok(case) => {
                    let again = sim_madsim::reproduce_line(&case.scenario, case.seed)
                        .replace(&format!("--seed {}", case.seed), &format!("--trace {path}"));
                    i32::from(run_case(&real, &case, args.transcript, &again))
                }
                Err(e) => {
                    eprintln!("drover-madsim: {e}");
                    2
                }
            };
        }
        let mut failed = false;
        if args.pipeline {
            failed |= pipeline(&args);
        }
        for scenario in &args.scenarios {
            if let Some(seed) = args.one {
                failed |= one(&real, *scenario, seed, args.transcript);
                continue;
            }
            let seeds = args.first..args.first + args.seeds;
            let report = backend::battery(&real, *scenario, seeds.clone(), args.jobs);
            print!("{}", report.summary());
            failed |= report.failures().next().is_some();
            if args.compare {
                let table = compare::tiers(*scenario, seeds, args.jobs);
                print!("{}", table.render());
                failed |= !table.agrees();
            }
        }
        i32::from(failed)
    }

    /// The run phase's scenario: one seed (with its transcript if asked),
    /// or a battery.
    fn pipeline(args: &Args) -> bool {
        use sim_madsim::run;
        let Some(seed) = args.one else {
            let report = run::battery(args.first..args.first + args.seeds, args.jobs);
            print!("{}", report.summary());
            return report.failures().next().is_some();
        };
        let case = run::generate(seed);
        let (outcome, failure) = run::check(&case);
        if args.transcript {
            let options = conformance::RunOptions { transcript: true };
            for line in run::run_case(&case, options).transcript {
                println!("{line}");
            }
        }
        let stats = &outcome.stats;
        println!(
            "madsim {} seed {seed} ({}): {} steps, {} ms simulated, {} orchestrator restarts, {} requests done, digest {}",
            run::SCENARIO,
            case.scenario,
            stats.steps,
            stats.end_ms,
            stats.restarts,
            stats.nodes_ready,
            outcome.digest
        );
        match failure {
            Some(f) => {
                println!("FAIL: {f}\n  reproduce: {}", run::reproduce_line(seed));
                true
            }
            None => {
                println!("pass");
                false
            }
        }
    }

    fn one(
        real: &TierTwo<sim::system::Composite>,
        scenario: Scenario,
        seed: u64,
        transcript: bool,
    ) -> bool {
        let again = sim_madsim::reproduce_line(scenario.name(), seed);
        run_case(
            real,
            &conformance::generate(scenario, seed),
            transcript,
            &again,
        )
    }

    fn run_case(
        real: &TierTwo<sim::system::Composite>,
        case: &conformance::Case,
        transcript: bool,
        again: &str,
    ) -> bool {
        let (outcome, failure) = conformance::battery::check_case(real, case);
        if transcript {
            let options = conformance::RunOptions { transcript: true };
            let run = conformance::Backend::run(real, case, options);
            for line in run.transcript {
                println!("{line}");
            }
        }
        let stats = &outcome.stats;
        println!(
            "madsim {} seed {}: {} steps, {} ms simulated, {} restarts, {} leases, {} ready, {} failed, digest {}",
            case.scenario,
            case.seed,
            stats.steps,
            stats.end_ms,
            stats.restarts,
            stats.leases_created,
            stats.nodes_ready,
            stats.nodes_failed,
            outcome.digest
        );
        match failure {
            Some(f) => {
                println!("FAIL: {f}\n  reproduce: {again}");
                true
            }
            None => {
                println!("pass");
                false
            }
        }
    }
}
