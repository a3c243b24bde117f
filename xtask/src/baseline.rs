//! `cargo xtask bench sim|up --baseline REV`: the benchmark of this tree
//! and of commit REV side by side in one run. REV's tree is exported with
//! `git archive` into `target/baseline/REV/` (no worktree is registered),
//! built there with its own lockfile and target dir, and both benches run
//! in turn, round after round, so that the machine's drift touches both
//! alike. Prints each round, the medians and the ratio.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Rounds of each side.
const ROUNDS: usize = 3;
/// Seeds of one tier-1 round, on one thread.
const SIM_SEEDS: &str = "3000";

/// The tree of `rev`, exported once; its path.
fn export(rev: &str) -> Result<PathBuf, String> {
    let root = xtask::workspace_root();
    let full = git(
        &root,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
    )?;
    let short: String = full.trim().chars().take(12).collect();
    let dir = root.join("target/baseline").join(&short);
    let tree = dir.join("src");
    if tree.join("Cargo.toml").exists() {
        return Ok(tree);
    }
    std::fs::create_dir_all(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    let archive = dir.join("tree.tar");
    let archive_arg = format!("--output={}", archive.display());
    git(&root, &["archive", &archive_arg, full.trim()])?;
    let untar = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&tree)
        .status()
        .map_err(|e| format!("tar: {e}"))?;
    if !untar.success() {
        return Err(format!("tar -xf {} failed", archive.display()));
    }
    Ok(tree)
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("git {}: {}", args.join(" "), err.trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The target dir of `tree`: this workspace's own, or one beside an
/// exported tree.
fn target_dir(tree: &Path) -> PathBuf {
    match tree == xtask::workspace_root() {
        true => tree.join("target"),
        false => tree.parent().unwrap_or(tree).join("target"),
    }
}

/// `cargo ARGS` in `tree`, building into [`target_dir`].
fn cargo_in(tree: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(tree)
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir(tree));
    cmd
}

/// Runs `cmd`, returning its stdout when it succeeds.
fn output(name: &str, mut cmd: Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{name}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("{name} failed:\n{}", tail.join("\n")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Tier 1's standard scenario here and at `rev`: seeds/s per core.
pub fn sim(rev: &str) -> Result<(), String> {
    let trees = [("this tree", xtask::workspace_root()), (rev, export(rev)?)];
    let build = [
        "build",
        "--quiet",
        "--locked",
        "--profile",
        "sim",
        "-p",
        "sim",
    ];
    let mut bins = Vec::new();
    for (name, tree) in &trees {
        println!("==> building drover-sim ({name})");
        output(
            name,
            cargo_in(tree, &[&build[..], &["--bin", "drover-sim"]].concat()),
        )?;
        bins.push(target_dir(tree).join("sim/drover-sim"));
    }
    let mut rates = [Vec::new(), Vec::new()];
    println!(
        "round  {:>12}  {:>12}   (seeds/s per core, {SIM_SEEDS} seeds, 1 thread)",
        "this tree", rev
    );
    for round in 1..=ROUNDS {
        for (side, bin) in bins.iter().enumerate() {
            let mut cmd = Command::new(bin);
            cmd.args(["bench", "--seeds", SIM_SEEDS, "--threads", "1"]);
            let text = output("drover-sim bench", cmd)?;
            let rate =
                crate::benches::seeds_per_core(&text).ok_or("no figure in drover-sim's output")?;
            rates[side].push(rate);
        }
        println!(
            "{round:>5}  {:>12.0}  {:>12.0}",
            rates[0][round - 1],
            rates[1][round - 1]
        );
    }
    let [ours, theirs] = rates.map(median);
    println!("median {ours:>12.0}  {theirs:>12.0}");
    println!("ratio this/{rev}: {:.2}x (target >= 0.80x)", ours / theirs);
    Ok(())
}

/// `bench up` (local nodes) here and at `rev`: all-ready and teardown ms.
pub fn up(rev: &str) -> Result<(), String> {
    let trees = [("this tree", xtask::workspace_root()), (rev, export(rev)?)];
    let run = [
        "run",
        "--quiet",
        "--locked",
        "--release",
        "-p",
        "runtime-real",
    ];
    // Per side, per node count: the all-ready and teardown times.
    let mut rows: [Vec<Vec<(u64, u64, u64)>>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=ROUNDS {
        for (side, (name, tree)) in trees.iter().enumerate() {
            println!("==> round {round}: bench up ({name})");
            let text = output(
                name,
                cargo_in(tree, &[&run[..], &["--example", "bench_up"]].concat()),
            )?;
            let parsed: Vec<(u64, u64, u64)> = text
                .lines()
                .filter_map(|line| {
                    let f: Vec<u64> = line
                        .split_whitespace()
                        .filter_map(|w| w.parse().ok())
                        .collect();
                    (f.len() == 3).then(|| (f[0], f[1], f[2]))
                })
                .collect();
            if parsed.is_empty() {
                return Err(format!("no rows in bench up's output ({name})"));
            }
            rows[side].push(parsed);
        }
    }
    println!("nodes  all-ready ms: this / {rev} (ratio)   teardown ms: this / {rev} (ratio)");
    for (i, (nodes, _, _)) in rows[0][0].iter().enumerate() {
        let pick = |side: usize, f: fn(&(u64, u64, u64)) -> u64| {
            median(
                rows[side]
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|r| f(r) as f64)
                    .collect(),
            )
        };
        let (ready, ready_b) = (pick(0, |r| r.1), pick(1, |r| r.1));
        let (down, down_b) = (pick(0, |r| r.2), pick(1, |r| r.2));
        println!(
            "{nodes:>5}  {ready:>6.0} / {ready_b:<6.0} ({:.2}x)          {down:>6.0} / {down_b:<6.0} ({:.2}x)",
            ready / ready_b.max(1.0),
            down / down_b.max(1.0)
        );
    }
    println!("target: all-ready within 1.25x of {rev}");
    Ok(())
}
