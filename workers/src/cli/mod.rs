//! The `drover-worker` subcommands.

mod bench;
mod generate;
mod inspect;

pub use bench::{BenchArgs, bench};
pub use generate::{GenerateArgs, generate};
pub use inspect::inspect;

use crate::fixture::{Shape, make_model as make};
use crate::gguf::file::ModelFile;
use crate::tensor::GgmlType;
use std::path::Path;

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
    let ty = match GgmlType::from_name(ty) {
        Some(t) if t != GgmlType::Q8K => t,
        _ => {
            return Err(format!(
                "--type {ty}: one of f32, f16, bf16, q8_0, q4_0, q4_k, q6_k"
            ));
        }
    };
    let vocab = match vocab_from {
        Some(p) => Some(
            ModelFile::open(p)
                .map_err(|e| e.to_string())?
                .header()
                .clone(),
        ),
        None => None,
    };
    eprintln!(
        "making a {} model: {} parameters, {} weights, seed {seed}",
        shape.arch,
        shape.parameters(),
        ty
    );
    let model = make(&shape, ty, seed, vocab.as_ref()).map_err(|e| format!("--vocab-from: {e}"))?;
    model
        .write_file(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
