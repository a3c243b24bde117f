//! GGUF: the file format of llama.cpp's models, versions 1 to 3.
//!
//! [`Header`] is everything before the tensor data: the metadata key/values
//! and the tensor table. It is read with bounded allocations from any reader
//! ([`read::read_header`]), so a stage can learn where its tensors lie
//! without touching the rest of the file. [`crate::gguf::file::ModelFile`]
//! then memory-maps only the byte ranges a stage asks for.

pub mod file;
pub mod read;
pub mod slice;
pub mod write;

use crate::tensor::GgmlType;
use std::fmt;

/// The file magic, "GGUF" read as a little-endian u32.
pub const MAGIC: u32 = 0x4655_4747;
/// The data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// GGUF type 0.
    U8(u8),
    /// GGUF type 1.
    I8(i8),
    /// GGUF type 2.
    U16(u16),
    /// GGUF type 3.
    I16(i16),
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 5.
    I32(i32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 7.
    Bool(bool),
    /// GGUF type 8.
    String(String),
    /// GGUF type 9: values of one type.
    Array(Vec<Value>),
    /// GGUF type 10.
    U64(u64),
    /// GGUF type 11.
    I64(i64),
    /// GGUF type 12.
    F64(f64),
}

impl Value {
    /// The GGUF type code of this value.
    pub fn type_code(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(_) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    /// An integer value of any width, as u64 (negative values are `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float or integer value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// A boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) if s.len() > 60 => {
                write!(f, "{:?}...", &s[..s.floor_char_boundary(60)])
            }
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(items) => {
                write!(f, "[")?;
                for (i, v) in items.iter().take(4).enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                if items.len() > 4 {
                    write!(f, ", ... {} items", items.len())?;
                }
                write!(f, "]")
            }
            Value::Bool(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            other => write!(
                f,
                "{}",
                other
                    .as_u64()
                    .map_or_else(|| format!("{other:?}"), |v| v.to_string())
            ),
        }
    }
}

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost (contiguous) first, as ggml orders them.
    pub dims: Vec<u64>,
    /// The element type.
    pub ty: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Size in bytes of the tensor's data.
    pub fn bytes(&self) -> u64 {
        self.ty.row_bytes(self.elements())
    }
}

/// The parsed header of a GGUF file.
#[derive(Clone, Debug)]
pub struct Header {
    /// GGUF version (1, 2 or 3).
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    /// The tensor table in file order.
    pub tensors: Vec<TensorInfo>,
    /// `general.alignment`, or 32.
    pub alignment: u64,
    /// Absolute offset of the data section in the file.
    pub data_offset: u64,
}

impl Header {
    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A tensor's entry by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The model architecture (`general.architecture`).
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(Value::as_str)
    }
}

/// Why a GGUF file could not be read. Every variant names where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on the file itself.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The bytes are not a valid GGUF file.
    #[error("{path}: offset {offset}: {field}: {reason}")]
    Format {
        /// The file (or `<memory>`).
        path: String,
        /// The byte offset where the bad field starts.
        offset: u64,
        /// Which field, e.g. `tensor[3] "blk.0.attn_q.weight" dims`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}
