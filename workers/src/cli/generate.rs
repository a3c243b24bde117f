//! `drover-worker generate`: complete a prompt, streaming text.

use super::CliResult;
use std::path::PathBuf;

/// Arguments of `generate`.
#[derive(clap::Args)]
pub struct GenerateArgs {
    /// The GGUF file.
    #[arg(long)]
    pub model: PathBuf,
    /// The prompt.
    #[arg(long)]
    pub prompt: String,
    /// Most tokens to generate (0: until end of text or the context).
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Worker threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// `cpu` or `cuda`.
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Context positions (0: the model's).
    #[arg(long, default_value_t = 0)]
    pub ctx: usize,
    /// Layer split to run in-process, e.g. `2,2,1` (the pipeline's stages).
    #[arg(long)]
    pub split: Option<String>,
    /// One JSON object with prompt_tokens, tokens and text.
    #[arg(long)]
    pub json: bool,
}

/// Sizes the thread pool once, before any work.
pub fn set_threads(threads: Option<usize>) -> CliResult {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        if n == 0 {
            return Err("--threads must be at least 1".into());
        }
        b = b.num_threads(n);
    }
    b.build_global().map_err(|e| format!("thread pool: {e}"))
}

/// Runs the completion.
pub fn generate(_a: &GenerateArgs) -> CliResult {
    Err("generate needs the tokenizer".into())
}
