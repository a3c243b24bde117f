//! `drover-worker`: inspect, run, benchmark and make GGUF models.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use workers::cli;

#[derive(Parser)]
#[command(
    name = "drover-worker",
    version,
    about = "drover's compute process: a llama-family GGUF engine"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a model's metadata and tensor table.
    Inspect {
        /// The GGUF file.
        model: PathBuf,
        /// One JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Complete a prompt, streaming the text to stdout.
    Generate(cli::GenerateArgs),
    /// Serve one pipeline stage over the stage protocol on stdin/stdout.
    Stage(cli::StageArgs),
    /// Measure prefill and decode tokens/s.
    Bench(cli::BenchArgs),
    /// Write a model with random weights (the project's fixtures).
    MakeModel {
        /// A preset (tiny, small, 0.5b, 7b) and/or key=value overrides:
        /// arch, dim, layers, heads, kv_heads, head_dim, ff, vocab, ctx,
        /// tied, rope_dims.
        #[arg(long, default_value = "tiny")]
        shape: String,
        /// Weight type: f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, q3_k_m, q4_k_m, q5_k_m.
        #[arg(long = "type", default_value = "f32")]
        ty: String,
        /// Seed of the weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Copy the vocabulary from this GGUF (its size must match the shape's).
        #[arg(long)]
        vocab_from: Option<PathBuf>,
        /// Where to write the model.
        out: PathBuf,
    },
    /// Compile the CUDA kernels with NVRTC (no GPU needed); any warning fails.
    #[command(hide = true)]
    CudaCompile {
        /// The architecture, e.g. sm_90 (H100, H200).
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// Write each source's cubin into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write the golden tests' fixtures (for `cargo xtask reference`).
    #[command(hide = true)]
    MakeGoldenFixtures {
        /// The GGUF whose vocabulary the fixtures share (stories260K).
        #[arg(long)]
        vocab_from: PathBuf,
        /// The directory to write `NAME.gguf` files into.
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    workers::heap::keep_freed_memory();
    let args = Args::parse();
    let result = match args.command {
        Command::Inspect { model, json } => cli::inspect(&model, json),
        Command::Generate(a) => cli::generate(&a),
        Command::Bench(a) => cli::bench(&a),
        Command::Stage(a) => cli::stage(&a),
        Command::MakeModel {
            shape,
            ty,
            seed,
            vocab_from,
            out,
        } => cli::make_model(&shape, &ty, seed, vocab_from.as_deref(), &out),
        Command::CudaCompile { arch, out } => cli::cuda_compile(&arch, out.as_deref()),
        Command::MakeGoldenFixtures { vocab_from, dir } => {
            cli::make_golden_fixtures(&vocab_from, &dir)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            cli::err_line(&format!("drover-worker: {e}"));
            ExitCode::FAILURE
        }
    }
}
