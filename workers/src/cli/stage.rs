//! `drover-worker stage`: one pipeline stage as a process, driven by its
//! agent over the stage protocol ([`crate::wire`]) on stdin and stdout.

use super::CliResult;
use crate::model::{Backend, Logits, Stage, StageInput, StageOutput};
use crate::sample::Sampler;
use crate::sample::Sampling;
use crate::wire::{
    FrameError, FrameReader, Input, Load, OutputKind, Reply, Request, VERSION, encode_frame,
    write_frame,
};
use std::fs::File;
use std::io::{Stdin, Write};
use std::path::PathBuf;

/// Arguments of `stage`.
#[derive(clap::Args)]
pub struct StageArgs {
    /// The GGUF file (or this stage's slice of it). Without it the worker
    /// says `Hello` and waits for a `Load` request (how an agent runs it).
    #[arg(long, requires = "layers")]
    pub model: Option<PathBuf>,
    /// The blocks to run, `START..END`.
    #[arg(long, requires = "model")]
    pub layers: Option<String>,
    /// Context positions (0: the model's).
    #[arg(long, default_value_t = 0)]
    pub ctx: usize,
    /// The sampler (on the last stage).
    #[command(flatten)]
    pub sampling: super::SamplingArgs,
    /// Worker threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// `cpu` or `cuda`: where the stage's blocks run (with `--model`;
    /// without it, the agent's `Load` names the backend).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// The processor that the thread reading and answering requests runs
    /// on (its agent runs on the same one, so a step's hand-offs between
    /// the two stay on one processor); the stage's other threads run on
    /// any.
    #[arg(long)]
    pub serve_cpu: Option<usize>,
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

/// What a stage is loaded with.
struct Loaded {
    stage: Stage,
    sampling: Sampling,
    sampler: Sampler,
    /// The stage's own threads when its `Load` named a count; the global
    /// pool (`--threads`, else every core) otherwise.
    pool: Option<rayon::ThreadPool>,
}

/// The pool of `threads` threads (0: none of its own).
fn pool(threads: u32) -> Result<Option<rayon::ThreadPool>, String> {
    if threads == 0 {
        return Ok(None);
    }
    if threads > crate::wire::MAX_THREADS {
        return Err(format!(
            "Load: threads {threads} is more than {}",
            crate::wire::MAX_THREADS
        ));
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads as usize)
        .build()
        .map(Some)
        .map_err(|e| format!("a pool of {threads} threads: {e}"))
}

/// The worker's stdout without `std::io::Stdout`'s line buffer, which
/// writes a binary frame in pieces (up to its last newline byte, then the
/// rest), each a wake-up of the agent reading it.
fn raw_stdout() -> Result<File, String> {
    use std::os::fd::AsFd;
    std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(File::from)
        .map_err(|e| format!("stdout: {e}"))
}

fn send(out: &mut File, reply: &Reply) -> CliResult {
    write_frame(out, reply).map_err(|e| format!("stdout: {e}"))
}

/// Opens the stage and says `Ready`.
fn load(
    out: &mut File,
    model: &std::path::Path,
    layers: std::ops::Range<usize>,
    ctx: usize,
    sampling: Sampling,
    threads: u32,
    backend: Backend,
) -> Result<Loaded, String> {
    backend.check()?;
    let pool = pool(threads)?;
    let stage = Stage::open_on(model, layers.clone(), ctx, backend).map_err(|e| e.to_string())?;
    let c = stage.config().clone();
    send(
        out,
        &Reply::Ready {
            version: VERSION,
            first_layer: layers.start as u32,
            end_layer: layers.end as u32,
            embedding: c.embedding as u32,
            vocab: c.vocab as u32,
            bytes_mapped: stage.bytes_mapped(),
        },
    )?;
    let threads = pool
        .as_ref()
        .map_or_else(rayon::current_num_threads, |p| p.current_num_threads());
    errln!(
        "stage {}..{} ready: {} bytes mapped, context {}, {threads} thread(s)",
        layers.start,
        layers.end,
        stage.bytes_mapped(),
        stage.context()
    );
    Ok(Loaded {
        stage,
        sampling,
        sampler: Sampler::new(sampling),
        pool,
    })
}

/// Reads the next request; a frame that does not decode is answered with a
/// fault naming its offset, then the worker exits with it.
fn next_request(out: &mut File, input: &mut FrameReader<Stdin>) -> Result<Option<Request>, String> {
    match input.read::<Request>() {
        Ok(r) => Ok(Some(r)),
        Err(FrameError::Closed) => Ok(None),
        Err(e) => {
            let reason = format!("stdin: {e}");
            send(
                out,
                &Reply::Fault {
                    seq: 0,
                    reason: reason.clone(),
                },
            )?;
            Err(reason)
        }
    }
}

/// Waits for `Load` (a worker started without `--model`); the `Load`
/// names the backend.
fn await_load(out: &mut File, input: &mut FrameReader<Stdin>) -> Result<Option<Loaded>, String> {
    send(out, &Reply::Hello { version: VERSION })?;
    loop {
        match next_request(out, input)? {
            None | Some(Request::Stop) => return Ok(None),
            Some(Request::Load(Load {
                model,
                first_layer,
                end_layer,
                ctx,
                sampling,
                threads,
                backend,
            })) => {
                let sampling = Sampling {
                    temperature: sampling.temperature,
                    top_k: sampling.top_k as usize,
                    top_p: sampling.top_p,
                    seed: sampling.seed,
                };
                let layers = first_layer as usize..end_layer as usize;
                let ctx = ctx as usize;
                match load(out, model.as_ref(), layers, ctx, sampling, threads, backend) {
                    Ok(loaded) => return Ok(Some(loaded)),
                    // The agent hears why and may stop the worker.
                    Err(reason) => send(out, &Reply::Fault { seq: 0, reason })?,
                }
            }
            Some(other) => {
                let reason = format!("{other:?} before Load");
                send(out, &Reply::Fault { seq: 0, reason })?;
            }
        }
    }
}

/// Serves the stage until `Stop` or the end of stdin.
pub fn stage(a: &StageArgs) -> CliResult {
    let backend = Backend::parse(&a.backend)?;
    backend.check()?;
    super::generate::set_threads(a.threads)?;
    let mut out = raw_stdout()?;
    let mut input = FrameReader::new(std::io::stdin());
    let loaded = match (&a.model, &a.layers) {
        (Some(model), Some(layers)) => {
            let sampling = a.sampling.sampler_settings();
            Some(load(
                &mut out,
                model,
                parse_layers(layers)?,
                a.ctx,
                sampling,
                0,
                backend,
            )?)
        }
        _ => await_load(&mut out, &mut input)?,
    };
    let Some(mut loaded) = loaded else {
        return Ok(());
    };
    // The loop runs on a thread of the stage's pool, reading and writing
    // the pipes itself: a step then starts and ends on the thread that
    // computes it, with no hand-off to the pool and back per token.
    let serve_cpu = a.serve_cpu;
    let mut run = || {
        if let Some(cpu) = serve_cpu
            && let Err(e) = crate::affinity::restrict(&[cpu])
        {
            errln!("--serve-cpu {cpu}: {e}; the serving thread runs on any processor");
        }
        serve(
            &mut loaded.stage,
            &mut loaded.sampler,
            loaded.sampling,
            &mut out,
            &mut input,
        )
    };
    match loaded.pool.take() {
        Some(pool) => pool.install(run),
        None => rayon::scope(|_| run()),
    }
}

/// Answers requests until `Stop` or the end of stdin.
fn serve(
    stage: &mut Stage,
    sampler: &mut Sampler,
    sampling: Sampling,
    out: &mut File,
    input: &mut FrameReader<Stdin>,
) -> CliResult {
    loop {
        let Some(request) = next_request(out, input)? else {
            return Ok(());
        };
        match request {
            Request::Stop => return Ok(()),
            Request::Truncate { pos } => stage.truncate(pos as usize),
            Request::Load(_) => {
                let reason = "a second Load: a worker runs one stage".to_owned();
                send(out, &Reply::Fault { seq: 0, reason })?;
            }
            Request::Forward {
                seq,
                pos,
                input,
                output,
            } => {
                // A request starts at position 0; its draws start from the seed.
                if pos == 0 {
                    *sampler = Sampler::new(sampling);
                }
                let reply = step(stage, sampler, seq, pos, input, output);
                match encode_frame(&reply) {
                    Ok(frame) => out.write_all(&frame).map_err(|e| format!("stdout: {e}"))?,
                    // Too large for a frame (a batch's logits of every
                    // position, or activations of too many tokens): the
                    // step is undone (its positions leave the cache, as
                    // for any other fault), the agent hears why, and the
                    // worker serves on.
                    Err(e) => {
                        stage.truncate(pos as usize);
                        let reason = format!("the reply to step {seq}: {e}");
                        send(out, &Reply::Fault { seq, reason })?;
                    }
                }
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
