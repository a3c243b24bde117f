//! Reads a GGUF header with bounded allocations.
//!
//! Every count and length in the file is checked against the bytes that are
//! left before anything is allocated for it, so a hostile file can neither
//! make the reader allocate without bound nor read past its end. Each error
//! names the field and the offset where it starts.

use super::{DEFAULT_ALIGNMENT, Error, Header, MAGIC, TensorInfo, Value};
use crate::tensor::{GgmlType, unsupported_type_name};
use std::io::Read;

/// Most dimensions a ggml tensor has.
const MAX_DIMS: u32 = 4;
/// Deepest nesting of arrays accepted (ggml writes at most one level).
const MAX_ARRAY_DEPTH: u32 = 2;

/// Reads a header from `source`, a stream of `len` bytes named `path` in
/// errors. Only the header is read; the tensor data is not touched.
pub fn read_header(source: impl Read, len: u64, path: &str) -> Result<Header, Error> {
    let mut r = Reader {
        source,
        offset: 0,
        len,
        path,
        version: 0,
    };
    r.header()
}

/// Reads a header from bytes in memory.
pub fn parse_header(bytes: &[u8], path: &str) -> Result<Header, Error> {
    read_header(bytes, bytes.len() as u64, path)
}

struct Reader<'p, R> {
    source: R,
    offset: u64,
    len: u64,
    path: &'p str,
    version: u32,
}

impl<R: Read> Reader<'_, R> {
    fn error(&self, at: u64, field: &str, reason: impl Into<String>) -> Error {
        Error::Format {
            path: self.path.to_string(),
            offset: at,
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    fn left(&self) -> u64 {
        self.len.saturating_sub(self.offset)
    }

    fn bytes<const N: usize>(&mut self, field: &str) -> Result<[u8; N], Error> {
        let mut buf = [0u8; N];
        self.fill(&mut buf, field)?;
        Ok(buf)
    }

    fn fill(&mut self, buf: &mut [u8], field: &str) -> Result<(), Error> {
        if (buf.len() as u64) > self.left() {
            return Err(self.error(
                self.offset,
                field,
                format!(
                    "needs {} bytes, the file ends after {}",
                    buf.len(),
                    self.left()
                ),
            ));
        }
        self.source
            .read_exact(buf)
            .map_err(|e| self.error(self.offset, field, format!("read failed: {e}")))?;
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn u32(&mut self, field: &str) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.bytes(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.bytes(field)?))
    }

    /// A count or length: 32 bits in version 1, 64 bits after.
    fn count(&mut self, field: &str) -> Result<u64, Error> {
        if self.version == 1 {
            self.u32(field).map(u64::from)
        } else {
            self.u64(field)
        }
    }

    /// A count of items each at least `item_bytes` long, checked against
    /// the bytes left so that nothing is allocated for items that cannot be
    /// there.
    fn bounded_count(&mut self, field: &str, item_bytes: u64) -> Result<usize, Error> {
        let at = self.offset;
        let n = self.count(field)?;
        let most = self.left() / item_bytes.max(1);
        if n > most {
            return Err(self.error(
                at,
                field,
                format!("count {n} cannot fit in the {} bytes left", self.left()),
            ));
        }
        usize::try_from(n).map_err(|_| self.error(at, field, format!("count {n} too large")))
    }

    fn string(&mut self, field: &str) -> Result<String, Error> {
        let at = self.offset;
        let n = self.bounded_count(field, 1)?;
        let mut buf = vec![0u8; n];
        self.fill(&mut buf, field)?;
        String::from_utf8(buf).map_err(|e| self.error(at, field, format!("not UTF-8: {e}")))
    }

    fn header(&mut self) -> Result<Header, Error> {
        let magic = self.u32("magic")?;
        if magic != MAGIC {
            return Err(self.error(
                0,
                "magic",
                format!(
                    "{:?} is not \"GGUF\"",
                    magic.to_le_bytes().escape_ascii().to_string()
                ),
            ));
        }
        self.version = self.u32("version")?;
        if !(1..=3).contains(&self.version) {
            return Err(self.error(
                4,
                "version",
                format!("{} (supported: 1, 2, 3)", self.version),
            ));
        }
        // The smallest tensor info is a 1-byte name after its length, one
        // dimension, a type and an offset; the smallest key/value a 1-byte
        // key and a 1-byte value.
        let tensor_count = self.bounded_count("tensor_count", 8)?;
        let kv_count = self.bounded_count("metadata_kv_count", 8)?;
        let mut metadata = Vec::with_capacity(kv_count.min(4096));
        for i in 0..kv_count {
            let key = self.string(&format!("metadata[{i}] key"))?;
            let field = format!("metadata[{i}] {key:?}");
            let at = self.offset;
            let ty = self.u32(&field)?;
            let value = self.value(ty, &field, at, 0)?;
            metadata.push((key, value));
        }
        let alignment = self.alignment(&metadata)?;
        let mut tensors = Vec::with_capacity(tensor_count.min(65536));
        let mut starts = Vec::with_capacity(tensor_count.min(65536));
        for i in 0..tensor_count {
            starts.push(self.offset);
            tensors.push(self.tensor_info(i)?);
        }
        let data_offset = self.offset.div_ceil(alignment) * alignment;
        let header = Header {
            version: self.version,
            metadata,
            tensors,
            alignment,
            data_offset,
        };
        self.check_tensors(&header, &starts)?;
        Ok(header)
    }

    fn value(&mut self, ty: u32, field: &str, at: u64, depth: u32) -> Result<Value, Error> {
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>(field)?[0]),
            1 => Value::I8(self.bytes::<1>(field)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.bytes(field)?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes(field)?)),
            4 => Value::U32(self.u32(field)?),
            5 => Value::I32(i32::from_le_bytes(self.bytes(field)?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes(field)?)),
            7 => match self.bytes::<1>(field)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(self.error(at, field, format!("bool byte {b} is neither 0 nor 1")));
                }
            },
            8 => Value::String(self.string(field)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.error(at, field, "arrays nested too deeply"));
                }
                let item_at = self.offset;
                let item_ty = self.u32(field)?;
                let item_bytes = match item_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 if self.version == 1 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    other => {
                        return Err(self.error(
                            item_at,
                            field,
                            format!("unknown array item type {other}"),
                        ));
                    }
                };
                let n = self.bounded_count(field, item_bytes)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let at = self.offset;
                    items.push(self.value(item_ty, field, at, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64(field)?),
            11 => Value::I64(i64::from_le_bytes(self.bytes(field)?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes(field)?)),
            other => return Err(self.error(at, field, format!("unknown value type {other}"))),
        })
    }

    fn alignment(&self, metadata: &[(String, Value)]) -> Result<u64, Error> {
        let Some((_, v)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
            return Ok(DEFAULT_ALIGNMENT);
        };
        match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= 1 << 20 => Ok(a),
            _ => Err(self.error(
                0,
                "general.alignment",
                format!("{v} is not a power of two up to 1 MiB"),
            )),
        }
    }

    fn tensor_info(&mut self, i: usize) -> Result<TensorInfo, Error> {
        let name = self.string(&format!("tensor[{i}] name"))?;
        let field = format!("tensor[{i}] {name:?}");
        let at = self.offset;
        let n_dims = self.u32(&format!("{field} n_dims"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(self.error(
                at,
                &format!("{field} n_dims"),
                format!("{n_dims} (1 to {MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let dim = self.count(&format!("{field} dims[{d}]"))?;
            dims.push(dim);
        }
        let at = self.offset;
        let code = self.u32(&format!("{field} type"))?;
        let ty = GgmlType::from_code(code)
            .filter(|t| !t.activation_only())
            .ok_or_else(|| {
                let name = match GgmlType::from_code(code) {
                    Some(t) => format!("{t}, an activation type"),
                    None => unsupported_type_name(code).to_owned(),
                };
                self.error(
                    at,
                    &format!("{field} type"),
                    format!("ggml type {code} ({name}) is not supported"),
                )
            })?;
        let offset = self.u64(&format!("{field} offset"))?;
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
        })
    }

    /// Shapes, block divisibility, alignment and extent of every tensor.
    fn check_tensors(&self, header: &Header, starts: &[u64]) -> Result<(), Error> {
        let data_len = self.len.saturating_sub(header.data_offset);
        let mut names = std::collections::BTreeSet::new();
        for (i, t) in header.tensors.iter().enumerate() {
            let field = format!("tensor[{i}] {:?}", t.name);
            let at = starts[i];
            if !names.insert(t.name.as_str()) {
                return Err(self.error(at, &field, "name appears twice"));
            }
            let elements = t
                .dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    self.error(
                        at,
                        &field,
                        format!("dims {:?} are zero or overflow", t.dims),
                    )
                })?;
            if t.dims[0] % t.ty.block_elements() != 0 {
                return Err(self.error(
                    at,
                    &field,
                    format!(
                        "row of {} is not a multiple of {}'s block of {}",
                        t.dims[0],
                        t.ty,
                        t.ty.block_elements()
                    ),
                ));
            }
            if t.offset % header.alignment != 0 {
                return Err(self.error(
                    at,
                    &field,
                    format!(
                        "data offset {} is not aligned to {}",
                        t.offset, header.alignment
                    ),
                ));
            }
            let bytes = (elements / t.ty.block_elements())
                .checked_mul(t.ty.block_bytes())
                .ok_or_else(|| self.error(at, &field, "size overflows"))?;
            match t.offset.checked_add(bytes) {
                Some(end) if end <= data_len => {}
                _ => {
                    return Err(self.error(
                        header.data_offset.saturating_add(t.offset),
                        &field,
                        format!(
                            "data [{}, +{bytes}) lies outside the file's {data_len} data bytes",
                            t.offset
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
