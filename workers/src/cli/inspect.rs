//! `drover-worker inspect`: a model's metadata and tensor table.

use super::CliResult;
use crate::gguf::Value;
use crate::gguf::file::ModelFile;
use crate::model::Config;
use std::path::Path;

/// Prints `model`'s header, as tables or one JSON object.
pub fn inspect(model: &Path, json: bool) -> CliResult {
    let file = ModelFile::open(model).map_err(|e| e.to_string())?;
    let h = file.header();
    let config = Config::from_header(h, &model.display().to_string());
    if json {
        let metadata: serde_json::Map<String, serde_json::Value> = h
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), to_json(v)))
            .collect();
        let tensors: Vec<_> = h
            .tensors
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name, "dims": t.dims, "type": t.ty.name(),
                    "offset": h.data_offset + t.offset, "bytes": t.bytes(),
                })
            })
            .collect();
        let out = serde_json::json!({
            "path": model.display().to_string(),
            "version": h.version,
            "alignment": h.alignment,
            "data_offset": h.data_offset,
            "metadata": metadata,
            "tensors": tensors,
            "config_error": config.as_ref().err().map(|e| e.to_string()),
        });
        outln!("{out}");
        return Ok(());
    }
    outln!(
        "{}: GGUF v{}, {} metadata keys, {} tensors",
        model.display(),
        h.version,
        h.metadata.len(),
        h.tensors.len()
    );
    match &config {
        Ok(c) => outln!(
            "model: {} · {} blocks · dim {} · ff {} · {} heads ({} kv) · head {} · rope {} · ctx {} · vocab {}",
            c.arch,
            c.blocks,
            c.embedding,
            c.feed_forward,
            c.heads,
            c.kv_heads,
            c.head_dim,
            c.rope_dims,
            c.context,
            c.vocab
        ),
        Err(e) => outln!("model: not runnable: {e}"),
    };
    outln!("\nmetadata:");
    for (k, v) in &h.metadata {
        outln!("  {k:<44} {v}");
    }
    outln!(
        "\n  {:<32} {:<8} {:<20} {:>12} {:>12}",
        "tensor",
        "type",
        "dims",
        "offset",
        "bytes"
    );
    for t in &h.tensors {
        let dims = format!("{:?}", t.dims);
        outln!(
            "  {:<32} {:<8} {:<20} {:>12} {:>12}",
            t.name,
            t.ty.name(),
            dims,
            h.data_offset + t.offset,
            t.bytes()
        );
    }
    let total: u64 = h.tensors.iter().map(|t| t.bytes()).sum();
    outln!("\n{} tensor bytes", total);
    Ok(())
}

fn to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::String(s) => J::String(s.clone()),
        Value::Bool(b) => J::Bool(*b),
        Value::F32(f) => serde_json::Number::from_f64(*f as f64).map_or(J::Null, J::Number),
        Value::F64(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Value::Array(items) => J::Array(items.iter().map(to_json).collect()),
        Value::I8(x) => J::from(*x),
        Value::I16(x) => J::from(*x),
        Value::I32(x) => J::from(*x),
        Value::I64(x) => J::from(*x),
        other => J::from(other.as_u64().unwrap_or_default()),
    }
}
