//! `drover-worker stage`: one pipeline stage as a process, driven by its
//! agent over the stage protocol ([`crate::wire`]) on stdin and stdout.

use super::CliResult;
use crate::model::{Logits, Stage, StageInput, StageOutput};
use crate::sample::Sampler;
use crate::wire::{
    FrameError, FrameReader, Input, OutputKind, Reply, Request, VERSION, write_frame,
};
use std::path::PathBuf;

/// Arguments of `stage`.
#[derive(clap::Args)]
pub struct StageArgs {
    /// The GGUF file (or this stage's slice of it).
    #[arg(long)]
    pub model: PathBuf,
    /// The blocks to run, `START..END`.
    #[arg(long)]
    pub layers: String,
    /// Context positions (0: the model's).
    #[arg(long, default_value_t = 0)]
    pub ctx: usize,
    /// The sampler (on the last stage).
    #[command(flatten)]
    pub sampling: super::SamplingArgs,
    /// Worker threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Parses `START..END`.
pub fn parse_layers(s: &str) -> Result<std::ops::Range<usize>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("--layers {s}: expected START..END"))?;
    let n = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|e| format!("--layers {s}: {e}"))
    };
    Ok(n(a)?..n(b)?)
}

/// Serves the stage until `Stop` or the end of stdin.
pub fn stage(a: &StageArgs) -> CliResult {
    super::generate::set_threads(a.threads)?;
    let layers = parse_layers(&a.layers)?;
    let mut stage = Stage::open(&a.model, layers.clone(), a.ctx).map_err(|e| e.to_string())?;
    let mut sampler = a.sampling.sampler();
    let mut out = std::io::stdout().lock();
    let mut input = FrameReader::new(std::io::stdin().lock());
    let send = |out: &mut std::io::StdoutLock, r: &Reply| {
        write_frame(out, r).map_err(|e| format!("stdout: {e}"))
    };
    let c = stage.config().clone();
    send(
        &mut out,
        &Reply::Ready {
            version: VERSION,
            first_layer: layers.start as u32,
            end_layer: layers.end as u32,
            embedding: c.embedding as u32,
            vocab: c.vocab as u32,
            bytes_mapped: stage.bytes_mapped(),
        },
    )?;
    eprintln!(
        "stage {}..{} ready: {} bytes mapped, context {}",
        layers.start,
        layers.end,
        stage.bytes_mapped(),
        stage.context()
    );
    loop {
        let request = match input.read::<Request>() {
            Ok(r) => r,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => {
                let reason = format!("stdin: {e}");
                send(
                    &mut out,
                    &Reply::Fault {
                        seq: 0,
                        reason: reason.clone(),
                    },
                )?;
                return Err(reason);
            }
        };
        match request {
            Request::Stop => return Ok(()),
            Request::Truncate { pos } => stage.truncate(pos as usize),
            Request::Forward {
                seq,
                pos,
                input,
                output,
            } => {
                let reply = step(&mut stage, &mut sampler, seq, pos, input, output);
                send(&mut out, &reply)?;
            }
        }
    }
}

fn step(
    stage: &mut Stage,
    sampler: &mut Sampler,
    seq: u64,
    pos: u32,
    input: Input,
    output: OutputKind,
) -> Reply {
    if pos as usize != stage.position() {
        return Reply::Fault {
            seq,
            reason: format!(
                "a batch at position {pos}, the stage is at {}",
                stage.position()
            ),
        };
    }
    let logits = match output {
        OutputKind::AllLogits => Logits::All,
        OutputKind::Token | OutputKind::LastLogits => Logits::Last,
    };
    let result = match &input {
        Input::Tokens(t) => stage.forward(StageInput::Tokens(t), logits),
        Input::Activations(a) => stage.forward(StageInput::Activations(a), logits),
    };
    match (result, output) {
        (Ok(StageOutput::Activations(data)), _) => Reply::Activations { seq, data },
        (Ok(StageOutput::Logits(l)), OutputKind::Token) => Reply::Token {
            seq,
            id: sampler.sample(&l),
        },
        (Ok(StageOutput::Logits(data)), _) => Reply::Logits { seq, data },
        (Err(e), _) => Reply::Fault {
            seq,
            reason: e.to_string(),
        },
    }
}
