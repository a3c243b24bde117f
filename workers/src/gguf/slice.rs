//! A stage's slice of a model as a GGUF of its own: the whole metadata,
//! and only the tensors the stage runs. A node that fetched the header and
//! its tensors' byte ranges writes one, and `drover-worker stage` opens it
//! as it would open the whole file.

use super::write::{GgufOut, TensorOut};
use super::{Header, TensorInfo, Value};
use crate::model::Config;
use crate::model::weights::names_for;
use std::io;
use std::ops::Range;
use std::path::Path;

/// What to fetch for a stage: the tensors and their byte ranges in the
/// whole file.
#[derive(Clone, Debug)]
pub struct SlicePlan {
    /// The stage's blocks.
    pub layers: Range<usize>,
    /// The tensors, in file order.
    pub tensors: Vec<TensorInfo>,
    /// `(absolute offset, length)` of each tensor's data, in file order.
    pub ranges: Vec<(u64, u64)>,
}

impl SlicePlan {
    /// The plan for blocks `layers` of the model `header` describes.
    pub fn new(header: &Header, layers: Range<usize>) -> Result<SlicePlan, String> {
        let config = Config::from_header(header, "model").map_err(|e| e.to_string())?;
        if layers.start >= layers.end || layers.end > config.blocks {
            return Err(format!(
                "layers {layers:?} are not a range of the {} blocks",
                config.blocks
            ));
        }
        let tied = header.tensor("output.weight").is_none();
        let names = names_for(&config, &layers, tied);
        let mut tensors: Vec<TensorInfo> = names
            .iter()
            .map(|n| {
                header
                    .tensor(n)
                    .cloned()
                    .ok_or_else(|| format!("tensor {n:?} is not in the model"))
            })
            .collect::<Result<_, _>>()?;
        tensors.sort_by_key(|t| t.offset);
        let ranges = tensors
            .iter()
            .map(|t| (header.data_offset + t.offset, t.bytes()))
            .collect();
        Ok(SlicePlan {
            layers,
            tensors,
            ranges,
        })
    }

    /// Bytes of tensor data the slice holds.
    pub fn data_bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }
}

/// Writes the slice of `plan` to `out`, asking `fetch(offset, len)` for each
/// tensor's bytes; the metadata is the whole model's, plus
/// `drover.slice.first_layer` / `drover.slice.end_layer`.
pub fn write_slice(
    header: &Header,
    plan: &SlicePlan,
    mut fetch: impl FnMut(u64, u64) -> io::Result<Vec<u8>>,
    out: &Path,
) -> io::Result<()> {
    let mut file = GgufOut::new();
    file.metadata = header
        .metadata
        .iter()
        .filter(|(k, _)| !k.starts_with("drover.slice."))
        .cloned()
        .collect();
    file.meta(
        "drover.slice.first_layer",
        Value::U32(plan.layers.start as u32),
    )
    .meta("drover.slice.end_layer", Value::U32(plan.layers.end as u32));
    for (t, &(offset, len)) in plan.tensors.iter().zip(&plan.ranges) {
        let data = fetch(offset, len)?;
        if data.len() as u64 != len {
            return Err(io::Error::other(format!(
                "tensor {:?}: fetched {} bytes, expected {len}",
                t.name,
                data.len()
            )));
        }
        file.tensors.push(TensorOut {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
            data,
        });
    }
    file.write_file(out)
}
