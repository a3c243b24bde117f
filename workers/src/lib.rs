//! drover-worker: the compute process every pipeline stage runs.
//!
//! It reads a llama-family GGUF model ([`gguf`]), maps only the tensors of
//! its layer range ([`model::weights`]), and runs them on the CPU with dot
//! products on the quantized blocks ([`kernels`]); the first stage embeds
//! tokens and the last samples the next one ([`sample`]). Its reference is
//! llama.cpp on the same file: same tokens, logits within rounding.

pub mod affinity;
pub mod cli;
pub mod cuda;
pub mod engine;
pub mod fixture;
pub mod gguf;
pub mod heap;
pub mod kernels;
pub mod model;
pub mod rng;
pub mod sample;
pub mod tensor;
pub mod tokenizer;
pub mod wire;
