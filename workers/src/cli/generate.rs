//! `drover-worker generate`: complete a prompt, streaming text.

use super::CliResult;
use crate::engine::{Chain, split_from_sizes};
use crate::gguf::file::ModelFile;
use crate::model::{Backend, Logits};
use crate::tokenizer::{Tokenizer, Vocab};
use std::io::Write;
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
    /// The sampler (on the last stage).
    #[command(flatten)]
    pub sampling: super::SamplingArgs,
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
    /// Also writes the logits each token was sampled from to this file:
    /// one row of `vocab` little-endian f32 per sampled step, in order, the
    /// step that sampled the end of text included (so one row more than
    /// `tokens` when the reason is `eos`); for comparing backends
    /// (`workers/gpu-check.sh` does).
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
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
pub fn generate(a: &GenerateArgs) -> CliResult {
    let backend = Backend::parse(&a.backend)?;
    backend.check()?;
    set_threads(a.threads)?;
    let file = ModelFile::open(&a.model).map_err(|e| e.to_string())?;
    let vocab =
        Vocab::from_gguf(file.header()).map_err(|e| format!("{}: {e}", a.model.display()))?;
    let tokenizer = Tokenizer::new(vocab).map_err(|e| format!("{}: {e}", a.model.display()))?;
    drop(file);
    let split = match &a.split {
        None => Vec::new(),
        Some(s) => {
            let sizes = s
                .split(',')
                .map(|n| {
                    n.trim()
                        .parse::<usize>()
                        .map_err(|e| format!("--split {s}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            split_from_sizes(&sizes)
        }
    };
    let mut chain = Chain::open_on(&a.model, &split, a.ctx, backend).map_err(|e| e.to_string())?;
    let prompt = tokenizer.encode(&a.prompt, true);
    let context = chain.first().context();
    if prompt.len() >= context {
        return Err(format!(
            "the prompt's {} tokens fill the context of {context}",
            prompt.len()
        ));
    }
    // On a thread of the pool (see `bench`): the products' parallel parts
    // start there instead of waking the pool from outside.
    rayon::scope(|_| complete(a, &tokenizer, &mut chain, &prompt))
}

/// Samples and streams the completion of `prompt`.
fn complete(
    a: &GenerateArgs,
    tokenizer: &Tokenizer,
    chain: &mut Chain,
    prompt: &[u32],
) -> CliResult {
    let context = chain.first().context();
    let mut sampler = a.sampling.sampler();
    let mut decoder = tokenizer.decoder();
    let mut out = std::io::stdout().lock();
    let mut text = String::new();
    let mut tokens = Vec::new();
    // Opened before any work, so a bad path fails at once.
    let mut logits_out = match &a.logits_out {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| format!("--logits-out {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let finish_logits = |w: Option<std::io::BufWriter<std::fs::File>>| match w {
        Some(mut w) => w.flush().map_err(|e| format!("--logits-out: {e}")),
        None => Ok(()),
    };
    let mut logits = chain
        .forward(prompt, Logits::Last)
        .map_err(|e| e.to_string())?;
    let reason = loop {
        if a.max_tokens > 0 && tokens.len() >= a.max_tokens {
            break "max_tokens";
        }
        if let Some(w) = logits_out.as_mut() {
            let bytes: Vec<u8> = logits.iter().flat_map(|x| x.to_le_bytes()).collect();
            w.write_all(&bytes)
                .map_err(|e| format!("--logits-out: {e}"))?;
        }
        let next = sampler.sample(&logits);
        if tokenizer.is_eog(next) {
            break "eos";
        }
        tokens.push(next);
        let piece = decoder.push(next);
        if !a.json && !piece.is_empty() {
            match out.write_all(piece.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => {}
                // A reader that closed stdout (`| head`) wants no more.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return finish_logits(logits_out);
                }
                Err(e) => return Err(format!("stdout: {e}")),
            }
        }
        text.push_str(&piece);
        if chain.position() >= context {
            break "context";
        }
        logits = chain
            .forward(&[next], Logits::Last)
            .map_err(|e| e.to_string())?;
    };
    finish_logits(logits_out)?;
    let rest = decoder.finish();
    text.push_str(&rest);
    let written = if a.json {
        let json = serde_json::json!({
            "prompt_tokens": prompt, "tokens": tokens, "text": text, "reason": reason,
        });
        writeln!(out, "{json}")
    } else {
        writeln!(out, "{rest}")
    };
    match written.and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}
