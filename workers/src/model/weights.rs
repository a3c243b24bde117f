//! A stage's tensors: which it needs, mapped in place, checked for shape.

use super::config::{Arch, Config};
use crate::gguf::file::{Mapped, ModelFile, TensorData};
use crate::gguf::{Error, TensorInfo};
use crate::heap::HugeBuffer;
use crate::kernels::{Kernels, Matrix};
use crate::tensor::GgmlType;
use crate::tensor::blocks::dequantize_row;
use std::ops::Range;
use std::sync::Arc;

/// Bytes of a matrix packed between two releases of its mapped pages.
const PACK_PIECE_BYTES: usize = 2 << 20;

/// One mapped tensor.
#[derive(Clone)]
pub struct Weight {
    info: TensorInfo,
    data: TensorData,
    /// The matrix packed for the kernels (see `kernels::x8` and
    /// `kernels::pairs`), if it is.
    packed: Option<Arc<HugeBuffer>>,
}

impl Weight {
    /// The tensor as a matrix of `dims[1]` rows of `dims[0]` values.
    pub fn matrix(&self) -> Matrix<'_> {
        Matrix {
            ty: self.info.ty,
            rows: self.info.dims.get(1).copied().unwrap_or(1) as usize,
            cols: self.info.dims[0] as usize,
            data: self.packed.as_deref().map_or(self.data.bytes(), |p| &p[..]),
            packed: self.packed.is_some(),
        }
    }

    /// Packs the matrix where `kernels` run it packed; `release`: the
    /// mapped bytes are read no more, so their pages leave the resident
    /// set as each piece is packed, and the tensor is never resident
    /// twice over.
    fn pack(&mut self, kernels: &Kernels, release: bool) {
        let m = self.matrix();
        if m.packed || !kernels.packs(m.ty, m.rows) {
            return;
        }
        let (group_rows, packed_group) = Kernels::packed_group(m.ty, m.cols);
        let plain_group = group_rows * m.row_bytes();
        let mut packed = HugeBuffer::zeroed(m.rows / group_rows * packed_group);
        let groups = (PACK_PIECE_BYTES / plain_group).max(1);
        let pieces = packed
            .chunks_mut(groups * packed_group)
            .zip(m.data.chunks(groups * plain_group));
        for (i, (out, data)) in pieces.enumerate() {
            Kernels::pack_into(m.ty, m.cols, data, out);
            if release {
                self.data.release(i * groups * plain_group, data.len());
            }
        }
        self.packed = Some(Arc::new(packed));
    }

    /// The whole tensor decoded to f32 (for norms and biases, which are small).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.info.elements() as usize];
        dequantize_row(self.info.ty, self.data.bytes(), &mut out);
        out
    }

    /// Row `r` decoded to f32 (an embedding lookup).
    pub fn row_f32(&self, r: usize) -> Vec<f32> {
        let m = self.matrix();
        let mut out = vec![0f32; m.cols];
        dequantize_row(m.ty, m.row(r), &mut out);
        out
    }

    /// Row `r` decoded to f32, read from the file (see
    /// `TensorData::read_at`): a lookup that leaves no page of the mapping
    /// resident.
    pub fn read_row_f32(&self, r: usize) -> std::io::Result<Vec<f32>> {
        let cols = self.info.dims[0];
        let row = self.info.ty.row_bytes(cols) as usize;
        let mut bytes = vec![0u8; row];
        self.data.read_at(r * row, &mut bytes)?;
        let mut out = vec![0f32; cols as usize];
        dequantize_row(self.info.ty, &bytes, &mut out);
        Ok(out)
    }

    /// The element type.
    pub fn ty(&self) -> GgmlType {
        self.info.ty
    }
}

/// One transformer block's tensors.
pub struct Block {
    /// Pre-attention norm.
    pub attn_norm: Vec<f32>,
    /// Query projection.
    pub q: Weight,
    /// Key projection.
    pub k: Weight,
    /// Value projection.
    pub v: Weight,
    /// Query/key/value biases (qwen2).
    pub qkv_bias: Option<[Vec<f32>; 3]>,
    /// Attention output projection.
    pub o: Weight,
    /// Pre-feed-forward norm.
    pub ffn_norm: Vec<f32>,
    /// SwiGLU gate.
    pub gate: Weight,
    /// SwiGLU up.
    pub up: Weight,
    /// Feed-forward down.
    pub down: Weight,
}

/// The head of the last stage.
pub struct Head {
    /// Final norm.
    pub norm: Vec<f32>,
    /// Output projection (the token embedding when tied).
    pub output: Weight,
}

/// What a stage maps: its blocks, plus the embedding on the first stage and
/// the head on the last.
pub struct StageWeights {
    /// The token embedding, on the first stage.
    pub embedding: Option<Weight>,
    /// Blocks `layers.start..layers.end`, in order.
    pub blocks: Vec<Block>,
    /// The head, on the last stage.
    pub head: Option<Head>,
    /// Bytes of the file mapped for this stage.
    pub bytes_mapped: u64,
}

impl Head {
    /// Whether the output projection is the token embedding (tied).
    fn tied(&self) -> bool {
        self.output.info.name == "token_embd.weight"
    }
}

impl StageWeights {
    /// The embedding rows of `tokens`, one `embedding`-wide f32 row each.
    /// Read from the file, unless `mapped` (the mapped bytes are resident
    /// anyway: a tied head not packed multiplies by them every token). A
    /// lookup through the mapping maps its rows' pages, and where the
    /// file's page cache holds 2 MiB folios, a whole folio each, so a
    /// prompt's rows would make most of the embedding resident.
    pub fn embed(
        &self,
        tokens: &[u32],
        vocab: usize,
        mapped: bool,
    ) -> Result<Vec<f32>, super::StageError> {
        use super::StageError;
        let embd = self
            .embedding
            .as_ref()
            .ok_or_else(|| StageError::Invalid("this stage has no embedding".into()))?;
        let mut x = Vec::with_capacity(tokens.len() * embd.info.dims[0] as usize);
        for &t in tokens {
            if t as usize >= vocab {
                return Err(StageError::Invalid(format!(
                    "token id {t} is outside the vocabulary of {vocab}"
                )));
            }
            if mapped {
                x.extend(embd.row_f32(t as usize));
            } else {
                let row = embd.read_row_f32(t as usize).map_err(|e| {
                    StageError::Read(format!("reading token {t}'s embedding row: {e}"))
                })?;
                x.extend(row);
            }
        }
        Ok(x)
    }

    /// Whether the head multiplies by the embedding's mapped bytes (a tied
    /// head not packed): then every token reads all of them.
    pub fn head_reads_embedding(&self) -> bool {
        self.head
            .as_ref()
            .is_some_and(|h| h.tied() && h.output.packed.is_none())
    }

    /// Packs every matrix the CPU `kernels` run packed (not the embedding,
    /// which is read a row at a time).
    pub fn pack(&mut self, kernels: &Kernels) {
        for b in &mut self.blocks {
            for w in [
                &mut b.q,
                &mut b.k,
                &mut b.v,
                &mut b.o,
                &mut b.gate,
                &mut b.up,
                &mut b.down,
            ] {
                w.pack(kernels, true);
            }
        }
        // A tied head's mapped bytes go too: the embedding's lookups read
        // the file, not the mapping (`embed`).
        if let Some(head) = &mut self.head {
            head.output.pack(kernels, true);
        }
    }
}

fn block_names(i: usize, arch: Arch) -> Vec<String> {
    let mut names: Vec<String> = [
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_norm",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ]
    .iter()
    .map(|n| format!("blk.{i}.{n}.weight"))
    .collect();
    if arch == Arch::Qwen2 {
        names.extend(
            ["attn_q", "attn_k", "attn_v"]
                .iter()
                .map(|n| format!("blk.{i}.{n}.bias")),
        );
    }
    names
}

/// The tensor names a stage over `layers` of the model in `file` needs.
pub fn stage_tensor_names(file: &ModelFile, config: &Config, layers: &Range<usize>) -> Vec<String> {
    names_for(
        config,
        layers,
        file.header().tensor("output.weight").is_none(),
    )
}

/// The tensor names a stage over `layers` needs, the head `tied` to the
/// embedding or not.
pub fn names_for(config: &Config, layers: &Range<usize>, tied: bool) -> Vec<String> {
    let first = layers.start == 0;
    let last = layers.end == config.blocks;
    let mut names = Vec::new();
    if first || (last && tied) {
        names.push("token_embd.weight".to_string());
    }
    for i in layers.clone() {
        names.extend(block_names(i, config.arch));
    }
    if last {
        names.push("output_norm.weight".to_string());
        if !tied {
            names.push("output.weight".to_string());
        }
    }
    names
}

/// Maps and shape-checks the tensors of the stage over `layers`.
pub fn load(
    file: &ModelFile,
    config: &Config,
    layers: &Range<usize>,
) -> Result<StageWeights, Error> {
    let names = stage_tensor_names(file, config, layers);
    let Mapped {
        mut tensors,
        bytes_mapped,
    } = file.map(&names)?;
    let path = file.path().display().to_string();
    let mut take = |name: String, shape: &[usize]| -> Result<Weight, Error> {
        let (info, data) = tensors.remove(&name).expect("mapped above");
        let dims: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
        if dims != shape {
            return Err(Error::Format {
                path: path.clone(),
                offset: 0,
                field: format!("tensor {name:?} dims"),
                reason: format!("{dims:?}, the model's metadata says {shape:?}"),
            });
        }
        Ok(Weight {
            info,
            data,
            packed: None,
        })
    };
    let (d, q, kv, ff) = (
        config.embedding,
        config.q_dim(),
        config.kv_dim(),
        config.feed_forward,
    );
    let token_embd = if names.iter().any(|n| n == "token_embd.weight") {
        Some(take("token_embd.weight".into(), &[d, config.vocab])?)
    } else {
        None
    };
    let mut blocks = Vec::with_capacity(layers.len());
    for i in layers.clone() {
        let n = |s: &str| format!("blk.{i}.{s}");
        let qkv_bias = if config.arch == Arch::Qwen2 {
            Some([
                take(n("attn_q.bias"), &[q])?.to_f32(),
                take(n("attn_k.bias"), &[kv])?.to_f32(),
                take(n("attn_v.bias"), &[kv])?.to_f32(),
            ])
        } else {
            None
        };
        blocks.push(Block {
            attn_norm: take(n("attn_norm.weight"), &[d])?.to_f32(),
            q: take(n("attn_q.weight"), &[d, q])?,
            k: take(n("attn_k.weight"), &[d, kv])?,
            v: take(n("attn_v.weight"), &[d, kv])?,
            qkv_bias,
            o: take(n("attn_output.weight"), &[q, d])?,
            ffn_norm: take(n("ffn_norm.weight"), &[d])?.to_f32(),
            gate: take(n("ffn_gate.weight"), &[d, ff])?,
            up: take(n("ffn_up.weight"), &[d, ff])?,
            down: take(n("ffn_down.weight"), &[ff, d])?,
        });
    }
    let last = layers.end == config.blocks;
    let head = if last {
        let norm = take("output_norm.weight".into(), &[d])?.to_f32();
        let output = match names.iter().any(|n| n == "output.weight") {
            true => take("output.weight".into(), &[d, config.vocab])?,
            false => token_embd.clone().expect("a tied head maps the embedding"),
        };
        Some(Head { norm, output })
    } else {
        None
    };
    let embedding = if layers.start == 0 { token_embd } else { None };
    Ok(StageWeights {
        embedding,
        blocks,
        head,
        bytes_mapped,
    })
}
