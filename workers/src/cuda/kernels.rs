//! Each kernel of `quant.cu` and `ops.cu` as a method of [`Gpu`]: buffers
//! sized, counts checked, arguments pushed in the order the source lists.

use super::device::Gpu;
use super::forward::{DeviceMatrix, neox};
use super::launch::{self, int};
use crate::model::{Config, RopeLayout};
use crate::tensor::GgmlType;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, PushKernelArg};

/// Activations encoded for products with weights of one activation type.
pub struct Acts<'x> {
    /// The activation type ([`GgmlType::activation_type`]).
    pub ty: GgmlType,
    /// Values encoded: tokens × columns.
    pub len: usize,
    data: ActsData<'x>,
}

enum ActsData<'x> {
    F32(&'x CudaSlice<f32>),
    Half(CudaSlice<u16>),
    Q8_0 {
        q: CudaSlice<i8>,
        d: CudaSlice<f32>,
    },
    Q8_1 {
        q: CudaSlice<i8>,
        d: CudaSlice<f32>,
        s: CudaSlice<f32>,
    },
    Q8K {
        q: CudaSlice<i8>,
        d: CudaSlice<f32>,
        sums: CudaSlice<i32>,
    },
}

impl Gpu {
    /// A device buffer for a kernel's or a copy's output, not cleared: every
    /// caller has the whole of it written (each kernel below writes every
    /// element of its output, and `attention`'s scores before it reads them)
    /// before anything reads it, so the clearing would be a launch per
    /// buffer for nothing.
    pub fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<CudaSlice<T>, String> {
        // SAFETY: the memory is the device's and is only ever reached
        // through kernels and copies on this stream, which write it before
        // they read it (above); the host never reads it uninitialised.
        unsafe { self.stream.alloc::<T>(len) }
            .map_err(|e| format!("device memory ({len} values): {e}"))
    }

    /// Copies `src` into `dst` (of the same length) on the stream.
    pub fn copy(
        &self,
        src: &impl DevicePtr<f32>,
        dst: &mut impl DevicePtrMut<f32>,
    ) -> Result<(), String> {
        self.stream
            .memcpy_dtod(src, dst)
            .map_err(|e| format!("device copy: {e}"))
    }

    /// RMSNorm of each `dim`-wide row of `x` with `weight`.
    pub fn rms_norm(
        &self,
        x: &CudaSlice<f32>,
        weight: &CudaSlice<f32>,
        dim: usize,
        eps: f32,
    ) -> Result<CudaSlice<f32>, String> {
        let mut out = self.alloc::<f32>(x.len())?;
        let dim_i = int(dim)?;
        self.launch("rms_norm", launch::per_norm_row(x.len() / dim)?, |b| {
            b.arg(x).arg(weight).arg(&mut out).arg(&dim_i).arg(&eps);
        })?;
        Ok(out)
    }

    /// Encodes `x` for products with weights of `weight_ty`.
    pub fn encode<'x>(
        &self,
        weight_ty: GgmlType,
        x: &'x CudaSlice<f32>,
    ) -> Result<Acts<'x>, String> {
        let (ty, len) = (weight_ty.activation_type(), x.len());
        let data = match ty {
            GgmlType::F32 => ActsData::F32(x),
            GgmlType::F16 | GgmlType::BF16 => {
                let mut out = self.alloc::<u16>(len)?;
                let name = if ty == GgmlType::F16 {
                    "encode_f16"
                } else {
                    "encode_bf16"
                };
                let n = int(len)?;
                self.launch(name, launch::elementwise(len)?, |b| {
                    b.arg(x).arg(&mut out).arg(&n);
                })?;
                ActsData::Half(out)
            }
            GgmlType::Q8_0 => {
                let blocks = len / 32;
                let (mut q, mut d) = (self.alloc::<i8>(len)?, self.alloc::<f32>(blocks)?);
                let count = int(blocks)?;
                self.launch("quantize_q8_0", launch::per_block(blocks)?, |b| {
                    b.arg(x).arg(&mut q).arg(&mut d).arg(&count);
                })?;
                ActsData::Q8_0 { q, d }
            }
            GgmlType::Q8_1 => {
                let blocks = len / 32;
                let (mut q, mut d) = (self.alloc::<i8>(len)?, self.alloc::<f32>(blocks)?);
                let mut s = self.alloc::<f32>(blocks)?;
                let count = int(blocks)?;
                self.launch("quantize_q8_1", launch::per_block(blocks)?, |b| {
                    b.arg(x).arg(&mut q).arg(&mut d).arg(&mut s).arg(&count);
                })?;
                ActsData::Q8_1 { q, d, s }
            }
            GgmlType::Q8K => {
                let blocks = len / 256;
                let (mut q, mut d) = (self.alloc::<i8>(len)?, self.alloc::<f32>(blocks)?);
                let mut sums = self.alloc::<i32>(blocks * 16)?;
                let count = int(blocks)?;
                self.launch("quantize_q8_k", launch::per_block(blocks)?, |b| {
                    b.arg(x).arg(&mut q).arg(&mut d).arg(&mut sums).arg(&count);
                })?;
                ActsData::Q8K { q, d, sums }
            }
            other => return Err(format!("{other} is not an activation type")),
        };
        Ok(Acts { ty, len, data })
    }

    /// `y[t][r] = w.row(r) · x[t]` for every token of `acts`.
    pub fn product(&self, w: &DeviceMatrix, acts: &Acts) -> Result<CudaSlice<f32>, String> {
        if acts.ty != w.ty.activation_type() || acts.len.checked_rem(w.cols) != Some(0) {
            return Err(format!(
                "a {} product of {} columns given {} {} activations",
                w.ty, w.cols, acts.len, acts.ty
            ));
        }
        let n = acts.len / w.cols;
        let mut y = self.alloc::<f32>(n * w.rows)?;
        let (rows, cols) = (int(w.rows)?, int(w.cols)?);
        let config = launch::per_row(w.rows, n)?;
        match (&acts.data, w.ty) {
            // One token (decode): the one-token kernels. A batch: tiles of
            // tokens, each weight word loaded once a tile (`quant.cu`).
            // (q5_0 and iq4_nl have the one kernel for both, a grid row a
            // token.)
            (
                ActsData::Q8_0 { q, d },
                GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::IQ4NL,
            ) if n == 1 || matches!(w.ty, GgmlType::Q5_0 | GgmlType::IQ4NL) => {
                let name = match w.ty {
                    GgmlType::Q8_0 => "matvec_q8_0",
                    GgmlType::Q4_0 => "matvec_q4_0",
                    GgmlType::IQ4NL => "matvec_iq4_nl",
                    _ => "matvec_q5_0",
                };
                self.launch(name, config, |b| {
                    b.arg(&w.data)
                        .arg(q)
                        .arg(d)
                        .arg(&mut y)
                        .arg(&rows)
                        .arg(&cols);
                })?;
            }
            (ActsData::Q8_0 { q, d }, GgmlType::Q8_0 | GgmlType::Q4_0) => {
                let name = if w.ty == GgmlType::Q8_0 {
                    "matvec_q8_0_tiled"
                } else {
                    "matvec_q4_0_tiled"
                };
                let tokens = int(n)?;
                self.launch(name, launch::per_row_tiled(w.rows, n)?, |b| {
                    b.arg(&w.data)
                        .arg(q)
                        .arg(d)
                        .arg(&mut y)
                        .arg(&rows)
                        .arg(&cols)
                        .arg(&tokens);
                })?;
            }
            // q4_1 and q5_1: one kernel for both, a grid row a token.
            (ActsData::Q8_1 { q, d, s }, GgmlType::Q4_1 | GgmlType::Q5_1) => {
                let name = if w.ty == GgmlType::Q4_1 {
                    "matvec_q4_1"
                } else {
                    "matvec_q5_1"
                };
                self.launch(name, config, |b| {
                    b.arg(&w.data)
                        .arg(q)
                        .arg(d)
                        .arg(s)
                        .arg(&mut y)
                        .arg(&rows)
                        .arg(&cols);
                })?;
            }
            (ActsData::Q8K { q, d, sums }, GgmlType::Q2K | GgmlType::Q4K | GgmlType::Q5K) => {
                let name = match w.ty {
                    GgmlType::Q2K => "matvec_q2_k",
                    GgmlType::Q4K => "matvec_q4_k",
                    _ => "matvec_q5_k",
                };
                self.launch(name, config, |b| {
                    b.arg(&w.data)
                        .arg(q)
                        .arg(d)
                        .arg(sums)
                        .arg(&mut y)
                        .arg(&rows)
                        .arg(&cols);
                })?;
            }
            (ActsData::Q8K { q, d, .. }, GgmlType::Q3K | GgmlType::Q6K | GgmlType::IQ4XS) => {
                let name = match w.ty {
                    GgmlType::Q3K => "matvec_q3_k",
                    GgmlType::IQ4XS => "matvec_iq4_xs",
                    _ => "matvec_q6_k",
                };
                self.launch(name, config, |b| {
                    b.arg(&w.data)
                        .arg(q)
                        .arg(d)
                        .arg(&mut y)
                        .arg(&rows)
                        .arg(&cols);
                })?;
            }
            (ActsData::F32(x), GgmlType::F32) => match &self.blas {
                Some(blas) => super::blas::gemm(self, blas, w, *x, &mut y, n)?,
                None => self.launch("matvec_f32", config, |b| {
                    b.arg(&w.data).arg(*x).arg(&mut y).arg(&rows).arg(&cols);
                })?,
            },
            (ActsData::Half(x), GgmlType::F16 | GgmlType::BF16) => match &self.blas {
                Some(blas) => super::blas::gemm(self, blas, w, x, &mut y, n)?,
                None => {
                    let name = if w.ty == GgmlType::F16 {
                        "matvec_f16"
                    } else {
                        "matvec_bf16"
                    };
                    self.launch(name, config, |b| {
                        b.arg(&w.data).arg(x).arg(&mut y).arg(&rows).arg(&cols);
                    })?
                }
            },
            _ => return Err(format!("no product of {} weights with {}", w.ty, acts.ty)),
        }
        Ok(y)
    }

    /// [`Gpu::product`] with `acts` when `w` takes their type, else with its
    /// own encoding of `x` (the CPU path's `project_shared`).
    pub fn product_sharing(
        &self,
        w: &DeviceMatrix,
        acts: &Acts,
        x: &CudaSlice<f32>,
    ) -> Result<CudaSlice<f32>, String> {
        if acts.ty == w.ty.activation_type() {
            self.product(w, acts)
        } else {
            self.product(w, &self.encode(w.ty, x)?)
        }
    }

    /// `x += y`.
    pub fn add(&self, x: &mut CudaSlice<f32>, y: &CudaSlice<f32>) -> Result<(), String> {
        let total = int(x.len())?;
        self.launch("add", launch::elementwise(x.len())?, |b| {
            b.arg(x).arg(y).arg(&total);
        })
    }

    /// Adds `bias` to each row of `x`.
    pub fn add_bias(&self, x: &mut CudaSlice<f32>, bias: &CudaSlice<f32>) -> Result<(), String> {
        let (dim, total) = (int(bias.len())?, int(x.len())?);
        self.launch("add_bias", launch::elementwise(x.len())?, |b| {
            b.arg(x).arg(bias).arg(&dim).arg(&total);
        })
    }

    /// `gate = silu(gate) * up`.
    pub fn swiglu(&self, gate: &mut CudaSlice<f32>, up: &CudaSlice<f32>) -> Result<(), String> {
        let total = int(gate.len())?;
        self.launch("swiglu", launch::elementwise(gate.len())?, |b| {
            b.arg(gate).arg(up).arg(&total);
        })
    }

    /// Rope over `tokens` tokens of `heads` heads from the position `pos`
    /// holds on the device.
    #[allow(clippy::too_many_arguments)] // the rope's parameters, as the CPU's
    pub fn rope(
        &self,
        x: &mut CudaSlice<f32>,
        tokens: usize,
        heads: usize,
        head_dim: usize,
        dims: usize,
        theta_scale: f32,
        layout: RopeLayout,
        pos: &CudaSlice<i32>,
    ) -> Result<(), String> {
        let work = tokens * heads * (dims / 2);
        let args = [int(tokens)?, int(heads)?, int(head_dim)?, int(dims)?];
        let neox = neox(layout);
        self.launch("rope", launch::elementwise(work)?, |b| {
            b.arg(x)
                .arg(&args[0])
                .arg(&args[1])
                .arg(&args[2])
                .arg(&args[3]);
            b.arg(&theta_scale).arg(&neox).arg(pos);
        })
    }

    /// Stores `n` tokens' keys `k` and values `v` (each `n × kv_dim`) in
    /// the caches from the position `pos` holds on the device.
    pub fn kv_store(
        &self,
        (k, v): (&CudaSlice<f32>, &CudaSlice<f32>),
        (keys, values): (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
        pos: &CudaSlice<i32>,
        kv_dim: usize,
    ) -> Result<(), String> {
        let (kvd, total) = (int(kv_dim)?, int(k.len())?);
        self.launch("kv_store", launch::elementwise(k.len())?, |b| {
            b.arg(k).arg(v).arg(keys).arg(values).arg(pos);
            b.arg(&kvd).arg(&total);
        })
    }

    /// Causal grouped-query attention of `n` new tokens from the position
    /// `pos` holds on the device over the cache `keys`/`values` (already
    /// holding them); `stride`, at least that position + `n`, is each
    /// token's and head's room for scores (a captured step passes the
    /// cache's capacity, right at every position). A long prefill runs in
    /// chunks of tokens, so the score scratch (chunk × heads × stride
    /// floats) stays within [`launch::SCORES_FLOATS`] and the grid's y
    /// within [`launch::MAX_GRID_Y`].
    #[allow(clippy::too_many_arguments)] // the cache, where, and how much
    pub fn attention(
        &self,
        c: &Config,
        q: &CudaSlice<f32>,
        keys: &CudaSlice<f32>,
        values: &CudaSlice<f32>,
        pos: &CudaSlice<i32>,
        n: usize,
        stride: usize,
    ) -> Result<CudaSlice<f32>, String> {
        let chunk = launch::attention_chunk(c.heads, stride, n);
        let mut out = self.alloc::<f32>(n * c.q_dim())?;
        let mut scores = self.alloc::<f32>(chunk * c.heads * stride)?;
        let args = [int(c.heads)?, int(c.kv_heads)?, int(c.head_dim)?];
        let stride_arg = int(stride)?;
        // The kernel sums each token's values as `ops::in_batch` says.
        let tokens_arg = int(n)?;
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        for t0 in (0..n).step_by(chunk) {
            let t0_arg = int(t0)?;
            let tokens = chunk.min(n - t0);
            self.launch("attention", launch::per_head(c.heads, tokens)?, |b| {
                b.arg(q)
                    .arg(keys)
                    .arg(values)
                    .arg(&mut out)
                    .arg(&mut scores);
                for a in &args {
                    b.arg(a);
                }
                b.arg(pos)
                    .arg(&stride_arg)
                    .arg(&scale)
                    .arg(&t0_arg)
                    .arg(&tokens_arg);
            })?;
        }
        Ok(out)
    }
}
