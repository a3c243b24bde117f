//! A stage's blocks and head on the GPU: weights uploaded once, the KV
//! cache on the device, and the forward pass as `model::stage` runs it on
//! the CPU, step for step.

use super::Libraries;
use super::device::Gpu;
use super::graph::Decode;
use super::launch::int;
use crate::model::weights::{StageWeights, Weight};
use crate::model::{Config, Logits, RopeLayout, StageOutput};
use crate::tensor::GgmlType;
use cudarc::driver::CudaSlice;

/// A weight matrix on the device, its rows as they lie in the GGUF.
pub struct DeviceMatrix {
    /// Element type.
    pub ty: GgmlType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// The encoded rows, back to back.
    pub data: CudaSlice<u8>,
}

struct DeviceBlock {
    attn_norm: CudaSlice<f32>,
    q: DeviceMatrix,
    k: DeviceMatrix,
    v: DeviceMatrix,
    bias: Option<[CudaSlice<f32>; 3]>,
    o: DeviceMatrix,
    ffn_norm: CudaSlice<f32>,
    gate: DeviceMatrix,
    up: DeviceMatrix,
    down: DeviceMatrix,
}

/// A stage's blocks (and head, on the last stage) on one GPU.
pub struct DeviceStage {
    pub(super) gpu: Gpu,
    pub(super) config: Config,
    blocks: Vec<DeviceBlock>,
    pub(super) head: Option<(CudaSlice<f32>, DeviceMatrix)>,
    keys: Vec<CudaSlice<f32>>,
    values: Vec<CudaSlice<f32>>,
    /// The KV cache's positions.
    pub(super) capacity: usize,
    /// The first position of the step under way, where the kernels that
    /// depend on it read it (so a captured step replays at any position).
    pos: CudaSlice<i32>,
    /// One-token steps as a captured graph (`graph.rs`).
    pub(super) decode: Decode,
}

impl DeviceStage {
    /// Opens device 0, compiles the kernels and uploads `weights`' blocks
    /// and head, with a KV cache of `capacity` positions.
    pub fn new(
        config: &Config,
        weights: &StageWeights,
        capacity: usize,
        libraries: Libraries,
    ) -> Result<DeviceStage, String> {
        let gpu = Gpu::open(0, libraries.cublas && super::cublas_wanted())?;
        let up = |w: &Weight| upload_matrix(&gpu, w);
        let up_f32 = |v: &[f32]| gpu.stream.clone_htod(v).map_err(|e| format!("upload: {e}"));
        let mut blocks = Vec::with_capacity(weights.blocks.len());
        for b in &weights.blocks {
            let bias = match &b.qkv_bias {
                Some([q, k, v]) => Some([up_f32(q)?, up_f32(k)?, up_f32(v)?]),
                None => None,
            };
            blocks.push(DeviceBlock {
                attn_norm: up_f32(&b.attn_norm)?,
                q: up(&b.q)?,
                k: up(&b.k)?,
                v: up(&b.v)?,
                bias,
                o: up(&b.o)?,
                ffn_norm: up_f32(&b.ffn_norm)?,
                gate: up(&b.gate)?,
                up: up(&b.up)?,
                down: up(&b.down)?,
            });
        }
        let head = match &weights.head {
            Some(h) => Some((up_f32(&h.norm)?, up(&h.output)?)),
            None => None,
        };
        let cache = || {
            gpu.stream
                .alloc_zeros::<f32>(capacity * config.kv_dim())
                .map_err(|e| format!("KV cache: {e}"))
        };
        let keys = (0..blocks.len())
            .map(|_| cache())
            .collect::<Result<_, _>>()?;
        let values = (0..blocks.len())
            .map(|_| cache())
            .collect::<Result<_, _>>()?;
        let pos = gpu
            .stream
            .alloc_zeros::<i32>(1)
            .map_err(|e| format!("device memory: {e}"))?;
        Ok(DeviceStage {
            gpu,
            config: config.clone(),
            blocks,
            head,
            keys,
            values,
            capacity,
            pos,
            decode: Decode::Untried,
        })
    }

    /// The device, for reports: its name and whether cuBLAS is in use.
    pub fn describe(&self) -> String {
        let blas = if self.gpu.blas.is_some() {
            "cuBLAS"
        } else {
            "no cuBLAS"
        };
        format!("cuda: {}, {blas}", self.gpu.name)
    }

    /// Runs `x` (`n × embedding`, positions `pos..pos + n`, already checked
    /// against the cache) through the blocks and the head.
    pub fn forward(
        &mut self,
        x: &[f32],
        pos: usize,
        logits: Logits,
    ) -> Result<StageOutput, String> {
        let d = self.config.embedding;
        let n = x.len() / d;
        let stream = self.gpu.stream.clone();
        stream
            .memcpy_htod(&[int(pos)?], &mut self.pos)
            .map_err(|e| format!("upload: {e}"))?;
        if n == 1
            && let Some(out) = self.decode_step(x)?
        {
            return Ok(self.output(out));
        }
        let xd = stream.clone_htod(x).map_err(|e| format!("upload: {e}"))?;
        let y = self.run(xd, n, pos + n, logits)?;
        let out = stream
            .clone_dtoh(&y)
            .map_err(|e| format!("download: {e}"))?;
        Ok(self.output(out))
    }

    /// Whether any of the stage's products is of float weights (the ones
    /// cuBLAS takes when it loads).
    pub(super) fn has_float_products(&self) -> bool {
        let float =
            |m: &DeviceMatrix| matches!(m.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        let blocks = self.blocks.iter().any(|b| {
            [&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down]
                .into_iter()
                .any(float)
        });
        blocks || self.head.as_ref().is_some_and(|(_, output)| float(output))
    }

    /// What the stage hands on: logits on the last stage, else activations.
    fn output(&self, out: Vec<f32>) -> StageOutput {
        match self.head {
            Some(_) => StageOutput::Logits(out),
            None => StageOutput::Activations(out),
        }
    }

    /// Enqueues `n` tokens' activations `xd` through the blocks and the
    /// head, from the position `self.pos` holds, with `stride` rooms for
    /// scores (see [`Gpu::attention`]): the result stays on the device.
    pub(super) fn run(
        &mut self,
        mut xd: CudaSlice<f32>,
        n: usize,
        stride: usize,
        logits: Logits,
    ) -> Result<CudaSlice<f32>, String> {
        let d = self.config.embedding;
        for i in 0..self.blocks.len() {
            self.block(i, &mut xd, n, stride)?;
        }
        let Some((norm, output)) = &self.head else {
            return Ok(xd);
        };
        let rows = match logits {
            Logits::Last => {
                let mut last = self.gpu.alloc::<f32>(d)?;
                self.gpu.copy(&xd.slice((n - 1) * d..), &mut last)?;
                last
            }
            Logits::All => xd,
        };
        let gpu = &self.gpu;
        let normed = gpu.rms_norm(&rows, norm, d, self.config.rms_eps)?;
        gpu.product(output, &gpu.encode(output.ty, &normed)?)
    }

    fn block(
        &mut self,
        i: usize,
        x: &mut CudaSlice<f32>,
        n: usize,
        stride: usize,
    ) -> Result<(), String> {
        let (gpu, c, b) = (&self.gpu, &self.config, &self.blocks[i]);
        let (d, kvd) = (c.embedding, c.kv_dim());
        let h = gpu.rms_norm(x, &b.attn_norm, d, c.rms_eps)?;
        let acts = gpu.encode(b.q.ty, &h)?;
        let mut q = gpu.product(&b.q, &acts)?;
        let mut k = gpu.product_sharing(&b.k, &acts, &h)?;
        let mut v = gpu.product_sharing(&b.v, &acts, &h)?;
        drop(acts);
        if let Some([bq, bk, bv]) = &b.bias {
            gpu.add_bias(&mut q, bq)?;
            gpu.add_bias(&mut k, bk)?;
            gpu.add_bias(&mut v, bv)?;
        }
        let scale = theta_scale(c.rope_base, c.rope_dims);
        let pos = &self.pos;
        let rope = |x: &mut CudaSlice<f32>, heads: usize| {
            gpu.rope(x, n, heads, c.head_dim, c.rope_dims, scale, c.rope, pos)
        };
        rope(&mut q, c.heads)?;
        rope(&mut k, c.kv_heads)?;
        let (keys, values) = (&mut self.keys[i], &mut self.values[i]);
        gpu.kv_store((&k, &v), (keys, values), pos, kvd)?;
        let attn = gpu.attention(c, &q, keys, values, pos, n, stride)?;
        let o = gpu.product(&b.o, &gpu.encode(b.o.ty, &attn)?)?;
        gpu.add(x, &o)?;
        let h = gpu.rms_norm(x, &b.ffn_norm, d, c.rms_eps)?;
        let acts = gpu.encode(b.gate.ty, &h)?;
        let mut gate = gpu.product(&b.gate, &acts)?;
        let up = gpu.product_sharing(&b.up, &acts, &h)?;
        drop(acts);
        gpu.swiglu(&mut gate, &up)?;
        let down = gpu.product(&b.down, &gpu.encode(b.down.ty, &gate)?)?;
        gpu.add(x, &down)
    }
}

fn upload_matrix(gpu: &Gpu, w: &Weight) -> Result<DeviceMatrix, String> {
    let m = w.matrix();
    Ok(DeviceMatrix {
        ty: m.ty,
        rows: m.rows,
        cols: m.cols,
        data: gpu
            .stream
            .clone_htod(m.data)
            .map_err(|e| format!("upload: {e}"))?,
    })
}

/// The rope kernel's `neox` flag.
pub fn neox(layout: RopeLayout) -> i32 {
    match layout {
        RopeLayout::Adjacent => 0,
        RopeLayout::Neox => 1,
    }
}

/// The angle step of rope pair i + 1 over pair i, as the CPU computes it.
pub fn theta_scale(base: f32, dims: usize) -> f32 {
    base.powf(-2.0 / dims as f32)
}
