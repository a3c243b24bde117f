//! Writes GGUF files (version 3, or 1 and 2 for reader tests): the project's
//! own fixtures and benchmark models.

use super::{DEFAULT_ALIGNMENT, MAGIC, Value};
use crate::tensor::GgmlType;
use std::io::{self, Write};
use std::path::Path;

/// A tensor to write: its name, dims (innermost first), type and bytes.
pub struct TensorOut {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost first.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// The encoded data, exactly `ty.row_bytes(product of dims)` long.
    pub data: Vec<u8>,
}

/// A whole file to write.
pub struct GgufOut {
    /// GGUF version, 1 to 3.
    pub version: u32,
    /// Metadata in order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors in order.
    pub tensors: Vec<TensorOut>,
}

impl GgufOut {
    /// An empty version-3 file.
    pub fn new() -> GgufOut {
        GgufOut {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Adds a metadata key.
    pub fn meta(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// The alignment of the file's tensor data (`general.alignment`).
    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// The file's bytes before its tensor data (magic, counts, metadata,
    /// tensor infos, padding) for tensors of these names, dims and types,
    /// in order; each tensor's data is `ty.row_bytes(product of dims)` long
    /// and padded to [`GgufOut::alignment`].
    pub fn head<'t>(
        &self,
        tensors: impl ExactSizeIterator<Item = (&'t str, &'t [u64], GgmlType)>,
    ) -> Vec<u8> {
        let alignment = self.alignment();
        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC.to_le_bytes());
        head.extend_from_slice(&self.version.to_le_bytes());
        self.count(&mut head, tensors.len() as u64);
        self.count(&mut head, self.metadata.len() as u64);
        for (key, value) in &self.metadata {
            self.string(&mut head, key);
            head.extend_from_slice(&value.type_code().to_le_bytes());
            self.value(&mut head, value);
        }
        let mut offset = 0u64;
        for (name, dims, ty) in tensors {
            self.string(&mut head, name);
            head.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for &d in dims {
                self.count(&mut head, d);
            }
            head.extend_from_slice(&ty.code().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset += padded(ty.row_bytes(dims.iter().product()), alignment);
        }
        let len = padded(head.len() as u64, alignment);
        head.resize(len as usize, 0);
        head
    }

    /// Encodes the file into `w`.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        for t in &self.tensors {
            assert_eq!(
                t.data.len() as u64,
                t.ty.row_bytes(t.dims.iter().product()),
                "{}",
                t.name
            );
        }
        let tensors = self.tensors.iter();
        w.write_all(&self.head(tensors.map(|t| (t.name.as_str(), t.dims.as_slice(), t.ty))))?;
        let alignment = self.alignment();
        for t in &self.tensors {
            w.write_all(&t.data)?;
            let len = t.data.len() as u64;
            w.write_all(&vec![0u8; (padded(len, alignment) - len) as usize])?;
        }
        Ok(())
    }

    /// Writes the file to `path` through a temporary file and a rename, so a
    /// failed write never leaves half a model behind.
    pub fn write_file(&self, path: &Path) -> io::Result<()> {
        let tmp = path.with_extension("gguf.partial");
        let result = (|| {
            let mut f = io::BufWriter::new(std::fs::File::create(&tmp)?);
            self.write_to(&mut f)?;
            f.into_inner().map_err(|e| e.into_error())?.sync_all()
        })();
        match result {
            Ok(()) => std::fs::rename(&tmp, path),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    fn count(&self, out: &mut Vec<u8>, n: u64) {
        if self.version == 1 {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        } else {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }

    fn string(&self, out: &mut Vec<u8>, s: &str) {
        self.count(out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }

    fn value(&self, out: &mut Vec<u8>, v: &Value) {
        match v {
            Value::U8(x) => out.push(*x),
            Value::I8(x) => out.push(*x as u8),
            Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(x) => out.push(u8::from(*x)),
            Value::String(s) => self.string(out, s),
            Value::Array(items) => {
                let item_ty = items.first().map_or(4, Value::type_code);
                out.extend_from_slice(&item_ty.to_le_bytes());
                self.count(out, items.len() as u64);
                for item in items {
                    self.value(out, item);
                }
            }
            Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        }
    }
}

impl Default for GgufOut {
    fn default() -> Self {
        GgufOut::new()
    }
}

/// `len` rounded up to a whole number of `alignment`s.
pub fn padded(len: u64, alignment: u64) -> u64 {
    len.div_ceil(alignment) * alignment
}
