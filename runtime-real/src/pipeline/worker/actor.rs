//! The task that owns a worker's pipes: it reads the `Hello`, then does
//! the jobs in order (load, steps, stop), and sends every answer back to
//! the agent's machine as an input.

use super::super::wire::{EdgeFrame, Payload, Step, WorkerSettings};
use super::Job;
use core_fsm::agent::Input;
use core_fsm::ids::OpId;
use core_fsm::stage;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use workers::wire::{self, OutputKind, Reply, Request};

/// The buffer on the worker's stdout: a decode step's reply (one row of
/// activations) fits whole.
pub(super) const READ_BUFFER: usize = 64 << 10;

/// The worker's stdout, as the agent reads it.
pub(super) type Replies = BufReader<ChildStdout>;

/// Reads one reply frame (u32 little-endian length, postcard).
async fn read_reply(out: &mut Replies) -> Result<Reply, String> {
    let mut len = [0u8; 4];
    out.read_exact(&mut len)
        .await
        .map_err(|e| format!("the worker's stdout: {e}"))?;
    let len = u32::from_le_bytes(len);
    if len > wire::MAX_FRAME_BYTES {
        return Err(format!("the worker sent a frame of {len} bytes"));
    }
    let mut body = vec![0u8; len as usize];
    out.read_exact(&mut body)
        .await
        .map_err(|e| format!("the worker's stdout: {e}"))?;
    postcard::from_bytes(&body).map_err(|e| format!("the worker's reply does not decode: {e}"))
}

async fn write_request(stdin: &mut ChildStdin, request: &Request) -> Result<(), String> {
    let frame = wire::encode_frame(request).map_err(|e| format!("a request to the worker: {e}"))?;
    stdin
        .write_all(&frame)
        .await
        .map_err(|e| format!("the worker's stdin: {e}"))?;
    stdin
        .flush()
        .await
        .map_err(|e| format!("the worker's stdin: {e}"))
}

/// Does the jobs in order; every answer goes back as an input.
pub(super) async fn actor(
    op: OpId,
    stage: u32,
    mut stdin: ChildStdin,
    mut stdout: Replies,
    mut jobs: mpsc::Receiver<Job>,
    inputs: mpsc::Sender<Input>,
    expected: Arc<AtomicBool>,
) {
    match read_reply(&mut stdout).await {
        Ok(Reply::Hello { version }) if version == workers::wire::VERSION => {
            let _ = inputs.send(Input::WorkerReady { op }).await;
        }
        // A worker of another build: its frames would not decode. The
        // machine hears why (the supervisor stays quiet about the exit);
        // the worker's stdin closes, so it exits, and a worker that does
        // not is killed when the machine drops its handle.
        Ok(Reply::Hello { version }) => {
            let reason = format!(
                "the worker speaks stage protocol version {version}, this agent {}",
                workers::wire::VERSION
            );
            crate::transport::agent_log::warn_plain(&reason);
            expected.store(true, Ordering::SeqCst);
            let _ = inputs.send(Input::WorkerExited { op, reason }).await;
            return;
        }
        // The exit (if it exits) is reported by the supervisor.
        Ok(other) => crate::transport::agent_log::warn_plain(&format!(
            "the worker said {other:?} before Hello"
        )),
        Err(e) => crate::transport::agent_log::warn_plain(&e.to_string()),
    }
    let mut position: u32 = 0;
    // The activation row width, known once loaded.
    let mut hidden: u32 = 1;
    // The layers loaded: a stage provisioned again after a repair loads
    // the same slice, which the worker holds already.
    let mut loaded: Option<(u32, u32)> = None;
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Load { layers, life, .. } if loaded == Some(layers) => {
                life.send(&inputs, stage::Input::WeightsReady).await;
            }
            Job::Load {
                model,
                layers,
                settings,
                life,
            } => {
                let result = load(&mut stdin, &mut stdout, &model, layers, settings).await;
                let input = match result {
                    Ok(width) => {
                        hidden = width.max(1);
                        loaded = Some(layers);
                        stage::Input::WeightsReady
                    }
                    Err(reason) => stage::Input::LoadFailed { reason },
                };
                life.send(&inputs, input).await;
            }
            Job::Step {
                mut step,
                last,
                out,
                life,
            } => {
                let seq = step.step;
                let started = std::time::Instant::now();
                let taken = payload_bytes(&step.payload);
                let input = match run_step(
                    &mut stdin,
                    &mut stdout,
                    &mut position,
                    hidden,
                    &mut step,
                    last,
                )
                .await
                {
                    Ok(frame) => {
                        crate::transport::agent_log::worker_telemetry(&telemetry_line(
                            stage,
                            &step,
                            taken,
                            &frame,
                            started.elapsed(),
                        ));
                        // Completed first: the next step this output causes
                        // can only arrive after the machine has heard it.
                        life.send(&inputs, stage::Input::StepCompleted { seq })
                            .await;
                        // A chunk before a prompt's last says nothing
                        // from the last stage.
                        let Some(frame) = frame else {
                            continue;
                        };
                        if out.send(frame).await.is_err() {
                            let reason = "the outbound edge is closed".to_owned();
                            life.send(&inputs, stage::Input::EdgeFault { reason }).await;
                        }
                        continue;
                    }
                    Err(reason) => {
                        // Where the worker's cache stands is not known
                        // now: the next step truncates it to its own
                        // position first.
                        position = u32::MAX;
                        stage::Input::StepFailed { seq, reason }
                    }
                };
                life.send(&inputs, input).await;
            }
            Job::Stop(done) => {
                expected.store(true, Ordering::SeqCst);
                let _ = write_request(&mut stdin, &Request::Stop).await;
                drop(stdin);
                // The worker exits at Stop or at the end of its stdin.
                let mut rest = Vec::new();
                let _ = stdout.read_to_end(&mut rest).await;
                let _ = done.send(());
                return;
            }
        }
    }
}

/// The `worker.telemetry` line of one step (its payload, `taken`, as the
/// step brought it): compact `key=value` pairs, bytes as they cross the
/// edges (4 per token id or f32).
fn telemetry_line(
    stage: u32,
    step: &Step,
    taken: (&'static str, usize),
    out: &Option<EdgeFrame>,
    took: std::time::Duration,
) -> String {
    let (in_kind, in_bytes) = taken;
    let (out_kind, out_bytes) = match out {
        Some(EdgeFrame::Step(next)) => payload_bytes(&next.payload),
        Some(EdgeFrame::Token { .. }) => ("token", 4),
        Some(_) => ("other", 0),
        // A prompt chunk before the last, on the last stage.
        None => ("nothing", 0),
    };
    format!(
        "stage={stage} step={} request={} seq={} pos={} us={} in={in_kind} in_bytes={in_bytes} \
         out={out_kind} out_bytes={out_bytes}",
        step.step,
        step.request,
        step.seq,
        step.pos,
        took.as_micros()
    )
}

/// What a payload is and its size on the wire's data (4 bytes an element).
fn payload_bytes(payload: &Payload) -> (&'static str, usize) {
    match payload {
        Payload::Tokens(t) => ("tokens", t.len() * 4),
        Payload::Activations(a) => ("activations", a.len() * 4),
    }
}

async fn load(
    stdin: &mut ChildStdin,
    stdout: &mut Replies,
    model: &Path,
    layers: (u32, u32),
    settings: WorkerSettings,
) -> Result<u32, String> {
    let sampling = settings.sampling;
    let request = Request::Load(wire::Load {
        model: model.display().to_string(),
        first_layer: layers.0,
        end_layer: layers.1,
        ctx: settings.ctx,
        threads: settings.threads,
        backend: settings.backend,
        sampling: wire::Sampling {
            temperature: sampling.temperature,
            top_k: sampling.top_k,
            top_p: sampling.top_p,
            seed: sampling.seed,
        },
    });
    write_request(stdin, &request).await?;
    match read_reply(stdout).await? {
        Reply::Ready { embedding, .. } => Ok(embedding),
        Reply::Fault { reason, .. } => Err(reason),
        other => Err(format!("the worker answered Load with {other:?}")),
    }
}

/// Runs `step`, whose payload it moves into the request (the step keeps
/// its other fields, for the output's frame).
async fn run_step(
    stdin: &mut ChildStdin,
    stdout: &mut Replies,
    position: &mut u32,
    hidden: u32,
    step: &mut Step,
    last: bool,
) -> Result<Option<EdgeFrame>, String> {
    if step.pos != *position {
        write_request(stdin, &Request::Truncate { pos: step.pos }).await?;
        *position = step.pos;
    }
    let rows = match &step.payload {
        Payload::Tokens(t) => t.len() as u32,
        Payload::Activations(a) => a.len() as u32 / hidden,
    };
    let input = match std::mem::replace(&mut step.payload, Payload::Tokens(Vec::new())) {
        Payload::Tokens(t) => wire::Input::Tokens(t),
        Payload::Activations(a) => wire::Input::Activations(a),
    };
    // The last stage samples only on a batch's last chunk (a sampler draws
    // once per token it returns, so the draws match one process's).
    let output = if last && step.last {
        OutputKind::Token
    } else {
        OutputKind::LastLogits
    };
    let request = Request::Forward {
        seq: step.step,
        pos: step.pos,
        input,
        output,
    };
    write_request(stdin, &request).await?;
    let reply = read_reply(stdout).await?;
    match reply {
        Reply::Activations { data, .. } => {
            *position += rows;
            Ok(Some(EdgeFrame::Step(Step {
                step: step.step,
                request: step.request,
                seq: step.seq,
                pos: step.pos,
                payload: Payload::Activations(data),
                last: step.last,
            })))
        }
        Reply::Token { id, .. } => {
            *position += rows;
            Ok(Some(EdgeFrame::Token {
                step: step.step,
                request: step.request,
                seq: step.seq,
                token: id,
            }))
        }
        Reply::Logits { .. } if last && !step.last => {
            *position += rows;
            Ok(None)
        }
        Reply::Fault { reason, .. } => Err(reason),
        other => Err(format!("the worker answered a step with {other:?}")),
    }
}
