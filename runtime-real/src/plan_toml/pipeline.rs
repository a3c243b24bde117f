//! The plan's pipeline sections: `[model]`, `[pipeline]`, `[prompt]`,
//! `[sampling]`. A plan with none of them runs no model; `[pipeline]`
//! needs `[model]`, and the others need `[pipeline]`.

use super::reader::{Doc, Table, Value, type_name};
use crate::pipeline::spec::{DEFAULT_RPC_ADDR, ModelSource, PipelineSpec};
use crate::pipeline::wire::SamplingSpec;
use core_fsm::plan::RunPlan;
use std::path::Path;
use toml::de::DeValue;
use workers::model::Backend;

const MODEL: &[&str] = &["path", "url", "sha256"];
const PIPELINE: &[&str] = &[
    "group",
    "split",
    "ctx",
    "threads",
    "backend",
    "prefill_chunk",
];
const PROMPT: &[&str] = &["rpc_addr", "default_max_tokens"];
/// The most threads a stage may be given (the worker's own bound).
const MAX_THREADS: u32 = workers::wire::MAX_THREADS;
const SAMPLING: &[&str] = &["temperature", "top_k", "top_p", "seed"];

/// Reads the pipeline sections from the root table.
pub(crate) fn read(
    doc: &mut Doc,
    root: &mut Table<'_, '_>,
    plan: &RunPlan,
) -> Option<PipelineSpec> {
    let model = root.take(doc, "model");
    let pipeline = root.take(doc, "pipeline");
    let prompt = root.take(doc, "prompt");
    let sampling = root.take(doc, "sampling");
    let Some(pipeline) = pipeline else {
        for (name, value) in [("model", model), ("prompt", prompt), ("sampling", sampling)] {
            if let Some(value) = value {
                doc.error(value.span(), name, "needs a [pipeline] section to run in");
            }
        }
        return None;
    };
    let mut table = doc.table("pipeline", pipeline, PIPELINE)?;
    let group = table.string(doc, "group", true).unwrap_or_default();
    if !group.is_empty() && !plan.groups.iter().any(|g| g.group_id.as_str() == group) {
        let span = pipeline.span();
        let names: Vec<&str> = plan.groups.iter().map(|g| g.group_id.as_str()).collect();
        let reason = format!(
            "no group `{group}` in the plan (groups: {})",
            names.join(", ")
        );
        doc.error(span, "pipeline.group", reason);
    }
    let split = read_split(doc, &mut table);
    let ctx = table.u32(doc, "ctx", false).unwrap_or(0);
    // Threads each stage's worker computes with (0: every core).
    let threads = table.integer(doc, "threads", false, MAX_THREADS.into());
    let threads = threads.map_or(0, |n| u32::try_from(n).expect("at most MAX_THREADS"));
    let backend = read_backend(doc, &mut table);
    // Most tokens a prefill chunk carries (0: the runtime's own cut).
    let prefill_chunk = table.u32(doc, "prefill_chunk", false).unwrap_or(0);
    table.finish(doc);
    let stages = plan
        .groups
        .iter()
        .find(|g| g.group_id.as_str() == group)
        .map(|g| g.count);
    if let Some(stages) = stages
        && !split.is_empty()
        && split.len() != stages as usize
    {
        let reason = format!(
            "{} entries for the group's {stages} nodes (one stage each)",
            split.len()
        );
        doc.error(pipeline.span(), "pipeline.split", reason);
    }
    let model = match model {
        Some(value) => read_model(doc, value)?,
        None => {
            doc.error(
                pipeline.span(),
                "model",
                "a [pipeline] needs a [model] section",
            );
            return None;
        }
    };
    let (rpc_addr, default_max_tokens) = match prompt {
        Some(value) => read_prompt(doc, value)?,
        None => (DEFAULT_RPC_ADDR.parse().expect("a socket address"), 64),
    };
    let sampling = match sampling {
        Some(value) => read_sampling(doc, value)?,
        None => SamplingSpec::default(),
    };
    Some(PipelineSpec {
        model,
        group,
        split,
        rpc_addr,
        default_max_tokens,
        sampling,
        ctx,
        threads,
        backend,
        prefill_chunk,
    })
}

/// `backend`: where each stage's blocks run (`cpu`, the default, or
/// `cuda`). Whether a node can run it is the node's to say, when it loads.
fn read_backend(doc: &mut Doc, table: &mut Table<'_, '_>) -> Backend {
    let Some(value) = table.take(doc, "backend") else {
        return Backend::Cpu;
    };
    match value.get_ref() {
        DeValue::String(name) if name.as_ref() == "cpu" => Backend::Cpu,
        DeValue::String(name) if name.as_ref() == "cuda" => Backend::Cuda,
        other => {
            let reason = match other {
                DeValue::String(name) => format!("unknown backend `{name}` (cpu, cuda)"),
                other => format!("expected \"cpu\" or \"cuda\", found {}", type_name(other)),
            };
            doc.error(value.span(), "pipeline.backend", reason);
            Backend::Cpu
        }
    }
}

fn read_split(doc: &mut Doc, table: &mut Table<'_, '_>) -> Vec<u32> {
    let Some(value) = table.take(doc, "split") else {
        return Vec::new();
    };
    let DeValue::Array(items) = value.get_ref() else {
        let reason = format!(
            "expected an array of layer counts, found {}",
            type_name(value.get_ref())
        );
        doc.error(value.span(), "pipeline.split", reason);
        return Vec::new();
    };
    let mut split = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let n = match item.get_ref() {
            DeValue::Integer(int) => u32::from_str_radix(int.as_str(), int.radix()).ok(),
            _ => None,
        };
        match n {
            Some(n) if n > 0 => split.push(n),
            _ => {
                let reason = "every stage needs a whole number of layers, at least 1";
                doc.error(item.span(), &format!("pipeline.split[{i}]"), reason);
            }
        }
    }
    split
}

fn read_model(doc: &mut Doc, value: &Value<'_>) -> Option<ModelSource> {
    let mut table = doc.table("model", value, MODEL)?;
    let path = table.string(doc, "path", false);
    let url = table.string(doc, "url", false);
    let sha256 = table.string(doc, "sha256", false);
    table.finish(doc);
    match (path, url, sha256) {
        (Some(path), None, None) => Some(ModelSource::Path(path.into())),
        (None, Some(url), Some(sha256)) => {
            let hex = sha256.len() == 64 && sha256.chars().all(|c| c.is_ascii_hexdigit());
            if !hex {
                doc.error(value.span(), "model.sha256", "must be 64 hex digits");
                return None;
            }
            Some(ModelSource::Url {
                url,
                sha256: sha256.to_ascii_lowercase(),
            })
        }
        (None, Some(_), None) => {
            doc.error(
                value.span(),
                "model.sha256",
                "a model `url` needs its `sha256`",
            );
            None
        }
        _ => {
            doc.error(
                value.span(),
                "model",
                "give either `path`, or `url` with `sha256`",
            );
            None
        }
    }
}

fn read_prompt(doc: &mut Doc, value: &Value<'_>) -> Option<(std::net::SocketAddr, u32)> {
    let mut table = doc.table("prompt", value, PROMPT)?;
    let addr = table.string(doc, "rpc_addr", false);
    let max = table.u32(doc, "default_max_tokens", false).unwrap_or(64);
    table.finish(doc);
    let addr = addr.unwrap_or_else(|| DEFAULT_RPC_ADDR.to_owned());
    match addr.parse() {
        Ok(addr) => Some((addr, max)),
        Err(_) => {
            let reason = format!("`{addr}` is not an ip:port");
            doc.error(value.span(), "prompt.rpc_addr", reason);
            None
        }
    }
}

fn read_sampling(doc: &mut Doc, value: &Value<'_>) -> Option<SamplingSpec> {
    let mut table = doc.table("sampling", value, SAMPLING)?;
    let temperature = table.scaled(doc, "temperature", 1000, 100.0, "0.001");
    let top_k = table.u32(doc, "top_k", false).unwrap_or(0);
    let top_p = table.scaled(doc, "top_p", 1000, 1.0, "0.001");
    let seed = table.integer(doc, "seed", false, u64::MAX).unwrap_or(0);
    table.finish(doc);
    Some(SamplingSpec {
        temperature: temperature.map_or(0.0, |t| t as f32 / 1000.0),
        top_k,
        top_p: top_p.map_or(1.0, |p| p as f32 / 1000.0),
        seed,
    })
}

/// A relative model path is relative to the plan file's folder.
pub(crate) fn resolve(spec: &mut PipelineSpec, plan_dir: &Path) {
    if let ModelSource::Path(path) = &mut spec.model
        && path.is_relative()
    {
        let joined = plan_dir.join(&*path);
        *path = std::fs::canonicalize(&joined)
            .or_else(|_| std::path::absolute(&joined))
            .unwrap_or(joined);
    }
}
