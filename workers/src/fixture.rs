//! The project's own models: random weights from a seed, any shape, any
//! supported type, with a SentencePiece vocabulary llama.cpp loads (copied
//! from another GGUF, or made up). `drover-worker make-model` writes them.

use crate::gguf::write::{GgufOut, TensorOut};
use crate::gguf::{Header, Value};
use crate::rng::SplitMix64;
use crate::tensor::GgmlType;
use crate::tensor::quantize::quantized;

mod shape;
pub use shape::Shape;

/// Which type each weight gets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Recipe {
    /// Every matrix of one type.
    Uniform(GgmlType),
    /// llama.cpp's Q4_K_M (`Medium(Q4K)`) or Q5_K_M (`Medium(Q5K)`) mix:
    /// the given k-quant, with q6_K for the head and for the value and
    /// down projections of the first and last eighth of the blocks and
    /// every third block between. Its Q3_K_M (`Medium(Q3K)`): q3_K, with
    /// q6_K for the head, q4_K for the attention output, and q4_K for the
    /// value and down projections but for the first two blocks' values and
    /// the first sixteenth's downs, q5_K.
    Medium(GgmlType),
}

impl Recipe {
    /// Parses a weight type's name (`f32`, `f16`, `bf16`, `q8_0`, `q5_0`,
    /// `q5_1`, `q4_0`, `q4_1`, `q2_k`, `q3_k`, `q4_k`, `q5_k`, `q6_k`,
    /// `iq4_nl`, `iq4_xs`), `q3_k_m`,
    /// `q4_k_m` or `q5_k_m`.
    pub fn parse(name: &str) -> Option<Recipe> {
        if name.eq_ignore_ascii_case("q3_k_m") {
            return Some(Recipe::Medium(GgmlType::Q3K));
        }
        if name.eq_ignore_ascii_case("q4_k_m") {
            return Some(Recipe::Medium(GgmlType::Q4K));
        }
        if name.eq_ignore_ascii_case("q5_k_m") {
            return Some(Recipe::Medium(GgmlType::Q5K));
        }
        GgmlType::from_name(name)
            .filter(|t| !t.activation_only())
            .map(Recipe::Uniform)
    }

    fn for_tensor(self, name: &str, layer: usize, layers: usize) -> GgmlType {
        match self {
            Recipe::Uniform(t) => t,
            Recipe::Medium(GgmlType::Q3K) => {
                let (value, down) = (
                    name.ends_with("attn_v.weight"),
                    name.ends_with("ffn_down.weight"),
                );
                if name == "output.weight" {
                    GgmlType::Q6K
                } else if (value && layer < 2) || (down && layer < layers / 16) {
                    GgmlType::Q5K
                } else if value || down || name.ends_with("attn_output.weight") {
                    GgmlType::Q4K
                } else {
                    GgmlType::Q3K
                }
            }
            Recipe::Medium(base) => {
                let more_bits =
                    layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
                let sensitive =
                    name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight");
                if name == "output.weight" || (sensitive && more_bits) {
                    GgmlType::Q6K
                } else {
                    base
                }
            }
        }
    }

    fn file_type(self) -> u32 {
        match self {
            Recipe::Uniform(t) => file_type(t),
            Recipe::Medium(GgmlType::Q5K) => 17,
            Recipe::Medium(GgmlType::Q3K) => 12,
            Recipe::Medium(_) => 15,
        }
    }
}

/// Makes a model of `shape` with weights of `recipe` (tensors whose rows do not
/// fit its blocks fall back to f16, norms stay f32, as llama.cpp's quantizer
/// does), the vocabulary copied from `vocab_from` when given.
pub fn make_model(
    shape: &Shape,
    recipe: Recipe,
    seed: u64,
    vocab_from: Option<&Header>,
) -> Result<GgufOut, String> {
    let mut out = GgufOut::new();
    let a = shape.arch.as_str();
    let k = |s: &str| format!("{a}.{s}");
    out.meta("general.architecture", Value::String(a.to_string()))
        .meta(
            "general.name",
            Value::String(format!("drover fixture seed {seed}")),
        )
        .meta(&k("context_length"), Value::U32(shape.ctx as u32))
        .meta(&k("embedding_length"), Value::U32(shape.dim as u32))
        .meta(&k("block_count"), Value::U32(shape.layers as u32))
        .meta(&k("feed_forward_length"), Value::U32(shape.ff as u32))
        .meta(&k("attention.head_count"), Value::U32(shape.heads as u32))
        .meta(
            &k("attention.head_count_kv"),
            Value::U32(shape.kv_heads as u32),
        )
        .meta(
            &k("rope.dimension_count"),
            Value::U32(shape.rope_dims.unwrap_or(shape.head()) as u32),
        )
        .meta(&k("rope.freq_base"), Value::F32(10000.0))
        .meta(&k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5))
        .meta("general.file_type", Value::U32(recipe.file_type()));
    if let Some(head) = shape.head_dim {
        out.meta(&k("attention.key_length"), Value::U32(head as u32))
            .meta(&k("attention.value_length"), Value::U32(head as u32));
    }
    vocabulary(&mut out, shape.vocab, vocab_from)?;
    let mut rng = SplitMix64::new(seed);
    let (d, q, kv) = (shape.dim, shape.q_dim(), shape.kv_dim());
    let layers = shape.layers;
    let mut tensor =
        |name: String, cols: usize, rows: usize, scale: f32, ty: Option<GgmlType>, offset: f32| {
            let layer = name
                .split('.')
                .nth(1)
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            let ty = ty.unwrap_or_else(|| recipe.for_tensor(&name, layer, layers));
            let values = draw(&mut rng, cols * rows, scale, offset);
            let ty = if (cols as u64).is_multiple_of(ty.block_elements()) {
                ty
            } else {
                GgmlType::F16
            };
            let dims = if rows == 1 {
                vec![cols as u64]
            } else {
                vec![cols as u64, rows as u64]
            };
            out.tensors.push(TensorOut {
                name,
                dims,
                ty,
                data: encoded(ty, &values),
            });
        };
    // Uniform weights scaled so each projection keeps unit variance; the
    // head is scaled up so that logits have clear maxima (greedy decoding
    // then does not hinge on rounding).
    let unit = |cols: usize| (3.0 / cols as f32).sqrt();
    tensor("token_embd.weight".into(), d, shape.vocab, 1.0, None, 0.0);
    for i in 0..shape.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        tensor(n("attn_norm.weight"), d, 1, 0.2, Some(GgmlType::F32), 1.0);
        tensor(n("attn_q.weight"), d, q, unit(d), None, 0.0);
        tensor(n("attn_k.weight"), d, kv, unit(d), None, 0.0);
        tensor(n("attn_v.weight"), d, kv, unit(d), None, 0.0);
        if a == "qwen2" {
            tensor(n("attn_q.bias"), q, 1, 0.5, Some(GgmlType::F32), 0.0);
            tensor(n("attn_k.bias"), kv, 1, 0.5, Some(GgmlType::F32), 0.0);
            tensor(n("attn_v.bias"), kv, 1, 0.5, Some(GgmlType::F32), 0.0);
        }
        tensor(n("attn_output.weight"), q, d, 0.5 * unit(q), None, 0.0);
        tensor(n("ffn_norm.weight"), d, 1, 0.2, Some(GgmlType::F32), 1.0);
        tensor(n("ffn_gate.weight"), d, shape.ff, unit(d), None, 0.0);
        tensor(n("ffn_up.weight"), d, shape.ff, unit(d), None, 0.0);
        tensor(
            n("ffn_down.weight"),
            shape.ff,
            d,
            0.5 * unit(shape.ff),
            None,
            0.0,
        );
    }
    tensor(
        "output_norm.weight".into(),
        d,
        1,
        0.2,
        Some(GgmlType::F32),
        1.0,
    );
    if !shape.tied {
        tensor(
            "output.weight".into(),
            d,
            shape.vocab,
            4.0 * unit(d),
            None,
            0.0,
        );
    }
    Ok(out)
}

/// The next `n` values `offset + rng.symmetric(scale)`, drawn in pieces on
/// every core: each piece's generator skips to where the piece starts, so
/// the values are those of one pass, and `rng` ends where that pass would.
fn draw(rng: &mut SplitMix64, n: usize, scale: f32, offset: f32) -> Vec<f32> {
    use rayon::prelude::*;
    const PIECE: usize = 1 << 16;
    let start = rng.clone();
    rng.skip(n as u64);
    let mut values = vec![0.0f32; n];
    values
        .par_chunks_mut(PIECE)
        .enumerate()
        .for_each(|(i, piece)| {
            let mut r = start.clone();
            r.skip((i * PIECE) as u64);
            piece
                .iter_mut()
                .for_each(|v| *v = offset + r.symmetric(scale));
        });
    values
}

/// `values` encoded as `ty`, in pieces of whole blocks on every core (each
/// block is encoded on its own, so the bytes are those of one pass).
fn encoded(ty: GgmlType, values: &[f32]) -> Vec<u8> {
    use rayon::prelude::*;
    let piece = 256 * ty.block_elements() as usize;
    let pieces: Vec<Vec<u8>> = values
        .par_chunks(piece)
        .map(|chunk| quantized(ty, chunk))
        .collect();
    pieces.concat()
}

/// llama.cpp's `general.file_type` for a model mostly of `ty`.
fn file_type(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q8_0 => 7,
        GgmlType::Q2K => 10,
        GgmlType::Q3K => 11,
        GgmlType::Q4K => 15,
        GgmlType::Q5K => 16,
        GgmlType::Q6K => 18,
        GgmlType::IQ4NL => 25,
        GgmlType::IQ4XS => 30,
        GgmlType::BF16 => 32,
        GgmlType::Q8K | GgmlType::Q8_1 => 7,
    }
}

/// The tokenizer keys: copied from `from` (whose vocabulary must have
/// `size` tokens), or a made-up SentencePiece vocabulary of `size` tokens.
fn vocabulary(out: &mut GgufOut, size: usize, from: Option<&Header>) -> Result<(), String> {
    if let Some(h) = from {
        let n = h
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .map_or(0, <[Value]>::len);
        if n != size {
            return Err(format!(
                "the vocabulary to copy has {n} tokens, the shape asks for {size}"
            ));
        }
        for (key, value) in h
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
        {
            out.meta(key, value.clone());
        }
        return Ok(());
    }
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![2i32, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let letters: Vec<char> = ('a'..='z').collect();
    let mut len = 1;
    'fill: loop {
        let count = letters.len().pow(len);
        for prefix in ["\u{2581}", ""] {
            for i in 0..count {
                if tokens.len() >= size {
                    break 'fill;
                }
                let mut s = prefix.to_string();
                let mut x = i;
                for _ in 0..len {
                    s.push(letters[x % 26]);
                    x /= 26;
                }
                tokens.push(s);
                types.push(1);
            }
        }
        len += 1;
    }
    let scores: Vec<Value> = (0..tokens.len())
        .map(|i| Value::F32(if i < 259 { 0.0 } else { -(i as f32) }))
        .collect();
    out.meta("tokenizer.ggml.model", Value::String("llama".into()))
        .meta(
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        )
        .meta("tokenizer.ggml.scores", Value::Array(scores))
        .meta(
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        )
        .meta("tokenizer.ggml.bos_token_id", Value::U32(1))
        .meta("tokenizer.ggml.eos_token_id", Value::U32(2))
        .meta("tokenizer.ggml.unknown_token_id", Value::U32(0));
    Ok(())
}

/// A model the golden tests compare with llama.cpp: made from its seed by
/// the test itself (the file is never committed), and by `cargo xtask
/// reference` for llama.cpp to answer on.
pub struct GoldenFixture {
    /// The golden file's name (`workers/tests/golden/NAME.json`).
    pub name: &'static str,
    /// The shape spec.
    pub shape: &'static str,
    /// The weight recipe.
    pub recipe: &'static str,
    /// The seed.
    pub seed: u64,
}

/// The fixtures, all with stories260K's vocabulary.
pub const GOLDEN_FIXTURES: &[GoldenFixture] = &[
    GoldenFixture {
        name: "small-f32",
        shape: "small",
        recipe: "f32",
        seed: 1,
    },
    GoldenFixture {
        name: "small-f16",
        shape: "small",
        recipe: "f16",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q8_0",
        shape: "small",
        recipe: "q8_0",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q4_0",
        shape: "small",
        recipe: "q4_0",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q4_k_m",
        shape: "small",
        recipe: "q4_k_m",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q5_k_m",
        shape: "small",
        recipe: "q5_k_m",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q3_k_m",
        shape: "small",
        recipe: "q3_k_m",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q2_k",
        shape: "small",
        recipe: "q2_k",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q5_0",
        shape: "small",
        recipe: "q5_0",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q4_1",
        shape: "small",
        recipe: "q4_1",
        seed: 1,
    },
    GoldenFixture {
        name: "small-q5_1",
        shape: "small",
        recipe: "q5_1",
        seed: 1,
    },
    GoldenFixture {
        name: "small-iq4_nl",
        shape: "small",
        recipe: "iq4_nl",
        seed: 1,
    },
    GoldenFixture {
        name: "small-iq4_xs",
        shape: "small",
        recipe: "iq4_xs",
        seed: 1,
    },
    GoldenFixture {
        name: "qwen2-f32",
        shape: "small,arch=qwen2",
        recipe: "f32",
        seed: 2,
    },
    // Heads of their own size (`attention.key_length`): 4 heads of 48, so
    // the query and attention's output are 192 wide in a 256-wide model.
    GoldenFixture {
        name: "heads-f32",
        shape: "small,heads=4,kv_heads=2,head_dim=48",
        recipe: "f32",
        seed: 3,
    },
];

impl GoldenFixture {
    /// Writes this fixture to `path`, the vocabulary taken from `vocab`.
    pub fn write(&self, vocab: &Header, path: &std::path::Path) -> Result<(), String> {
        let shape = Shape::parse(self.shape)?;
        let recipe = Recipe::parse(self.recipe).ok_or_else(|| format!("recipe {}", self.recipe))?;
        make_model(&shape, recipe, self.seed, Some(vocab))?
            .write_file(path)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}
