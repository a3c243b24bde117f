//! The `drover-worker` subcommands.

/// `println!` that never panics: a reader that closed stdout (`| head`)
/// has what it wanted. True while stdout takes the line.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::line(&format!($($arg)*))
    };
}

/// `eprintln!` that never panics: a line about the work, which goes on
/// whether or not anyone reads it.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::err_line(&format!($($arg)*))
    };
}

mod bench;
mod cuda;
mod generate;
mod inspect;
mod stage;

pub use bench::{BenchArgs, bench};
pub use cuda::cuda_compile;
pub use generate::{GenerateArgs, generate};
pub use inspect::inspect;
pub use stage::{StageArgs, parse_layers, stage};

use crate::fixture::{Recipe, Shape, make_model as make};
use crate::gguf::file::ModelFile;
use std::path::Path;

/// The sampler's flags, shared by `generate` and `stage`.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct SamplingArgs {
    /// Sampling temperature, 0 to 100 (0: greedy).
    #[arg(long, default_value_t = 0.0, value_parser = temperature)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling threshold, 0 to 1 (1: off).
    #[arg(long, default_value_t = 1.0, value_parser = top_p)]
    pub top_p: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `--temperature`: a number from 0 to 100, as a plan's `[sampling]`
/// takes it.
fn temperature(s: &str) -> Result<f32, String> {
    number_within(s, 100.0)
}

/// `--top-p`: a number from 0 to 1.
fn top_p(s: &str) -> Result<f32, String> {
    number_within(s, 1.0)
}

fn number_within(s: &str, max: f32) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if (0.0..=max).contains(&x) => Ok(x),
        Ok(_) => Err(format!("not a number from 0 to {max}")),
        Err(e) => Err(e.to_string()),
    }
}

impl SamplingArgs {
    /// The settings these flags describe.
    pub fn sampler_settings(&self) -> crate::sample::Sampling {
        crate::sample::Sampling {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        }
    }

    /// The sampler these flags describe.
    pub fn sampler(&self) -> crate::sample::Sampler {
        crate::sample::Sampler::new(self.sampler_settings())
    }
}

/// Writes `text` and a newline to stdout and flushes; false when that
/// failed (its reader is gone, most likely).
pub(crate) fn line(text: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .is_ok()
}

/// Writes `text` and a newline to stderr, whatever becomes of it.
pub fn err_line(text: &str) {
    use std::io::Write;
    // One write: a line is not split by another process's on a shared
    // stderr (the terminal `up` and its local nodes write to).
    let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
}

/// A subcommand's failure, printed as `drover-worker: MESSAGE`.
pub type CliResult = Result<(), String>;

/// `drover-worker make-model`.
pub fn make_model(
    shape: &str,
    ty: &str,
    seed: u64,
    vocab_from: Option<&Path>,
    out: &Path,
) -> CliResult {
    let shape = Shape::parse(shape).map_err(|e| format!("--shape: {e}"))?;
    let recipe = Recipe::parse(ty).ok_or_else(|| {
        format!(
            "--type {ty}: one of f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, q3_k_m, q4_k_m, q5_k_m"
        )
    })?;
    let vocab = match vocab_from {
        Some(p) => Some(
            ModelFile::open(p)
                .map_err(|e| e.to_string())?
                .header()
                .clone(),
        ),
        None => None,
    };
    errln!(
        "making a {} model: {} parameters, {} weights, seed {seed}",
        shape.arch,
        shape.parameters(),
        ty.to_lowercase()
    );
    let model =
        make(&shape, recipe, seed, vocab.as_ref()).map_err(|e| format!("--vocab-from: {e}"))?;
    model
        .write_file(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    errln!("wrote {}", out.display());
    Ok(())
}

/// `drover-worker make-golden-fixtures`.
pub fn make_golden_fixtures(vocab_from: &Path, dir: &Path) -> CliResult {
    let vocab = ModelFile::open(vocab_from).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for f in crate::fixture::GOLDEN_FIXTURES {
        let path = dir.join(format!("{}.gguf", f.name));
        f.write(vocab.header(), &path)?;
        outln!("{}={}", f.name, path.display());
    }
    Ok(())
}
