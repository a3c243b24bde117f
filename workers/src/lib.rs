//! drover workers: the compute process an agent starts.

pub mod tokenizer;
