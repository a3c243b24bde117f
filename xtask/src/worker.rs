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

/// llama.cpp's build options: this processor's instruction sets named one
/// by one, without AMX. A native build (`-march=native`) compiles ggml's
/// AMX kernels wherever the processor reports AMX (Sapphire Rapids and
/// later), whatever `GGML_AMX_*` says, and on the VMs tried they crash in
/// `ggml_backend_amx_mul_mat`; drover-worker has no AMX kernels either, so
/// the comparison stays between AVX-512 (or AVX2) code on both sides.
/// `no_avx512`: every AVX-512 option off, as on a processor without it.
fn llama_cmake_args(no_avx512: bool) -> String {
    const AMX_OFF: &str = "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF";
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let Some(flags) = cpuinfo.lines().find_map(|l| l.strip_prefix("flags")) else {
        // Not an x86 Linux: the native build has no AMX to avoid.
        return AMX_OFF.to_owned();
    };
    let flags: Vec<&str> = flags
        .trim_start_matches([' ', '\t', ':'])
        .split(' ')
        .collect();
    let mut args = vec!["-DGGML_NATIVE=OFF".to_owned()];
    for (flag, option) in [
        ("avx", "AVX"),
        ("avx2", "AVX2"),
        ("fma", "FMA"),
        ("f16c", "F16C"),
        ("bmi2", "BMI2"),
        ("avx512f", "AVX512"),
        ("avx512vbmi", "AVX512_VBMI"),
        ("avx512_vnni", "AVX512_VNNI"),
        ("avx512_bf16", "AVX512_BF16"),
        ("avx_vnni", "AVX_VNNI"),
    ] {
        let wanted = !(no_avx512 && option.starts_with("AVX512"));
        let on = if wanted && flags.contains(&flag) {
            "ON"
        } else {
            "OFF"
        };
        args.push(format!("-DGGML_{option}={on}"));
    }
    args.push(AMX_OFF.to_owned());
    args.join(" ")
}

/// The venv holding llama-cpp-python, made (and llama.cpp built, about 12
/// minutes on 2 cores) when missing; `no_avx512`: a venv of its own whose
/// llama.cpp is built without AVX-512.
pub fn llama_venv(no_avx512: bool) -> Result<PathBuf, String> {
    let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
    // Keyed by the release and the absence of AMX (and of AVX-512); built
    // for the processor of the machine that first made it.
    let key = if no_avx512 { "-noavx512" } else { "" };
    let venv = PathBuf::from(home).join(format!(
        ".cache/drover/llama-cpp-python-{LLAMA_CPP_PYTHON}-noamx{key}"
    ));
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
    run(Command::new(venv.join("bin/pip"))
        .env("CMAKE_ARGS", llama_cmake_args(no_avx512))
        .args([
            "install",
            // A wheel cached from a build with other options is not reused.
            "--no-cache-dir",
            "--progress-bar",
            "off",
            &format!("llama-cpp-python=={LLAMA_CPP_PYTHON}"),
            "numpy",
        ]))?;
    Ok(python)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("{cmd:?}: {status}"))
}

fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Builds drover-worker (release) and returns its path.
pub fn worker_binary() -> Result<PathBuf, String> {
    run(Command::new(env!("CARGO")).args([
        "build",
        "--quiet",
        "--release",
        "--locked",
        "-p",
        "workers",
    ]))?;
    Ok(workspace().join("target/release/drover-worker"))
}

/// Writes `workers/tests/golden/*.json`: llama.cpp's tokens, logits and
/// greedy continuations for stories260K and every golden fixture.
pub fn reference() -> Result<(), String> {
    let python = llama_venv(false)?;
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

fn json(text: &str) -> Result<serde_json::Value, String> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or("no JSON line in the output")?;
    serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))
}

/// The weight types `bench worker` runs by default.
const BENCH_TYPES: [&str; 12] = [
    "f16", "q8_0", "q4_0", "q4_k_m", "q5_0", "q5_k_m", "q4_1", "q5_1", "q3_k_m", "q2_k", "iq4_nl",
    "iq4_xs",
];

/// Rounds of `bench worker`: each runs drover-worker and llama.cpp once,
/// one after the other (the order alternating), so a minute in which the
/// machine runs slow touches both sides alike; the best of each side is
/// kept, and each round's own ratio is shown beside the best.
const ROUNDS: usize = 3;

/// `cargo xtask bench worker`: drover-worker and llama.cpp side by side on
/// the same GGUF files, the same prompt ids and the same thread count.
/// `no_avx512`: both as on a processor without AVX-512 (llama.cpp built
/// without it, drover-worker on `DROVER_KERNELS=avx2`); `types`: the
/// weight types to run (empty: [`BENCH_TYPES`]).
pub fn bench_worker(no_avx512: bool, types: &[String]) -> Result<(), String> {
    let known = |t: &String| BENCH_TYPES.contains(&t.as_str());
    if let Some(other) = types.iter().find(|t| !known(t)) {
        return Err(format!(
            "--types: {other} is not one of {}",
            BENCH_TYPES.join(", ")
        ));
    }
    let types: Vec<&str> = if types.is_empty() {
        BENCH_TYPES.to_vec()
    } else {
        types.iter().map(String::as_str).collect()
    };
    let python = llama_venv(no_avx512)?;
    let worker = worker_binary()?;
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .to_string();
    let (prefill, decode, repeat) = ("512", "32", "2");
    println!(
        "model: shape 0.5b (dim 1536, 16 blocks, ff 4096, vocab 32000), {threads} threads, prefill {prefill}, decode {decode}; the best of {ROUNDS} interleaved rounds (each round's ratio in brackets)"
    );
    println!(
        "{:<8} {:>10} {:>10} {:>6} {:>13} {:>11} {:>11} {:>6} {:>13} {:>9} {:>10}",
        "type",
        "decode t/s",
        "llama.cpp",
        "ratio",
        "rounds",
        "prefill t/s",
        "llama.cpp",
        "ratio",
        "rounds",
        "bandwidth",
        "RSS over"
    );
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    for ty in types.iter().copied() {
        let model = bench_model(&worker, "0.5b", ty)?;
        let run_ours = || -> Result<serde_json::Value, String> {
            let mut command = Command::new(&worker);
            if no_avx512 {
                command.env("DROVER_KERNELS", "avx2");
            }
            json(&output(
                command
                    .args([
                        "bench",
                        "--json",
                        "--threads",
                        &threads,
                        "--prefill",
                        prefill,
                        "--decode",
                        decode,
                        "--repeat",
                        repeat,
                        "--model",
                    ])
                    .arg(&model),
            )?)
        };
        let run_theirs = || -> Result<serde_json::Value, String> {
            json(&output(
                Command::new(&python)
                    .arg(workspace().join("workers/reference/bench.py"))
                    .arg(&model)
                    .args([prefill, decode, &threads, repeat]),
            )?)
        };
        let mut rounds = Vec::new();
        for round in 0..ROUNDS {
            let (ours, theirs) = if round % 2 == 0 {
                let ours = run_ours()?;
                (ours, run_theirs()?)
            } else {
                let theirs = run_theirs()?;
                (run_ours()?, theirs)
            };
            rounds.push((ours, theirs));
        }
        if ty == types[0] {
            let set = rounds[0].0["kernels"].as_str().unwrap_or("?");
            println!("(drover-worker's kernels: {set})");
        }
        let best = |side: fn(&(serde_json::Value, serde_json::Value)) -> &serde_json::Value,
                    k: &str| {
            rounds
                .iter()
                .map(|r| f(side(r), k))
                .fold(f64::NAN, f64::max)
        };
        let spread = |k: &str| {
            let ratios: Vec<f64> = rounds.iter().map(|(o, t)| f(o, k) / f(t, k)).collect();
            let lo = ratios.iter().copied().fold(f64::NAN, f64::min);
            let hi = ratios.iter().copied().fold(f64::NAN, f64::max);
            format!("[{lo:.2}-{hi:.2}x]")
        };
        let (d, dl) = (
            best(|r| &r.0, "decode_tokens_per_s"),
            best(|r| &r.1, "decode_tokens_per_s"),
        );
        let (p, pl) = (
            best(|r| &r.0, "prefill_tokens_per_s"),
            best(|r| &r.1, "prefill_tokens_per_s"),
        );
        // The bandwidth share of our fastest decode; the largest RSS seen.
        let fastest = rounds
            .iter()
            .map(|r| &r.0)
            .max_by(|a, b| f(a, "decode_tokens_per_s").total_cmp(&f(b, "decode_tokens_per_s")))
            .expect("rounds");
        let over = rounds
            .iter()
            .map(|(o, _)| f(o, "peak_rss_bytes") - f(o, "weight_bytes") - f(o, "kv_bytes"))
            .fold(f64::NAN, f64::max);
        println!(
            "{ty:<8} {d:>10.2} {dl:>10.2} {:>5.2}x {:>13} {p:>11.1} {pl:>11.1} {:>5.2}x {:>13} {:>8.0}% {:>6.1} MiB",
            d / dl,
            spread("decode_tokens_per_s"),
            p / pl,
            spread("prefill_tokens_per_s"),
            100.0 * f(fastest, "decode_bandwidth_fraction"),
            over / 1048576.0
        );
    }
    println!(
        "targets: decode >= 1.0x llama.cpp and >= 50% of the copy bandwidth, prefill >= 0.7x, RSS over weights + KV <= 64 MiB"
    );
    Ok(())
}
