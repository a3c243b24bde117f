//! A model's hyperparameters, read from the GGUF's own metadata.

use crate::gguf::{Header, Value};
use std::fmt;

/// The supported architectures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama: adjacent-pair rope, no attention biases.
    Llama,
    /// Qwen2: NEOX (half-split) rope and Q/K/V biases.
    Qwen2,
}

/// How rotary embeddings pair a head's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs (2i, 2i+1): ggml's "normal" mode, llama's GGUF layout.
    Adjacent,
    /// Pairs (i, i + n/2): ggml's NEOX mode.
    Neox,
}

/// The hyperparameters a stage needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Architecture.
    pub arch: Arch,
    /// Hidden size.
    pub embedding: usize,
    /// Number of transformer blocks.
    pub blocks: usize,
    /// Feed-forward width.
    pub feed_forward: usize,
    /// Attention heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// Dimensions of each head that rope rotates.
    pub rope_dims: usize,
    /// Rope frequency base.
    pub rope_base: f32,
    /// Rope pairing.
    pub rope: RopeLayout,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// The context length the model was trained for.
    pub context: usize,
    /// Vocabulary size (rows of the token embedding).
    pub vocab: usize,
}

/// A metadata key missing or of the wrong type.
#[derive(Debug, thiserror::Error)]
#[error("{path}: metadata {key:?}: {reason}")]
pub struct ConfigError {
    /// The model file.
    pub path: String,
    /// The key.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

impl Config {
    /// Reads the hyperparameters of `header` (from file `path`).
    pub fn from_header(header: &Header, path: &str) -> Result<Config, ConfigError> {
        let err = |key: &str, reason: String| ConfigError {
            path: path.to_string(),
            key: key.to_string(),
            reason,
        };
        let arch_name = header
            .architecture()
            .ok_or_else(|| err("general.architecture", "missing".into()))?;
        let arch = match arch_name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            other => {
                return Err(err(
                    "general.architecture",
                    format!("{other:?} is not supported (llama, qwen2)"),
                ));
            }
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let int = |k: &str| -> Result<Option<usize>, ConfigError> {
            match header.get(&key(k)) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .filter(|&n| n > 0 && n < 1 << 32)
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| err(&key(k), format!("{v} is not a positive integer"))),
            }
        };
        let need = |k: &str| int(k)?.ok_or_else(|| err(&key(k), "missing".into()));
        let float = |k: &str, default: f32| -> Result<f32, ConfigError> {
            match header.get(&key(k)) {
                None => Ok(default),
                Some(v) => v
                    .as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| err(&key(k), format!("{v} is not a number"))),
            }
        };
        let embedding = need("embedding_length")?;
        let heads = need("attention.head_count")?;
        let kv_heads = int("attention.head_count_kv")?.unwrap_or(heads);
        if embedding % heads != 0 || heads % kv_heads != 0 {
            return Err(err(
                &key("attention.head_count_kv"),
                format!("{embedding} dims, {heads} heads and {kv_heads} kv heads do not divide"),
            ));
        }
        let head_dim = int("attention.key_length")?.unwrap_or(embedding / heads);
        let rope_dims = int("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(err(
                &key("rope.dimension_count"),
                format!("{rope_dims} for heads of {head_dim}"),
            ));
        }
        let vocab = header
            .tensor("token_embd.weight")
            .map(|t| t.dims.get(1).copied().unwrap_or(1) as usize)
            .or_else(|| {
                header
                    .get("tokenizer.ggml.tokens")
                    .and_then(Value::as_array)
                    .map(<[Value]>::len)
            })
            .ok_or_else(|| {
                err(
                    "tokenizer.ggml.tokens",
                    "no token embedding and no vocabulary".into(),
                )
            })?;
        // Every block has tensors of its own in the table: a count beyond
        // the table's is a corrupt or hostile file (and would have the
        // loader name billions of tensors).
        let blocks = need("block_count")?;
        if blocks > header.tensors.len() {
            return Err(err(
                &key("block_count"),
                format!(
                    "{blocks} blocks, but the file holds {} tensors",
                    header.tensors.len()
                ),
            ));
        }
        Ok(Config {
            arch,
            embedding,
            blocks,
            feed_forward: need("feed_forward_length")?,
            heads,
            kv_heads,
            head_dim,
            rope_dims,
            rope_base: float("rope.freq_base", 10000.0)?,
            rope: match arch {
                Arch::Llama => RopeLayout::Adjacent,
                Arch::Qwen2 => RopeLayout::Neox,
            },
            rms_eps: float("attention.layer_norm_rms_epsilon", 1e-5)?,
            context: int("context_length")?.unwrap_or(2048),
            vocab,
        })
    }

    /// Hidden size of the key/value projections.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Hidden size of the query projection.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        })
    }
}
