//! The vocabulary as a GGUF file describes it (`tokenizer.ggml.*`).

use super::Error;
use crate::gguf::{Header, Value};

/// A tokenizer's vocabulary and settings, as read from a model's metadata
/// (or built by hand). [`super::Tokenizer::new`] checks it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vocab {
    /// `tokenizer.ggml.model`: "llama" (SentencePiece) or "gpt2" (byte-level BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer ("llama-bpe", "qwen2", ...).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: each token's text; the id is the index.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`: SentencePiece scores; empty means all 0.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control,
    /// 4 user-defined, 5 unused, 6 byte; empty means all normal.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.merges`: "left right", highest priority first.
    pub merges: Vec<String>,
    /// The beginning-of-sequence token.
    pub bos: Option<u32>,
    /// The end-of-sequence token.
    pub eos: Option<u32>,
    /// The unknown token.
    pub unk: Option<u32>,
    /// The end-of-turn token (`tokenizer.ggml.eot_token_id`).
    pub eot: Option<u32>,
    /// The end-of-message token (`tokenizer.ggml.eom_token_id`).
    pub eom: Option<u32>,
    /// Whether `encode(.., add_special = true)` starts with BOS.
    pub add_bos: bool,
    /// Whether `encode(.., add_special = true)` ends with EOS.
    pub add_eos: bool,
    /// SentencePiece: whether a space is put before the text (and after
    /// each special token found in it).
    pub add_space_prefix: bool,
}

/// The pre-tokenizer names of llama.cpp's llama-3 family (`LLAMA3`).
pub(super) const LLAMA3_PRES: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
];

/// The pre-tokenizer names of llama.cpp's qwen2 family (`QWEN2`).
pub(super) const QWEN2_PRES: &[&str] = &["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"];

/// llama.cpp's defaults where the metadata says nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// The BOS id.
    pub bos: Option<u32>,
    /// The EOS id.
    pub eos: Option<u32>,
    /// The unknown-token id.
    pub unk: Option<u32>,
    /// Whether BOS is added.
    pub add_bos: bool,
    /// Whether a space is put before the text.
    pub add_space_prefix: bool,
}

impl Defaults {
    /// The defaults of `model` with pre-tokenizer `pre` (`llama_vocab::impl::load`):
    /// SentencePiece has BOS 1, EOS 2, unknown 0, adds BOS and a space;
    /// byte-level BPE has BOS = EOS = 11 and adds BOS only for llama-3.
    pub fn of(model: &str, pre: Option<&str>) -> Defaults {
        match model {
            "llama" => Defaults {
                bos: Some(1),
                eos: Some(2),
                unk: Some(0),
                add_bos: true,
                add_space_prefix: true,
            },
            _ => Defaults {
                bos: Some(11),
                eos: Some(11),
                unk: None,
                add_bos: pre.is_some_and(|p| LLAMA3_PRES.contains(&p)),
                add_space_prefix: false,
            },
        }
    }
}

impl Vocab {
    /// Reads the `tokenizer.ggml.*` keys of a GGUF header as llama.cpp's
    /// `llama_vocab::impl::load` does: absent special ids and flags take
    /// the model's [`Defaults`]; an id past the vocabulary falls back to the
    /// default, and a default past it to none.
    pub fn from_gguf(header: &Header) -> Result<Vocab, Error> {
        let model = string(header, "tokenizer.ggml.model")?
            .ok_or_else(|| missing("tokenizer.ggml.model", "a string"))?;
        let pre = string(header, "tokenizer.ggml.pre")?;
        let tokens = strings(header, "tokenizer.ggml.tokens")?
            .ok_or_else(|| missing("tokenizer.ggml.tokens", "an array of strings"))?;
        let scores = match array(header, "tokenizer.ggml.scores", "an array of numbers")? {
            Some(items) => items
                .iter()
                .map(|v| number(v, "tokenizer.ggml.scores"))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let token_types = match array(header, "tokenizer.ggml.token_type", "an array of i32")? {
            Some(items) => items
                .iter()
                .map(|v| int32(v, "tokenizer.ggml.token_type"))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let merges = strings(header, "tokenizer.ggml.merges")?.unwrap_or_default();
        let defaults = Defaults::of(&model, pre.as_deref());
        let n = tokens.len();
        let id = |key: &str, default: Option<u32>| -> Result<Option<u32>, Error> {
            let default = default.filter(|&d| (d as usize) < n);
            Ok(match header.get(key) {
                None => default,
                Some(v) => {
                    let id = v
                        .as_u64()
                        .ok_or_else(|| missing(key, "an unsigned integer"))?;
                    match u32::try_from(id) {
                        Ok(id) if (id as usize) < n => Some(id),
                        _ => default,
                    }
                }
            })
        };
        Ok(Vocab {
            bos: id("tokenizer.ggml.bos_token_id", defaults.bos)?,
            eos: id("tokenizer.ggml.eos_token_id", defaults.eos)?,
            unk: id("tokenizer.ggml.unknown_token_id", defaults.unk)?,
            eot: id("tokenizer.ggml.eot_token_id", None)?,
            eom: id("tokenizer.ggml.eom_token_id", None)?,
            add_bos: flag(header, "tokenizer.ggml.add_bos_token")?.unwrap_or(defaults.add_bos),
            add_eos: flag(header, "tokenizer.ggml.add_eos_token")?.unwrap_or(false),
            add_space_prefix: flag(header, "tokenizer.ggml.add_space_prefix")?
                .unwrap_or(defaults.add_space_prefix),
            model,
            pre,
            tokens,
            scores,
            token_types,
            merges,
        })
    }
}

fn missing(key: &str, expected: &'static str) -> Error {
    Error::Metadata {
        key: key.to_string(),
        expected,
    }
}

fn string(header: &Header, key: &str) -> Result<Option<String>, Error> {
    match header.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| missing(key, "a string")),
    }
}

fn flag(header: &Header, key: &str) -> Result<Option<bool>, Error> {
    match header.get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or_else(|| missing(key, "a bool")),
    }
}

fn array<'h>(
    header: &'h Header,
    key: &str,
    expected: &'static str,
) -> Result<Option<&'h [Value]>, Error> {
    match header.get(key) {
        None => Ok(None),
        Some(v) => v.as_array().map(Some).ok_or_else(|| missing(key, expected)),
    }
}

fn strings(header: &Header, key: &str) -> Result<Option<Vec<String>>, Error> {
    let Some(items) = array(header, key, "an array of strings")? else {
        return Ok(None);
    };
    let texts = items.iter().map(|v| {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| missing(key, "an array of strings"))
    });
    texts.collect::<Result<Vec<_>, _>>().map(Some)
}

fn number(v: &Value, key: &str) -> Result<f32, Error> {
    match *v {
        Value::F32(x) => Ok(x),
        Value::I32(x) => Ok(x as f32),
        _ => Err(missing(key, "an array of f32 or i32")),
    }
}

fn int32(v: &Value, key: &str) -> Result<i32, Error> {
    match *v {
        Value::I32(x) => Ok(x),
        _ => Err(missing(key, "an array of i32")),
    }
}
