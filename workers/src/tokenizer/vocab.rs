//! The vocabulary as a GGUF file describes it (`tokenizer.ggml.*`).

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
