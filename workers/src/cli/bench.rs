//! `drover-worker bench`: prefill and decode tokens/s on one model.

use super::CliResult;
use crate::engine::Chain;
use crate::model::{Backend, Logits};
use crate::sample::greedy;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// The GGUF file.
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt tokens to prefill.
    #[arg(long, default_value_t = 512)]
    pub prefill: usize,
    /// Tokens to decode after the prompt.
    #[arg(long, default_value_t = 64)]
    pub decode: usize,
    /// Worker threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// `cpu` or `cuda`.
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Repetitions; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs the benchmark.
pub fn bench(a: &BenchArgs) -> CliResult {
    let backend = Backend::parse(&a.backend)?;
    backend.check()?;
    super::generate::set_threads(a.threads)?;
    // The GPU's copy bandwidth is measured before the model takes its
    // memory (the copy needs 2 GiB); where it cannot be, the benchmark
    // still runs and says so, without decode's share of it.
    let gpu_bandwidth = match backend {
        Backend::Cuda => match crate::cuda::copy_bandwidth() {
            Ok(b) => Some(b),
            Err(e) => {
                errln!("bench: {e}: decode's share of the GPU's bandwidth is not measured");
                None
            }
        },
        _ => None,
    };
    let load_start = Instant::now();
    let context = a.prefill + a.decode + 1;
    let mut chain = Chain::open_on(&a.model, &[], context, backend).map_err(|e| e.to_string())?;
    let load_s = load_start.elapsed().as_secs_f64();
    let vocab = chain.first().config().vocab as u32;
    // A fixed, varied prompt: every id but the special ones, in a stride.
    let prompt: Vec<u32> = (0..a.prefill as u32)
        .map(|i| 3 + (i * 7919) % (vocab - 3))
        .collect();
    // On a thread of the pool, as a pipeline stage runs its steps: the
    // products' parallel parts then start there, not by waking the pool
    // from outside and sleeping until it is done.
    let (best_prefill, best_decode) = rayon::scope(|_| -> Result<(f64, f64), String> {
        let (mut best_prefill, mut best_decode) = (f64::MAX, f64::MAX);
        for _ in 0..a.repeat.max(1) {
            chain.truncate(0);
            let t = Instant::now();
            let logits = chain
                .forward(&prompt, Logits::Last)
                .map_err(|e| e.to_string())?;
            best_prefill = best_prefill.min(t.elapsed().as_secs_f64());
            let mut next = greedy(&logits);
            let t = Instant::now();
            for _ in 0..a.decode {
                let logits = chain
                    .forward(&[next], Logits::Last)
                    .map_err(|e| e.to_string())?;
                next = greedy(&logits);
            }
            best_decode = best_decode.min(t.elapsed().as_secs_f64());
        }
        Ok((best_prefill, best_decode))
    })?;
    let peak_rss = peak_rss_bytes();
    // The bound is the memory the weights are read from: the GPU's own
    // for a CUDA stage, else the host's.
    let bandwidth = match backend {
        Backend::Cuda => gpu_bandwidth,
        _ => Some(copy_bandwidth()),
    };
    let prefill_tps = a.prefill as f64 / best_prefill;
    let decode_tps = a.decode as f64 / best_decode;
    let bytes = chain.first().bytes_mapped();
    let kernels = chain.first().describe();
    let c = chain.first().config().clone();
    let kv_bytes = (2 * c.blocks * c.kv_dim() * chain.first().context() * 4) as u64;
    // Decode reads every weight once per token, and the KV cache filled so far.
    let kv_read = (2 * c.blocks * c.kv_dim() * (a.prefill + a.decode / 2) * 4) as f64;
    let fraction = bandwidth.map(|b| (bytes as f64 + kv_read) * decode_tps / b);
    let threads = rayon::current_num_threads();
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "model": a.model.display().to_string(), "kernels": kernels, "threads": threads,
                "load_s": load_s, "prefill_tokens": a.prefill, "prefill_tokens_per_s": prefill_tps,
                "decode_tokens": a.decode, "decode_tokens_per_s": decode_tps, "weight_bytes": bytes,
                "kv_bytes": kv_bytes, "peak_rss_bytes": peak_rss, "copy_bandwidth_bytes_per_s": bandwidth,
                "decode_bandwidth_fraction": fraction,
            })
        );
    } else {
        outln!(
            "{}: {kernels} kernels, {threads} threads, loaded in {load_s:.2} s",
            a.model.display()
        );
        outln!(
            "prefill {:>5} tokens: {prefill_tps:>10.1} tokens/s",
            a.prefill
        );
        let share = match (fraction, bandwidth) {
            (Some(f), Some(b)) => {
                format!(
                    ", {:.0}% of the {:.0} GB/s copy bandwidth",
                    f * 100.0,
                    b / 1e9
                )
            }
            _ => String::new(),
        };
        outln!(
            "decode  {:>5} tokens: {decode_tps:>10.1} tokens/s{share}",
            a.decode
        );
    }
    Ok(())
}

/// The process's peak resident set (VmHWM), 0 where /proc is missing.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Bytes per second all threads move copying (read plus write) a
/// 256 MiB buffer, the best of three (the bound decode's reads are held to).
fn copy_bandwidth() -> f64 {
    use rayon::prelude::*;
    let n = 256 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        dst.par_chunks_mut(1 << 20)
            .zip(src.par_chunks(1 << 20))
            .for_each(|(d, s)| d.copy_from_slice(s));
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    // A copy moves each byte twice: once read, once written.
    2.0 * n as f64 / best
}
