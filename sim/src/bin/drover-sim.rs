//! `drover-sim`: the tier-1 simulator's command line, which `cargo xtask`
//! runs.
//!
//! ```text
//! drover-sim sim [--scenario S]... [--seeds N] [--seed N] [--first-seed N] [--threads N] [--no-shrink]
//! drover-sim replay FILE
//! drover-sim shrink FILE
//! drover-sim bench [--seeds N] [--threads N]
//! drover-sim coverage [--seeds N]
//! drover-sim run [--scenario run-serving|run-fatal]... [--seeds N] [--seed N]
//! drover-sim run-replay FILE
//! ```

use conformance::Scenario;
use sim::cli;
use std::path::Path;
use std::process::ExitCode;

fn value<T: std::str::FromStr>(args: &[String], i: usize, flag: &str) -> Result<T, String> {
    args.get(i + 1)
        .ok_or(format!("{flag} needs a value"))?
        .parse::<T>()
        .map_err(|_| format!("{flag}: not a valid value"))
}

fn battery_options(args: &[String]) -> Result<cli::BatteryOptions, String> {
    let mut options = cli::BatteryOptions::default();
    let mut scenarios = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--scenario" => {
                let name: String = value(args, i, "--scenario")?;
                scenarios.push(Scenario::parse(&name).ok_or(format!("unknown scenario `{name}`"))?);
                i += 1;
            }
            "--seeds" => {
                options.seeds = value(args, i, "--seeds")?;
                i += 1;
            }
            "--seed" => {
                options.first_seed = value(args, i, "--seed")?;
                options.seeds = 1;
                i += 1;
            }
            "--first-seed" => {
                options.first_seed = value(args, i, "--first-seed")?;
                i += 1;
            }
            "--threads" => {
                options.threads = value(args, i, "--threads")?;
                i += 1;
            }
            "--no-shrink" => options.shrink_budget = 0,
            other => return Err(format!("unknown argument `{other}`")),
        }
        i += 1;
    }
    if !scenarios.is_empty() {
        options.scenarios = scenarios;
    }
    Ok(options)
}

fn run(args: &[String]) -> Result<bool, String> {
    let (command, rest) = args
        .split_first()
        .ok_or("usage: drover-sim sim|replay|shrink|bench|coverage ...")?;
    match command.as_str() {
        "sim" | "coverage" => {
            let options = battery_options(rest)?;
            let report = cli::run_battery(&options);
            if command == "coverage" {
                println!("{}", report.coverage.report());
            }
            print!("{}", report.summary());
            Ok(report.failures.is_empty())
        }
        "replay" => {
            let path = rest.first().ok_or("replay needs a trace file")?;
            let replay = cli::replay(Path::new(path))?;
            print!("{}", replay.text());
            Ok(replay.outcome.violation.is_none())
        }
        "shrink" => {
            let path = rest.first().ok_or("shrink needs a trace file")?;
            let (case, out) = cli::shrink(Path::new(path))?;
            println!("shrunk to {} items: {}", case.items.len(), out.display());
            Ok(true)
        }
        "bench" => {
            let mut seeds = 10_000;
            let mut threads = 0;
            let mut i = 0;
            while i < rest.len() {
                match rest[i].as_str() {
                    "--seeds" => seeds = value(rest, i, "--seeds")?,
                    "--threads" => threads = value(rest, i, "--threads")?,
                    other => return Err(format!("unknown argument `{other}`")),
                }
                i += 2;
            }
            let b = cli::bench(seeds, threads);
            println!(
                "standard scenario (3 nodes, 10 simulated minutes, faults on): {} seeds on {} threads in {:.2}s, {} steps, {} violations",
                b.seeds, b.threads, b.elapsed_s, b.steps, b.violations
            );
            println!(
                "{:.0} seeds per second per core",
                b.seeds_per_second_per_core()
            );
            let (cases, secs, violations) = cli::bench_run((seeds / 5).max(1));
            println!(
                "pipeline: {cases} run-phase seeds on 1 thread in {secs:.2}s, {violations} violations: {:.0} seeds/s per core",
                cases as f64 / secs.max(1e-9)
            );
            Ok(violations == 0)
        }
        "run" => run_phase(rest),
        "run-replay" => {
            let path = rest.first().ok_or("run-replay needs a trace file")?;
            let (_, outcome) = sim::run_world::battery::replay_run(Path::new(path))?;
            println!("{}", outcome.transcript.join("\n"));
            match &outcome.violation {
                Some(v) => println!("verdict: {v}"),
                None => println!("verdict: ok"),
            }
            Ok(outcome.violation.is_none())
        }
        other => Err(format!("unknown command `{other}`")),
    }
}

/// The run-phase battery: `run [--scenario S]... [--seeds N] [--seed N]`.
fn run_phase(args: &[String]) -> Result<bool, String> {
    use conformance::run::RunScenario;
    let mut scenarios = Vec::new();
    let (mut first, mut seeds) = (0u64, 100u64);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--scenario" => {
                let name: String = value(args, i, "--scenario")?;
                let s = RunScenario::parse(&name).ok_or(format!("unknown scenario `{name}`"))?;
                scenarios.push(s);
            }
            "--seeds" => seeds = value(args, i, "--seeds")?,
            "--seed" => {
                first = value(args, i, "--seed")?;
                seeds = 1;
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
        i += 2;
    }
    if scenarios.is_empty() {
        scenarios = RunScenario::ALL.to_vec();
    }
    let dir = sim::run_world::battery::trace_dir();
    let report =
        sim::run_world::battery::run_battery(&scenarios, first..first + seeds, 300, Some(&dir));
    print!("{}", report.summary());
    Ok(report.failures.is_empty())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("drover-sim: {e}");
            ExitCode::from(2)
        }
    }
}
