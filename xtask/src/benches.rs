//! `cargo xtask bench WHAT`: which benchmark runs, and the simulators'
//! throughput side by side (`bench sim`).

use crate::{DROVER_MADSIM, DROVER_SIM, cargo, madsim_cargo, pipeline_bench, step, worker};
use std::process::Command;

/// Both tiers' throughput on the standard scenario, side by side.
fn bench_sim() -> bool {
    let mut tier1 = cargo(DROVER_SIM);
    tier1.arg("bench");
    let mut tier2 = madsim_cargo(DROVER_MADSIM);
    tier2.arg("--bench");
    let (Some(one), Some(two)) = (captured("tier 1", tier1), captured("madsim", tier2)) else {
        return false;
    };
    let rate1 = seeds_per_core(&one);
    let rate2 = seeds_per_core(&two);
    let show = |r: Option<f64>| r.map_or("?".to_string(), |r| format!("{r:.0}"));
    println!("tier                 seeds/s per core");
    println!("property-trace (1)   {}", show(rate1));
    println!("madsim (2)           {}", show(rate2));
    if let (Some(a), Some(b)) = (rate1, rate2) {
        println!("ratio tier1/madsim   {:.2}x", a / b);
    }
    let (pipe1, pipe2) = (pipeline_per_core(&one), pipeline_per_core(&two));
    println!("pipeline scenario    seeds/s per core");
    println!("property-trace (1)   {} (target 1000)", show(pipe1));
    println!("madsim (2)           {}", show(pipe2));
    rate1.is_some() && rate2.is_some() && pipe1.is_some() && pipe2.is_some()
}

/// Runs `cmd`, echoes its output, and returns its stdout if it succeeded.
fn captured(name: &str, mut cmd: Command) -> Option<String> {
    println!("==> {name}");
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{text}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    out.status.success().then_some(text)
}

/// The number in front of "seeds per second per core" or "seeds/s per core".
/// The run-phase (pipeline) scenario's figure of a bench's output.
fn pipeline_per_core(text: &str) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with("pipeline"))
        .find_map(seeds_per_core)
}

pub(crate) fn seeds_per_core(text: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let at = line
            .find(" seeds per second per core")
            .or_else(|| line.find(" seeds/s per core"))?;
        line[..at].rsplit([' ', ':']).next()?.parse().ok()
    })
}

/// `cargo run --release -p runtime-real --example NAME -- ARGS`: the
/// benchmarks that drive real binaries (built by the example itself).
fn release_example(name: &str, args: &[&str]) -> Command {
    let mut all = vec![
        "run",
        "--quiet",
        "--release",
        "-p",
        "runtime-real",
        "--example",
        name,
    ];
    if !args.is_empty() {
        all.push("--");
        all.extend_from_slice(args);
    }
    cargo(&all)
}

pub(crate) fn bench(
    what: &str,
    provider: &str,
    hop: bool,
    no_avx512: bool,
    types: &[String],
) -> bool {
    if hop && what != "pipeline" {
        eprintln!("xtask bench: --hop is for `bench pipeline`, not `{what}`");
        return false;
    }
    if (no_avx512 || !types.is_empty()) && what != "worker" {
        eprintln!("xtask bench: --no-avx512 and --types are for `bench worker`, not `{what}`");
        return false;
    }
    match what {
        // An example, not a `cargo bench` target: cargo builds bench
        // targets with unwinding whatever the profile says, and this one is
        // to measure the composite as the release profile builds it.
        "fsm" => step(
            "bench fsm",
            cargo(&[
                "run",
                "--quiet",
                "--release",
                "-p",
                "core-fsm",
                "--example",
                "lifecycle",
            ]),
        ),
        "sim" => bench_sim(),
        "worker" => worker::bench_worker(no_avx512, types)
            .map_err(|e| eprintln!("xtask bench worker: {e}"))
            .is_ok(),
        "pipeline" => pipeline_bench::bench_pipeline(hop)
            .map_err(|e| eprintln!("xtask bench pipeline: {e}"))
            .is_ok(),
        "up" => step(
            "bench up",
            release_example("bench_up", &["--provider", provider]),
        ),
        // Replacement alone on 20 nodes, then a pipeline's resume.
        "repair" => {
            step("bench repair", release_example("bench_repair", &[]))
                && step(
                    "bench repair (resume)",
                    release_example("bench_resume", &[]),
                )
        }
        "dashboard" => step("bench dashboard", release_example("bench_dashboard", &[])),
        other => {
            eprintln!(
                "xtask bench: unknown benchmark `{other}` (fsm, sim, up, worker, pipeline, dashboard, repair)"
            );
            false
        }
    }
}
