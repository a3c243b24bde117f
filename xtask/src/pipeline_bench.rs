//! `cargo xtask bench pipeline`: the pipeline on local nodes, side by side
//! with one `drover-worker` process on the same model: decode tokens/s for
//! 1 to 4 stages and the time each extra stage adds per token, a 512-token
//! prefill on N stages against one, and the wall time from `drover up
//! examples/pipeline.toml` to the first token of a prompt.

mod hops;

use crate::worker::{bench_dir, bench_model, stories};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long `up` may take to serve.
const SERVE_BOUND: Duration = Duration::from_secs(600);

fn workspace() -> PathBuf {
    xtask::workspace_root()
}

fn build() -> Result<PathBuf, String> {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--release",
            "--locked",
            "-p",
            "runtime-real",
            "-p",
            "workers",
        ])
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("the release build failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from);
    Ok(target.join("release"))
}

/// A plan of `nodes` local nodes, each stage's worker with `threads`
/// threads (0: every core). `DROVER_WORKER` in this process's environment
/// names the agents' worker binary (to compare two builds of it; the local
/// provider gives its nodes a clean environment).
fn plan(model: &Path, nodes: u32, threads: u32, state: &Path) -> Result<PathBuf, String> {
    let worker = match std::env::var("DROVER_WORKER") {
        // It goes into a quoted shell word inside a TOML string.
        Ok(w) if w.contains(['\'', '"', '\\']) => {
            return Err(format!(
                "DROVER_WORKER={w}: a path with quotes or backslashes is not supported"
            ));
        }
        Ok(w) => format!("DROVER_WORKER='{w}' "),
        Err(_) => String::new(),
    };
    let text = format!(
        r#"run_id = 1
[model]
path = "{model}"
[pipeline]
group = "workers"
threads = {threads}
[prompt]
rpc_addr = "127.0.0.1:0"
[[group]]
name = "workers"
role = "worker"
count = {nodes}
provider = "local"
[group.shape]
image = "local"
disk_gb = 1
[group.boot]
ssh_user = "drover"
verify_commands = ["true"]
start_command = "{worker}DROVER_JOIN_TOKEN='${{JOIN_TOKEN}}' DROVER_CACHE_DIR={cache} nohup drover-agent --join '${{ORCH_ADDR}}' --node '${{LOGICAL_NODE_ID}}' > agent.log 2>&1 &"
"#,
        model = model.display(),
        cache = bench_dir().join("slice-cache").display(),
    );
    std::fs::create_dir_all(state).expect("bench state dir");
    let path = state.with_extension("toml");
    std::fs::write(&path, text).expect("bench plan");
    Ok(path)
}

/// A `drover up` serving until dropped.
struct Up {
    child: Child,
    state: PathBuf,
}

impl Up {
    fn start(bin: &Path, plan: &Path, state: &Path) -> Result<(Up, Duration), String> {
        let _ = std::fs::remove_dir_all(state);
        let started = Instant::now();
        let mut child = Command::new(bin.join("drover"))
            .arg("--state-dir")
            .arg(state)
            .args(["--json", "up"])
            .arg(plan)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdout = child.stdout.take().expect("piped");
        let up = Up {
            child,
            state: state.to_owned(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let serving = line.contains("\"serving\"") || line.starts_with("ready:");
                if serving && tx.send(()).is_err() {
                    return;
                }
            }
        });
        rx.recv_timeout(SERVE_BOUND)
            .map_err(|_| format!("`drover up {}` did not serve in time", plan.display()))?;
        Ok((up, started.elapsed()))
    }

    fn addr(&self) -> Result<String, String> {
        let path = self.state.join("prompt.addr");
        std::fs::read_to_string(&path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = writeln!(stdin, "stop");
        }
        let _ = self.child.wait();
    }
}

/// One prompt: (time to first text, decode tokens/s after it, tokens).
fn prompt(addr: &str, text: &str, max_tokens: u32) -> Result<(Duration, f64, u64), String> {
    let mut conn = TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    let request = serde_json::json!({"SubmitPrompt": {"request_id": 1, "prompt_text": text, "max_tokens": max_tokens}});
    let sent = Instant::now();
    writeln!(conn, "{request}").map_err(|e| e.to_string())?;
    let mut first = None;
    for line in BufReader::new(conn).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let msg: serde_json::Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
        if msg.get("TextDelta").is_some() && first.is_none() {
            first = Some(Instant::now());
        } else if let Some(done) = msg.get("Done") {
            let tokens = done["tokens"].as_u64().unwrap_or(0);
            let first = first.unwrap_or_else(Instant::now);
            let decode = first.elapsed().as_secs_f64();
            let rate = if tokens > 1 && decode > 0.0 {
                (tokens - 1) as f64 / decode
            } else {
                0.0
            };
            return Ok((first.duration_since(sent), rate, tokens));
        } else if msg.get("Fault").is_some() || msg.get("ProtocolError").is_some() {
            return Err(format!("the prompt failed: {line}"));
        }
    }
    Err("the connection closed before Done".into())
}

/// One process, the same model: decode tokens/s from `drover-worker bench`
/// (`threads` 0: every core).
fn one_process(bin: &Path, model: &Path, decode: u32, threads: u32) -> Result<f64, String> {
    let mut command = Command::new(bin.join("drover-worker"));
    command.args(["bench", "--model"]).arg(model);
    if threads > 0 {
        command.args(["--threads", &threads.to_string()]);
    }
    let out = command
        .args(["--prefill", "8", "--decode", &decode.to_string(), "--json"])
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or("no bench JSON")?;
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    v["decode_tokens_per_s"]
        .as_f64()
        .ok_or_else(|| format!("no decode_tokens_per_s in {line}"))
}

const STORY: &str =
    "Once upon a time, there was a little girl named Lily. She loved to play outside. ";

/// Prompt tokens of the prefill measurement.
const PREFILL_TOKENS: usize = 512;

/// A prompt of about `tokens` tokens for `model` (repetitions of
/// [`STORY`]) and its length as the model's tokenizer counts it (a
/// fixture's made-up vocabulary cuts English finer than a trained one).
fn long_prompt(bin: &Path, model: &Path, tokens: usize) -> Result<(String, usize), String> {
    let count = |text: &str| -> Result<usize, String> {
        let out = Command::new(bin.join("drover-worker"))
            .args(["generate", "--json", "--max-tokens", "1", "--model"])
            .arg(model)
            .args(["--prompt", text])
            .output()
            .map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("drover-worker generate: {e}"))?;
        v["prompt_tokens"]
            .as_array()
            .map(Vec::len)
            .ok_or_else(|| "no prompt_tokens from drover-worker generate".to_owned())
    };
    let per_story = count(&STORY.repeat(4))? as f64 / 4.0;
    let repeats = ((tokens as f64 / per_story).round() as usize).max(1);
    let text = STORY.repeat(repeats);
    let n = count(&text)?;
    Ok((text, n))
}

/// One table of [`stage_rates`].
struct Rates<'a> {
    /// The model.
    model: &'a Path,
    /// Its folder under the bench dir.
    name: &'a str,
    /// Tokens per request.
    decode: u32,
    /// Interleaved rounds: the best and the median are shown.
    repeats: u32,
    /// Threads of each stage's worker (0: every core).
    threads: u32,
    /// A long prompt and its tokens, to time its prefill on 1 and 4
    /// stages.
    prefill: Option<(&'a str, usize)>,
    /// One process's decode tokens/s, to compare with.
    reference: Option<f64>,
}

/// Decode tokens/s on 1 to 4 stages, with the time each extra stage adds
/// per token. The four pipelines serve side by side (idle ones cost
/// nothing) and take their requests in turns, `repeats` rounds of one
/// request of `decode` tokens each, the best and the median shown: a
/// drift of the machine's speed then touches every stage count alike.
fn stage_rates(bin: &Path, r: &Rates<'_>) -> Result<(), String> {
    let Rates {
        model,
        name,
        decode,
        repeats,
        threads,
        prefill,
        reference,
    } = *r;
    let root = bench_dir().join("pipeline").join(name);
    let mut ups = Vec::new();
    for stages in 1..=4u32 {
        let state = root.join(format!("s{stages}"));
        let (up, _) = Up::start(bin, &plan(model, stages, threads, &state)?, &state)?;
        let addr = up.addr()?;
        // A warm-up request first: the slices are mapped and paged in.
        prompt(&addr, "Once upon a time", 4)?;
        ups.push((up, addr));
    }
    let mut all: [Vec<f64>; 4] = Default::default();
    for _ in 0..repeats {
        for (rates, (_, addr)) in all.iter_mut().zip(&ups) {
            rates.push(prompt(addr, "Once upon a time", decode)?.1);
        }
    }
    // The best round of each (what the machine can do when nothing else
    // gets in the way) and the median one (what a user waits for).
    let best = all.clone().map(|r| r.into_iter().fold(0.0, f64::max));
    let median = all.map(|mut r| {
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    });
    let added = |rates: &[f64; 4], n: u32| {
        let per = (1.0 / rates[n as usize - 1] - 1.0 / rates[0]) / f64::from(n - 1);
        format!("{:.0} µs", per * 1e6)
    };
    println!(
        "stages  decode tok/s  ms/token  vs 1 process  added per token per extra stage  median ms/token  added (medians)"
    );
    for (n, rate) in (1u32..).zip(best) {
        let (best_added, median_added) = match n {
            1 => ("-".to_owned(), "-".to_owned()),
            n => (added(&best, n), added(&median, n)),
        };
        let ratio = reference.map_or("-".to_owned(), |r| format!("{:.2}x", rate / r));
        println!(
            "{n:<7} {rate:<13.1} {:<9.3} {ratio:<13} {best_added:<32} {:<16.3} {median_added}",
            1e3 / rate,
            1e3 / median[n as usize - 1]
        );
    }
    if let Some((text, tokens)) = prefill {
        for (stages, (_, addr)) in [(1, &ups[0]), (4, &ups[3])] {
            let (ttft, _, _) = prompt(addr, text, 1)?;
            let ms = ttft.as_secs_f64() * 1e3;
            println!(
                "prefill of {tokens} prompt tokens on {stages} stage(s): {ms:.0} ms to the first token ({:.0} tokens/s)",
                tokens as f64 / ttft.as_secs_f64()
            );
        }
    }
    Ok(())
}

/// The benchmark; `hop_only`: just the hop tables.
pub fn bench_pipeline(hop_only: bool) -> Result<(), String> {
    let bin = build()?;
    if hop_only {
        return hops::hops(&bin);
    }
    let model = bench_model(&bin.join("drover-worker"), "0.5b", "q8_0")?;
    let decode = 96;
    println!(
        "model {} (0.5b shape, q8_0); {decode} decode tokens, 3 interleaved rounds (the best and the median); local nodes",
        model.display()
    );
    let reference = one_process(&bin, &model, decode, 0)?;
    println!("one drover-worker process: decode {reference:.1} tokens/s");
    let (text, tokens) = long_prompt(&bin, &model, PREFILL_TOKENS)?;
    let mut rates = Rates {
        model: &model,
        name: "q8_0",
        decode,
        repeats: 3,
        threads: 0,
        prefill: Some((&text, tokens)),
        reference: Some(reference),
    };
    stage_rates(&bin, &rates)?;
    // The same with one thread per stage (`[pipeline] threads = 1`): the
    // co-located stages then leave a core to the agents and the
    // orchestrator, so what an extra stage adds is the pipeline's own cost,
    // as on machines of their own.
    let reference = one_process(&bin, &model, decode, 1)?;
    println!(
        "the same model, one thread per stage ([pipeline] threads = 1); one drover-worker process with --threads 1: decode {reference:.1} tokens/s"
    );
    rates.name = "q8_0-1t";
    rates.threads = 1;
    rates.prefill = None;
    rates.reference = Some(reference);
    stage_rates(&bin, &rates)?;
    hops::hops(&bin)?;
    // The README's example, from `up` to the first token.
    let state = bench_dir().join("pipeline").join("example");
    let example = workspace().join("examples/pipeline.toml");
    let (up, served) = Up::start(&bin, &example, &state)?;
    let (ttft, _, _) = prompt(&up.addr()?, "Once upon a time", 8)?;
    let total = served + ttft;
    println!(
        "drover up examples/pipeline.toml ({}): serving after {:.0} ms, first token after {:.0} ms (target 1500 ms; prompt TTFT {:.1} ms)",
        stories().display(),
        served.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
        ttft.as_secs_f64() * 1e3
    );
    drop(up);
    Ok(())
}
