//! `cargo xtask`: drover's developer tasks.
//!
//! `ci` is the conformance gate CI runs, after `setup` (what its tests need
//! from the machine); the rest are entry points for people: run more simulation seeds, replay or shrink a trace, check purity,
//! and measure.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::process::{Command, ExitCode};
use std::time::Instant;

mod baseline;
mod benches;
mod pipeline_bench;
mod worker;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "drover's developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// The conformance gate: setup, then fmt, clippy, tidy, every test and
    /// battery.
    Ci {
        /// Only the setup step: check (and as root install) what the tests
        /// need, then stop.
        #[arg(long)]
        setup_only: bool,
    },
    /// What the tests need from the machine: check it, install it as root,
    /// or name the command that would (`xtask/src/setup.rs`).
    Setup,
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
    /// Measure: `fsm`, `sim`, `up`, `worker` or `pipeline`.
    Bench {
        /// Which benchmark.
        what: String,
        /// `bench up` only: `local` or `docker` (containers of the node
        /// image, whose build is measured too).
        #[arg(long, default_value = "local")]
        provider: String,
        /// `bench sim` and `bench up`: also build commit REV and run both
        /// side by side, printing the ratio (`xtask/src/baseline.rs`).
        #[arg(long, value_name = "REV")]
        baseline: Option<String>,
        /// `bench pipeline` only: just the hop tables (models whose
        /// compute is small: the 256-byte row, the 6 KiB row, and the 6
        /// KiB row behind the 0.5B's attention), a few minutes instead of
        /// half an hour.
        #[arg(long)]
        hop: bool,
        /// `bench worker` only: both sides as on a processor without
        /// AVX-512: llama.cpp built without it (a venv of its own, built
        /// once), drover-worker on its AVX2 kernels (`DROVER_KERNELS=avx2`).
        #[arg(long)]
        no_avx512: bool,
        /// `bench worker` only: these weight types, comma-separated
        /// (default: every one the benchmark knows).
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
    /// Run cargo-mutants over core-fsm against its tests and the simulation
    /// battery, and report the share caught.
    Mutants {
        /// Extra arguments for cargo-mutants, e.g. `--shard 0/40` to sample.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Join `spec/*.md` into `SPEC.md`.
    Spec,
    /// Rewrite drover-worker's goldens from llama.cpp (builds it once).
    Reference,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ok = match cli.task {
        Task::Ci { setup_only: true } | Task::Setup => setup(),
        Task::Ci { setup_only: false } => ci(),
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
        Task::Bench {
            what,
            provider,
            baseline,
            hop,
            no_avx512,
            types,
        } => match baseline {
            Some(rev) => {
                let done = match what.as_str() {
                    "sim" => baseline::sim(&rev),
                    "up" => baseline::up(&rev),
                    other => Err(format!("--baseline is for sim and up, not `{other}`")),
                };
                done.map_err(|e| eprintln!("xtask bench --baseline: {e}"))
                    .is_ok()
            }
            None => benches::bench(&what, &provider, hop, no_avx512, &types),
        },
        Task::Mutants { args } => mutants(&args),
        Task::Spec => write_spec(),
        Task::Reference => worker::reference()
            .map_err(|e| eprintln!("xtask reference: {e}"))
            .is_ok(),
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

/// The first step of `ci`: every external thing the tests need.
fn setup() -> bool {
    println!("==> setup");
    let host = xtask::setup::Host::current();
    let table = xtask::setup::prerequisites();
    let ok = xtask::setup::run(&host, &table, &mut std::io::stdout());
    println!("==> setup: {}", if ok { "ok" } else { "FAILED" });
    ok
}

fn ci() -> bool {
    if !setup() {
        println!("xtask ci: the machine lacks what the tests need (above); nothing was built");
        return false;
    }
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
        (
            "madsim battery",
            madsim_cargo(&["test", "--release", "--locked", "-p", "sim-madsim"]),
        ),
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

fn write_spec() -> bool {
    let root = xtask::workspace_root();
    match xtask::spec::render(&root).and_then(|text| {
        std::fs::write(root.join("SPEC.md"), text).map_err(|e| format!("SPEC.md: {e}"))
    }) {
        Ok(()) => {
            println!(
                "spec: wrote SPEC.md from {} parts",
                xtask::spec::PARTS.len()
            );
            true
        }
        Err(e) => {
            eprintln!("spec: {e}");
            false
        }
    }
}

fn tidy() -> bool {
    match xtask::tidy::check(&xtask::workspace_root()) {
        Ok(findings) if findings.is_empty() => {
            println!(
                "tidy: core-fsm is pure (dependencies and sources); no machine feeder reads a datastream frame"
            );
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

/// `cargo run` of the tier-1 simulator, built with the `sim` profile.
const DROVER_SIM: &[&str] = &[
    "run",
    "--quiet",
    "--profile",
    "sim",
    "-p",
    "sim",
    "--bin",
    "drover-sim",
    "--",
];

fn drover_sim(args: &[String]) -> bool {
    let mut cmd = cargo(DROVER_SIM);
    cmd.args(args);
    step("drover-sim", cmd)
}

/// A cargo command for the madsim tier: built with `--cfg madsim` in its own
/// target dir, so it never invalidates the normal build.
fn madsim_cargo(args: &[&str]) -> Command {
    let root = xtask::workspace_root();
    let mut cmd = cargo(args);
    cmd.env("RUSTFLAGS", "--cfg madsim")
        .env("CARGO_TARGET_DIR", root.join("target/madsim"));
    cmd
}

const DROVER_MADSIM: &[&str] = &[
    "run",
    "--quiet",
    "--profile",
    "sim",
    "-p",
    "sim-madsim",
    "--bin",
    "drover-madsim",
    "--",
];

fn drover_madsim(args: &[String]) -> bool {
    let mut cmd = madsim_cargo(DROVER_MADSIM);
    cmd.args(args);
    step("drover-madsim", cmd)
}

fn mutants(args: &[String]) -> bool {
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
    // The machines' own tests plus the seeded battery: a mutant the oracle
    // cannot see is a hole in the kit, not only in the unit tests.
    let mut cmd = cargo(&[
        "mutants",
        "--package",
        "core-fsm",
        "--test-package",
        "core-fsm",
        "--test-package",
        "sim",
        "--timeout",
        "300",
        "--no-shuffle",
    ]);
    cmd.args(args);
    step("mutants", cmd)
}
