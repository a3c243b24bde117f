//! `cargo xtask`: drover's developer tasks.
//!
//! `ci` is the conformance gate CI runs; the rest are entry points for
//! people: run more simulation seeds, replay or shrink a trace, check purity,
//! and measure.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::process::{Command, ExitCode};
use std::time::Instant;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "drover's developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// The conformance gate: fmt, clippy, tidy, every test and battery.
    Ci,
    /// core-fsm stays pure: dependencies and sources.
    Tidy,
    /// Run a simulation battery on all cores (tier 1, or `--madsim` for tier 2).
    Sim {
        /// Run the madsim tier instead of the property-trace world.
        #[arg(long)]
        madsim: bool,
        /// Arguments for the battery, e.g. `--seeds 10000 --scenario mvp`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Replay a committed or failing trace.
    Replay {
        /// The trace file.
        trace: String,
    },
    /// Shrink a trace to a minimal failing plan.
    Shrink {
        /// The trace file.
        trace: String,
    },
    /// Measure: `fsm`, `sim` or `up`.
    Bench {
        /// Which benchmark.
        what: String,
    },
    /// Run cargo-mutants over core-fsm and report the share caught.
    Mutants,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ok = match cli.task {
        Task::Ci => ci(),
        Task::Tidy => tidy(),
        Task::Sim { madsim: true, args } => drover_madsim(&args),
        Task::Sim {
            madsim: false,
            args,
        } => {
            let mut all = vec!["sim".to_string()];
            all.extend(args);
            drover_sim(&all)
        }
        Task::Replay { trace } => drover_sim(&["replay".into(), trace]),
        Task::Shrink { trace } => drover_sim(&["shrink".into(), trace]),
        Task::Bench { what } => bench(&what),
        Task::Mutants => mutants(),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(xtask::workspace_root()).args(args);
    cmd
}

/// Runs one named step, printing its duration; false if it failed.
fn step(name: &str, mut cmd: Command) -> bool {
    println!("==> {name}");
    let started = Instant::now();
    let ok = match cmd.status() {
        Ok(status) => status.success(),
        Err(e) => {
            eprintln!("xtask: cannot run {name}: {e}");
            false
        }
    };
    let secs = started.elapsed().as_secs_f64();
    println!(
        "==> {name}: {} in {secs:.1}s",
        if ok { "ok" } else { "FAILED" }
    );
    ok
}

fn ci() -> bool {
    let steps: Vec<(&str, Command)> = vec![
        ("fmt", cargo(&["fmt", "--all", "--", "--check"])),
        (
            "clippy",
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ]),
        ),
        (
            "tidy",
            cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "tidy"]),
        ),
        ("test", cargo(&["test", "--workspace", "--locked"])),
    ];
    let mut failed = Vec::new();
    for (name, cmd) in steps {
        if !step(name, cmd) {
            failed.push(name);
        }
    }
    if failed.is_empty() {
        println!("xtask ci: every step passed");
        true
    } else {
        println!("xtask ci: failed steps: {}", failed.join(", "));
        false
    }
}

fn tidy() -> bool {
    match xtask::tidy::check(&xtask::workspace_root()) {
        Ok(findings) if findings.is_empty() => {
            println!("tidy: core-fsm is pure (dependencies and sources)");
            true
        }
        Ok(findings) => {
            for f in &findings {
                println!("tidy: {f}");
            }
            println!("tidy: {} finding(s)", findings.len());
            false
        }
        Err(e) => {
            eprintln!("tidy: {e}");
            false
        }
    }
}

fn drover_sim(args: &[String]) -> bool {
    let mut cmd = cargo(&[
        "run",
        "--quiet",
        "--release",
        "-p",
        "sim",
        "--bin",
        "drover-sim",
        "--",
    ]);
    cmd.args(args);
    step("drover-sim", cmd)
}

/// The madsim tier builds with `--cfg madsim` in its own target dir, so it
/// never invalidates the normal build.
fn drover_madsim(args: &[String]) -> bool {
    let root = xtask::workspace_root();
    let mut cmd = cargo(&[
        "run",
        "--quiet",
        "--release",
        "-p",
        "sim-madsim",
        "--bin",
        "drover-madsim",
        "--",
    ]);
    cmd.env("RUSTFLAGS", "--cfg madsim")
        .env("CARGO_TARGET_DIR", root.join("target/madsim"));
    cmd.args(args);
    step("drover-madsim", cmd)
}

fn bench(what: &str) -> bool {
    match what {
        "fsm" => step(
            "bench fsm",
            cargo(&["bench", "-p", "core-fsm", "--bench", "lifecycle"]),
        ),
        "sim" => drover_sim(&["bench".into()]),
        "up" => step(
            "bench up",
            cargo(&[
                "run",
                "--quiet",
                "--release",
                "-p",
                "runtime-real",
                "--example",
                "bench_up",
            ]),
        ),
        other => {
            eprintln!("xtask bench: unknown benchmark `{other}` (fsm, sim, up)");
            false
        }
    }
}

fn mutants() -> bool {
    let have = Command::new(env!("CARGO"))
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have
        && !step(
            "install cargo-mutants",
            cargo(&["install", "--locked", "cargo-mutants"]),
        )
    {
        return false;
    }
    step(
        "mutants",
        cargo(&[
            "mutants",
            "--package",
            "core-fsm",
            "--test-workspace",
            "false",
            "--no-shuffle",
        ]),
    )
}
