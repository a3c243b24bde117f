//! One pipeline stage: a contiguous range of a model's blocks, with the
//! token embedding on the first stage and the head on the last.
//!
//! A stage takes token ids (first stage) or f32 residual activations (the
//! others) for `n` consecutive positions and returns activations or logits.
//! Every stage computes its blocks exactly as a single stage over all blocks
//! would, and activations cross stages as f32, so N stages give bit-identical
//! logits to one.

use super::backend::Backend;
use super::cache::KvCache;
use super::config::Config;
use super::ops;
use super::weights::{self, Block, StageWeights};
use crate::gguf::file::ModelFile;
use crate::kernels::{Encoded, Kernels, matmul, matmuls};
use rayon::prelude::*;
use std::ops::Range;
use std::path::Path;

/// What a stage is fed.
pub enum StageInput<'a> {
    /// Token ids (first stage only).
    Tokens(&'a [u32]),
    /// `n × embedding` residual activations (every other stage).
    Activations(&'a [f32]),
}

/// Which positions the last stage computes logits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last position of the batch (generation).
    Last,
    /// Every position (evaluation against the reference).
    All,
}

/// What a stage returns.
#[derive(Debug, PartialEq)]
pub enum StageOutput {
    /// `n × embedding` activations for the next stage.
    Activations(Vec<f32>),
    /// Logits, `vocab` values per position asked for.
    Logits(Vec<f32>),
}

/// Why a stage step or load failed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The model file.
    #[error(transparent)]
    File(#[from] crate::gguf::Error),
    /// The model's metadata.
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
    /// A bad layer range, input or position.
    #[error("{0}")]
    Invalid(String),
    /// Reading the model file after it was opened (an embedding row).
    #[error("{0}")]
    Read(String),
    /// The GPU or its libraries.
    #[error("{0}")]
    Backend(String),
}

/// A loaded stage and its KV cache.
pub struct Stage {
    config: Config,
    layers: Range<usize>,
    weights: StageWeights,
    cache: KvCache,
    kernels: &'static Kernels,
    /// The blocks and head on a GPU (`Backend::Cuda`); the CPU computes
    /// only the embedding lookup then.
    device: Option<crate::cuda::DeviceStage>,
}

impl Stage {
    /// Opens `path` and maps blocks `layers` (and the embedding or head when
    /// the range starts at 0 or ends at the last block), with a KV cache of
    /// `context` positions (at most the model's own context length; 0 means
    /// that length).
    pub fn open(path: &Path, layers: Range<usize>, context: usize) -> Result<Stage, StageError> {
        Stage::open_on(path, layers, context, Backend::Cpu)
    }

    /// [`Stage::open`] on `backend`: for CUDA the blocks and head are
    /// uploaded to the GPU, which holds the KV cache too.
    pub fn open_on(
        path: &Path,
        layers: Range<usize>,
        context: usize,
        backend: Backend,
    ) -> Result<Stage, StageError> {
        let file = ModelFile::open(path)?;
        let config = Config::from_header(file.header(), &path.display().to_string())?;
        if layers.start >= layers.end || layers.end > config.blocks {
            return Err(StageError::Invalid(format!(
                "{}: layers {}..{} are not a non-empty range of the model's {} blocks",
                path.display(),
                layers.start,
                layers.end,
                config.blocks
            )));
        }
        let capacity = if context == 0 {
            config.context
        } else {
            context.min(config.context)
        };
        // On a GPU the cache is the device's: none is kept here. Made
        // before the weights are read, so a context that cannot be had is
        // said at once.
        let kv = match backend {
            Backend::Cpu => config.kv_dim(),
            Backend::Cuda => 0,
        };
        let cache = KvCache::new(path, layers.clone(), capacity, kv)?;
        let mut weights = weights::load(&file, &config, &layers)?;
        let device = match backend {
            Backend::Cpu => None,
            Backend::Cuda => {
                let libraries = crate::cuda::probe().map_err(StageError::Backend)?;
                let stage = crate::cuda::DeviceStage::new(&config, &weights, capacity, libraries)
                    .map_err(StageError::Backend)?;
                Some(stage)
            }
        };
        let kernels = Kernels::current();
        if device.is_none() {
            weights.pack(kernels);
        }
        Ok(Stage {
            config,
            layers,
            weights,
            cache,
            kernels,
            device,
        })
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The blocks this stage runs.
    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    /// Positions held in the KV cache: the position the next input starts at.
    pub fn position(&self) -> usize {
        self.cache.len
    }

    /// The KV cache's capacity in positions.
    pub fn context(&self) -> usize {
        self.cache.capacity
    }

    /// Where the blocks run: the CPU kernels' name, or the GPU's.
    pub fn describe(&self) -> String {
        match &self.device {
            Some(device) => device.describe(),
            None => self.kernels.name.to_string(),
        }
    }

    /// Bytes of the model file this stage mapped.
    pub fn bytes_mapped(&self) -> u64 {
        self.weights.bytes_mapped
    }

    /// Forgets every position from `pos` on (a new prompt, or a resume).
    pub fn truncate(&mut self, pos: usize) {
        self.cache.len = self.cache.len.min(pos);
    }

    /// Runs the next `n` positions through this stage's blocks.
    pub fn forward(
        &mut self,
        input: StageInput,
        logits: Logits,
    ) -> Result<StageOutput, StageError> {
        let d = self.config.embedding;
        let mut x = match (input, &self.weights.embedding) {
            (StageInput::Tokens(tokens), Some(_)) => {
                // On a GPU the head multiplies by its own copy.
                let mapped = self.device.is_none() && self.weights.head_reads_embedding();
                self.weights.embed(tokens, self.config.vocab, mapped)?
            }
            (StageInput::Activations(a), None) if a.len() % d == 0 => a.to_vec(),
            (StageInput::Activations(a), None) => {
                return Err(StageError::Invalid(format!(
                    "{} activations are not a whole number of {d}-wide rows",
                    a.len()
                )));
            }
            (StageInput::Tokens(_), None) => {
                return Err(StageError::Invalid(format!(
                    "stage {}..{} takes activations, not tokens",
                    self.layers.start, self.layers.end
                )));
            }
            (StageInput::Activations(_), Some(_)) => {
                return Err(StageError::Invalid(
                    "the first stage takes tokens, not activations".into(),
                ));
            }
        };
        let n = x.len() / d;
        if n == 0 {
            return Err(StageError::Invalid("an empty batch".into()));
        }
        let pos = self.cache.len;
        if pos + n > self.cache.capacity {
            return Err(StageError::Invalid(format!(
                "positions {pos}..{} exceed the context of {}",
                pos + n,
                self.cache.capacity
            )));
        }
        if let Some(device) = &mut self.device {
            let out = device
                .forward(&x, pos, logits)
                .map_err(StageError::Backend)?;
            self.cache.len = pos + n;
            return Ok(out);
        }
        for (i, block) in self.weights.blocks.iter().enumerate() {
            let (keys, values) = (&mut self.cache.keys[i], &mut self.cache.values[i]);
            block_forward(self.kernels, &self.config, block, &mut x, pos, keys, values);
        }
        self.cache.len = pos + n;
        let out = self.head(x, n, logits);
        if n > 1 {
            // The batch's buffers go back (see `heap::give_back_freed`).
            crate::heap::give_back_freed();
        }
        Ok(out)
    }

    /// The last stage's logits of the blocks' output `x` (`n` positions);
    /// other stages' output is `x` itself.
    fn head(&self, x: Vec<f32>, n: usize, logits: Logits) -> StageOutput {
        let d = self.config.embedding;
        let Some(head) = &self.weights.head else {
            return StageOutput::Activations(x);
        };
        let rows = match logits {
            Logits::Last => &x[(n - 1) * d..],
            Logits::All => &x[..],
        };
        let mut normed = vec![0f32; rows.len()];
        ops::rms_norm(rows, &head.norm, self.config.rms_eps, &mut normed);
        let out = head.output.matrix();
        let mut logits = vec![0f32; rows.len() / d * out.rows];
        matmul(
            self.kernels,
            &out,
            &Encoded::new(out.ty, &normed, d),
            &mut logits,
        );
        StageOutput::Logits(logits)
    }
}

/// `y = w · x` for each row of `x`.
fn project(kernels: &Kernels, w: &super::weights::Weight, x: &[f32]) -> Vec<f32> {
    let m = w.matrix();
    let mut y = vec![0f32; x.len() / m.cols * m.rows];
    matmul(kernels, &m, &Encoded::new(m.ty, x, m.cols), &mut y);
    y
}

/// `w · h` for each of `ws`: those whose activation type is `encoded`'s as
/// one set of parallel tasks, any other on its own encoding of `h`.
fn project_shared<const N: usize>(
    kernels: &Kernels,
    ws: [&super::weights::Weight; N],
    encoded: &Encoded,
    h: &[f32],
) -> [Vec<f32>; N] {
    let n = h.len() / ws[0].matrix().cols;
    let mut outs: [Vec<f32>; N] = std::array::from_fn(|i| vec![0f32; n * ws[i].matrix().rows]);
    let mut shared = Vec::with_capacity(N);
    for (w, y) in ws.iter().zip(outs.iter_mut()) {
        let m = w.matrix();
        if m.ty.activation_type() == encoded.ty() {
            shared.push((m, &mut y[..]));
        } else {
            matmul(kernels, &m, &Encoded::new(m.ty, h, m.cols), y);
        }
    }
    matmuls(kernels, encoded, &mut shared);
    outs
}

fn block_forward(
    kernels: &Kernels,
    c: &Config,
    block: &Block,
    x: &mut [f32],
    pos: usize,
    keys: &mut [f32],
    values: &mut [f32],
) {
    let d = c.embedding;
    let n = x.len() / d;
    let (qd, kvd) = (c.q_dim(), c.kv_dim());
    let mut h = vec![0f32; x.len()];
    ops::rms_norm(x, &block.attn_norm, c.rms_eps, &mut h);
    let encoded = Encoded::new(block.q.ty(), &h, d);
    let [mut q, mut k, mut v] =
        project_shared(kernels, [&block.q, &block.k, &block.v], &encoded, &h);
    if let Some([bq, bk, bv]) = &block.qkv_bias {
        ops::add_bias(&mut q, bq);
        ops::add_bias(&mut k, bk);
        ops::add_bias(&mut v, bv);
    }
    for t in 0..n {
        (kernels.rope)(
            &mut q[t * qd..(t + 1) * qd],
            c.head_dim,
            c.rope_dims,
            c.rope_base,
            c.rope,
            pos + t,
        );
        (kernels.rope)(
            &mut k[t * kvd..(t + 1) * kvd],
            c.head_dim,
            c.rope_dims,
            c.rope_base,
            c.rope,
            pos + t,
        );
    }
    let (hd, capacity) = (c.head_dim, keys.len() / kvd);
    for t in 0..n {
        for head in 0..c.kv_heads {
            let at = head * capacity * hd + (pos + t) * hd;
            let from = t * kvd + head * hd;
            keys[at..at + hd].copy_from_slice(&k[from..from + hd]);
            values[at..at + hd].copy_from_slice(&v[from..from + hd]);
        }
    }
    let attn = attention(kernels, c, &q, keys, values, pos, n);
    let o = project(kernels, &block.o, &attn);
    ops::add(x, &o);
    ops::rms_norm(x, &block.ffn_norm, c.rms_eps, &mut h);
    let encoded = Encoded::new(block.gate.ty(), &h, d);
    let [mut gate, up] = project_shared(kernels, [&block.gate, &block.up], &encoded, &h);
    (kernels.swiglu)(&mut gate, &up);
    let down = project(kernels, &block.down, &gate);
    ops::add(x, &down);
}

/// Causal grouped-query attention of the `n` new positions starting at `pos`
/// over every cached position up to each one.
fn attention(
    kernels: &Kernels,
    c: &Config,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    pos: usize,
    n: usize,
) -> Vec<f32> {
    let (hd, qd) = (c.head_dim, c.q_dim());
    let capacity = keys.len() / c.kv_dim();
    let group = c.heads / c.kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; n * qd];
    // One task per token and KV head: the query heads that share the KV
    // head (contiguous in `q` and `out`), one after another, with one
    // scratch for their lanes.
    let one = |(idx, o): (usize, &mut [f32])| {
        let (t, kv_head) = (idx / c.kv_heads, idx % c.kv_heads);
        let qh = &q[t * qd + kv_head * group * hd..t * qd + (kv_head + 1) * group * hd];
        let run = kv_head * capacity * hd;
        let batch = ops::in_batch(n, t);
        (kernels.attend)(qh, hd, keys, values, hd, run, pos + t + 1, scale, batch, o);
    };
    let work = n * c.heads * (pos + n) * hd;
    if work < 1 << 16 {
        out.chunks_exact_mut(group * hd).enumerate().for_each(one);
    } else {
        out.par_chunks_exact_mut(group * hd)
            .enumerate()
            .for_each(one);
    }
    out
}

#[cfg(test)]
#[path = "resident_tests.rs"]
mod resident_tests;
