//! The plan's pipeline sections (`[model]`, `[pipeline]`, `[prompt]`,
//! `[sampling]`), as `drover up` uses them.

use super::wire::SamplingSpec;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The default prompt RPC address.
pub const DEFAULT_RPC_ADDR: &str = "127.0.0.1:19777";

/// Where the model comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ModelSource {
    /// A GGUF file on the orchestrator's machine.
    Path(PathBuf),
    /// A GGUF fetched once into the state dir, checked against its sha256.
    Url {
        /// Where.
        url: String,
        /// Its sha256 (hex).
        sha256: String,
    },
}

/// A plan's pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineSpec {
    /// The model.
    pub model: ModelSource,
    /// The group whose nodes run the stages, one stage per node, in node order.
    pub group: String,
    /// Layers per stage (empty: balanced contiguous ranges).
    pub split: Vec<u32>,
    /// The prompt RPC's address.
    pub rpc_addr: SocketAddr,
    /// Tokens a request that names no `max_tokens` may generate (0: no cap).
    pub default_max_tokens: u32,
    /// The last stage's sampler.
    pub sampling: SamplingSpec,
    /// Context positions (0: the model's).
    pub ctx: u32,
    /// Threads each stage's worker computes with (0: every core).
    pub threads: u32,
    /// Most tokens one prefill chunk carries (0: no bound of the plan's
    /// own; a prompt is cut in up to [`super::PREFILL_IN_FLIGHT`] chunks,
    /// each fitting a frame).
    pub prefill_chunk: u32,
    /// Where each stage's blocks run (`cpu`, `cuda`).
    pub backend: workers::model::Backend,
}
