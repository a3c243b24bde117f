//! Tensor element types as ggml numbers and lays them out.
//!
//! Block layouts follow ggml's (`ggml-common.h`): a quantized row is a run of
//! fixed-size blocks, each holding its own scale(s). Dot products run on the
//! blocks directly ([`crate::kernels`]); nothing dequantizes a whole matrix.

pub mod blocks;
pub mod iq4;
pub mod quantize;

use std::fmt;

/// The tensor types drover-worker computes with, by their ggml type code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit float (0).
    F32,
    /// IEEE half (1).
    F16,
    /// 4-bit, 32 per block, one f16 scale (2).
    Q4_0,
    /// 4-bit, 32 per block, an f16 scale and an f16 min (3).
    Q4_1,
    /// 5-bit, 32 per block, one f16 scale, the fifth bits apart (6).
    Q5_0,
    /// 5-bit, 32 per block, an f16 scale and an f16 min, the fifth bits
    /// apart (7).
    Q5_1,
    /// 8-bit, 32 per block, one f16 scale (8).
    Q8_0,
    /// 8-bit, 32 per block, an f16 scale and the f16 of the scale times
    /// the block's sum of quants: the activation side of q4_1 and q5_1
    /// dot products (9).
    Q8_1,
    /// 2-bit k-quant, 256 per block, 4-bit scales and mins for 16-value
    /// sub-blocks (10).
    Q2K,
    /// 3-bit k-quant, 256 per block, 6-bit signed scales for 16-value
    /// sub-blocks (11).
    Q3K,
    /// 4-bit k-quant, 256 per block, 6-bit sub-block scales and mins (12).
    Q4K,
    /// 5-bit k-quant, 256 per block, 6-bit sub-block scales and mins (13).
    Q5K,
    /// 6-bit k-quant, 256 per block, 8-bit sub-block scales (14).
    Q6K,
    /// 8-bit k-quant, the activation side of k-quant dot products (15).
    Q8K,
    /// 4-bit indices into a fixed table of 16 non-uniform values, 32 per
    /// block, one f16 scale (20).
    IQ4NL,
    /// iq4_nl's values in 256-value blocks: an f16 scale and 6-bit signed
    /// scales for 32-value sub-blocks (23).
    IQ4XS,
    /// bfloat16 (30).
    BF16,
}

impl GgmlType {
    /// Every supported type.
    pub const ALL: [GgmlType; 17] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
        GgmlType::IQ4NL,
        GgmlType::IQ4XS,
        GgmlType::BF16,
    ];

    /// The type of a ggml type code, or `None` for one drover cannot compute.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The ggml type code.
    pub fn code(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::Q8K => 15,
            GgmlType::IQ4NL => 20,
            GgmlType::IQ4XS => 23,
            GgmlType::BF16 => 30,
        }
    }

    /// Elements per block.
    pub fn block_elements(self) -> u64 {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1
            | GgmlType::IQ4NL => 32,
            GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Q8K
            | GgmlType::IQ4XS => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2K => 84,
            GgmlType::Q3K => 110,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
            GgmlType::Q8K => 292,
            GgmlType::IQ4NL => 18,
            GgmlType::IQ4XS => 136,
        }
    }

    /// Bytes of `elements` values (a whole number of blocks is assumed;
    /// callers check divisibility first).
    pub fn row_bytes(self, elements: u64) -> u64 {
        elements / self.block_elements() * self.block_bytes()
    }

    /// The lower-case name llama.cpp prints (`q4_K`, `f16`).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q8_1 => "q8_1",
            GgmlType::Q2K => "q2_K",
            GgmlType::Q3K => "q3_K",
            GgmlType::Q4K => "q4_K",
            GgmlType::Q5K => "q5_K",
            GgmlType::Q6K => "q6_K",
            GgmlType::Q8K => "q8_K",
            GgmlType::IQ4NL => "iq4_nl",
            GgmlType::IQ4XS => "iq4_xs",
            GgmlType::BF16 => "bf16",
        }
    }

    /// A type from its name, case-insensitive (`q4_k` and `Q4_K` both).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        GgmlType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Whether this type only encodes activations (q8_1, q8_K): ggml has
    /// no dot product with weights of it, nor has drover.
    pub fn activation_only(self) -> bool {
        matches!(self, GgmlType::Q8_1 | GgmlType::Q8K)
    }

    /// The type activations are converted to before a dot product with a
    /// weight row of this type, as ggml's `vec_dot_type` says.
    pub fn activation_type(self) -> GgmlType {
        match self {
            GgmlType::F32 => GgmlType::F32,
            GgmlType::F16 => GgmlType::F16,
            GgmlType::BF16 => GgmlType::BF16,
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4NL => GgmlType::Q8_0,
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => GgmlType::Q8_1,
            // Every 256-value type (the k-quants, iq4_xs) takes q8_K.
            _ => {
                debug_assert_eq!(self.block_elements(), 256, "{self}");
                GgmlType::Q8K
            }
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Name of a ggml type code drover does not compute, for error messages.
pub fn unsupported_type_name(code: u32) -> &'static str {
    match code {
        16..=19 | 21 | 22 | 29 => "an i-quant",
        24..=28 => "an integer type",
        _ => "unknown",
    }
}
