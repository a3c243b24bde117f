//! `cargo xtask reference` and `cargo xtask bench worker`: drover-worker
//! against llama.cpp (built from source by llama-cpp-python, in a venv
//! cached under `~/.cache/drover/`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The llama-cpp-python release the goldens come from.
pub const LLAMA_CPP_PYTHON: &str = "0.3.36";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared/models/stories260k.gguf` beside the repository.
pub fn stories() -> PathBuf {
    workspace().join("../shared/models/stories260k.gguf")
}

/// The venv holding llama-cpp-python, made (and llama.cpp built, about 12
/// minutes on 2 cores) when missing.
pub fn llama_venv() -> Result<PathBuf, String> {
    let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
    let venv = PathBuf::from(home).join(format!(".cache/drover/llama-cpp-python-{LLAMA_CPP_PYTHON}"));
    let python = venv.join("bin/python");
    let ready = python.exists()
        && Command::new(&python)
            .args(["-c", "import llama_cpp, numpy"])
            .status()
            .is_ok_and(|s| s.success());
    if ready {
        return Ok(python);
    }
    eprintln!(
        "xtask: building llama-cpp-python {LLAMA_CPP_PYTHON} (llama.cpp from source) into {}; about 12 minutes on 2 cores",
        venv.display()
    );
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(venv.join("bin/pip")).args([
        "install",
        "--progress-bar",
        "off",
        &format!("llama-cpp-python=={LLAMA_CPP_PYTHON}"),
        "numpy",
    ]))?;
    Ok(python)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    status.success().then_some(()).ok_or_else(|| format!("{cmd:?}: {status}"))
}

fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Builds drover-worker (release) and returns its path.
pub fn worker_binary() -> Result<PathBuf, String> {
    run(Command::new(env!("CARGO")).args(["build", "--quiet", "--release", "--locked", "-p", "workers"]))?;
    Ok(workspace().join("target/release/drover-worker"))
}

/// Writes `workers/tests/golden/*.json`: llama.cpp's tokens, logits and
/// greedy continuations for stories260K and every golden fixture.
pub fn reference() -> Result<(), String> {
    let python = llama_venv()?;
    let worker = worker_binary()?;
    let dir = workspace().join("target/fixtures");
    let listing = output(
        Command::new(&worker)
            .arg("make-golden-fixtures")
            .arg("--vocab-from")
            .arg(stories())
            .arg(&dir),
    )?;
    let mut models = vec![format!("stories260k={}", stories().display())];
    models.extend(listing.lines().map(str::to_string));
    let golden = workspace().join("workers/tests/golden");
    run(Command::new(python)
        .arg(workspace().join("workers/reference/golden.py"))
        .arg(&golden)
        .args(&models))?;
    println!("goldens written to {}", golden.display());
    Ok(())
}

/// Where the benchmark models live (made once, kept between runs).
pub fn bench_dir() -> PathBuf {
    workspace().join("target/bench-models")
}

/// Makes `name` (`SHAPE` with weights `ty`) in the bench dir unless present.
pub fn bench_model(worker: &Path, shape: &str, ty: &str) -> Result<PathBuf, String> {
    let path = bench_dir().join(format!("{}-{ty}.gguf", shape.replace([',', '='], "_")));
    if !path.exists() {
        std::fs::create_dir_all(bench_dir()).map_err(|e| e.to_string())?;
        run(Command::new(worker)
            .args(["make-model", "--shape", shape, "--type", ty, "--seed", "7"])
            .arg(&path))?;
    }
    Ok(path)
}
