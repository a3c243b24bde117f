//! CPU kernels: dot products on encoded blocks, picked once at run time by
//! the processor's features, and the matrix product built on them.

pub mod avx2;
mod matmul;
mod operands;
pub mod pairs;
pub mod scalar;
pub mod x8;

pub use matmul::{matmul, matmuls};
pub use operands::{Encoded, Matrix};

use crate::model::ops;
use crate::tensor::GgmlType;
use std::sync::OnceLock;

/// A dot product of one encoded weight row with one encoded activation row.
pub type DotFn = fn(&[u8], &[u8]) -> f32;

/// A register-blocked tile of a batched product: up to [`Tile::rows`]
/// weight rows against up to [`Tile::tokens`] activation rows, writing
/// row `r` · token `t` to `out[r * stride + t]`. Each output equals the
/// type's [`DotFn`] of the same two rows bit for bit.
pub type TileFn = fn(w: &[&[u8]], a: &[&[u8]], out: &mut [f32], stride: usize);

/// A tile kernel and its shape.
#[derive(Clone, Copy)]
pub struct Tile {
    /// Weight rows per tile, at most [`TILE_MAX`].
    pub rows: usize,
    /// Activation rows (tokens) per tile, at most [`TILE_MAX`].
    pub tokens: usize,
    /// Whether the kernel takes f16 activations widened to f32.
    pub widen_f16: bool,
    /// The kernel.
    pub f: TileFn,
}

/// A packed kernel (see [`x8`]): one group of [`x8::ROWS`] q4_0, iq4_nl,
/// q2_K, q3_K, q4_K, q5_K or iq4_xs weight rows against up to
/// [`x8::TOKENS`] activation rows and,
/// for q8_0 activations, their block sums (`sums[t][b]`, the sum of
/// block `b`'s quants of token `t`), writing token `t`'s eight outputs to
/// `out[t]`.
pub type X8Fn = fn(group: &[u8], a: &[&[u8]], sums: &[&[i32]], out: &mut [[f32; x8::ROWS]]);

/// A tile on weight rows unpacked first, a task's rows once, so a batch's
/// tiles of tokens do not decode the same blocks again each: q5_K's values
/// one a byte (a q5_K matrix that is not packed). The tile's integers and
/// float steps are those of the q5_K tile on rows as stored, so its
/// outputs are the same bits.
#[derive(Clone, Copy)]
pub struct Unpacked {
    /// The tile on unpacked rows.
    pub tile: Tile,
    /// Unpacks one row into its unpacked bytes.
    pub unpack: fn(&[u8], &mut [u8]),
    /// Bytes of one unpacked block.
    pub block_bytes: usize,
}

/// The largest tile side.
pub const TILE_MAX: usize = 6;

/// The attention of the query heads that share one KV head over the cache
/// (see [`ops::attend_heads`]).
pub type AttendFn = fn(&[f32], usize, &[f32], &[f32], usize, usize, usize, f32, bool, &mut [f32]);

/// Rope of one token's heads (see [`ops::rope`]).
pub type RopeFn = fn(&mut [f32], usize, usize, f32, crate::model::RopeLayout, usize);

/// The dot products in use, one per weight type, and the element-wise
/// parts of a block compiled for the same processor.
#[derive(Clone, Copy)]
pub struct Kernels {
    /// Which implementation was picked: `avx2+vnni`, `avx2+avx-vnni`,
    /// `avx2` or `portable`, the SIMD ones followed by `, amd` or `, zen 5`
    /// where tuned for AMD processors.
    pub name: &'static str,
    /// [`ops::attend_heads`].
    pub attend: AttendFn,
    /// [`ops::swiglu`].
    pub swiglu: fn(&mut [f32], &[f32]),
    /// [`ops::rope`].
    pub rope: RopeFn,
    f32: DotFn,
    f16: DotFn,
    bf16: DotFn,
    q8_0: DotFn,
    q4_0: DotFn,
    q5_0: DotFn,
    q4_1: DotFn,
    q5_1: DotFn,
    q2k: DotFn,
    q3k: DotFn,
    q4k: DotFn,
    q5k: DotFn,
    q6k: DotFn,
    iq4nl: DotFn,
    iq4xs: DotFn,
    tile_q8_0: Option<Tile>,
    tile_q4_0: Option<Tile>,
    tile_f16: Option<Tile>,
    tile_q5_0: Option<Tile>,
    tile_q4_1: Option<Tile>,
    tile_q5_1: Option<Tile>,
    tile_q2k: Option<Tile>,
    tile_q3k: Option<Tile>,
    tile_q4k: Option<Tile>,
    tile_q5k: Option<Tile>,
    /// Batches of q5_K matrices that are not packed, on rows unpacked
    /// first (see [`Unpacked`]).
    unpacked_q5k: Option<Unpacked>,
    tile_q6k: Option<Tile>,
    decode_q8_0: Option<Tile>,
    decode_q4_0: Option<Tile>,
    decode_f16: Option<Tile>,
    decode_q5_0: Option<Tile>,
    decode_q4_1: Option<Tile>,
    decode_q5_1: Option<Tile>,
    decode_q2k: Option<Tile>,
    decode_q3k: Option<Tile>,
    decode_q4k: Option<Tile>,
    decode_q5k: Option<Tile>,
    decode_q6k: Option<Tile>,
    x8_q4_0: X8Fn,
    x8_q4k: X8Fn,
    x8_iq4nl: X8Fn,
    x8_iq4xs: X8Fn,
    x8_q5k: X8Fn,
    x8_q3k: X8Fn,
    x8_q2k: X8Fn,
    /// Packed q4_0, q2_K, q3_K, q4_K, q5_K, iq4_nl and iq4_xs two groups
    /// a call (`group` the two back to back, the second's outputs after
    /// the first's: `out[T + t]`),
    /// where these kernels have 512-bit ones.
    x16_q4_0: Option<X8Fn>,
    x16_q4k: Option<X8Fn>,
    x16_iq4nl: Option<X8Fn>,
    x16_iq4xs: Option<X8Fn>,
    x16_q5k: Option<X8Fn>,
    x16_q3k: Option<X8Fn>,
    x16_q2k: Option<X8Fn>,
    /// The tile for f16 rows packed in pairs ([`pairs`]; two rows, one
    /// slice a pair), where these kernels pack f16.
    pair_f16: Option<Tile>,
    /// Whether weights are packed for these kernels when a stage loads.
    pack: bool,
}

impl Kernels {
    /// The portable kernels.
    pub fn portable() -> Kernels {
        Kernels {
            name: "portable",
            attend: ops::attend_heads,
            swiglu: ops::swiglu,
            rope: ops::rope,
            f32: scalar::dot_f32,
            f16: scalar::dot_f16,
            bf16: scalar::dot_bf16,
            q8_0: scalar::dot_q8_0,
            q4_0: scalar::dot_q4_0,
            q5_0: scalar::dot_q5_0,
            q4_1: scalar::dot_q4_1,
            q5_1: scalar::dot_q5_1,
            q2k: scalar::dot_q2k,
            q3k: scalar::dot_q3k,
            q4k: scalar::dot_q4k,
            q5k: scalar::dot_q5k,
            q6k: scalar::dot_q6k,
            iq4nl: scalar::dot_iq4nl,
            iq4xs: scalar::dot_iq4xs,
            tile_q8_0: None,
            tile_q4_0: None,
            tile_f16: None,
            tile_q5_0: None,
            tile_q4_1: None,
            tile_q5_1: None,
            tile_q2k: None,
            tile_q3k: None,
            tile_q4k: None,
            tile_q5k: None,
            unpacked_q5k: None,
            tile_q6k: None,
            decode_q8_0: None,
            decode_q4_0: None,
            decode_f16: None,
            decode_q5_0: None,
            decode_q4_1: None,
            decode_q5_1: None,
            decode_q2k: None,
            decode_q3k: None,
            decode_q4k: None,
            decode_q5k: None,
            decode_q6k: None,
            x8_q4_0: x8::portable_q4_0,
            x8_q4k: x8::portable_q4k,
            x8_iq4nl: x8::portable_iq4nl,
            x8_iq4xs: x8::portable_iq4xs,
            x8_q5k: x8::portable_q5k,
            x8_q3k: x8::portable_q3k,
            x8_q2k: x8::portable_q2k,
            x16_q4_0: None,
            x16_q4k: None,
            x16_iq4nl: None,
            x16_iq4xs: None,
            x16_q5k: None,
            x16_q3k: None,
            x16_q2k: None,
            pair_f16: None,
            pack: false,
        }
    }

    /// The fastest kernels this processor runs.
    pub fn detect() -> Kernels {
        avx2::kernels_vnni()
            .or_else(avx2::kernels)
            .unwrap_or_else(Kernels::portable)
    }

    /// The kernels chosen for this process, detected once. `DROVER_KERNELS`
    /// narrows the choice: `portable` forces the fallback, `avx2` the AVX2
    /// set without its AVX-512 tiles (as on a processor without AVX-512,
    /// with AVX-VNNI's q8_0 tile where this one has it; the fallback where
    /// there is no AVX2). Another value is named on
    /// stderr and the detected set used.
    pub fn current() -> &'static Kernels {
        static CURRENT: OnceLock<Kernels> = OnceLock::new();
        CURRENT.get_or_init(|| match std::env::var("DROVER_KERNELS").as_deref() {
            Ok("portable") => Kernels::portable(),
            Ok("avx2") => avx2::kernels().unwrap_or_else(Kernels::portable),
            Ok("") | Err(std::env::VarError::NotPresent) => Kernels::detect(),
            Ok(other) => {
                eprintln!(
                    "drover-worker: DROVER_KERNELS={other:?} is neither \"portable\" nor \"avx2\"; using the detected kernels"
                );
                Kernels::detect()
            }
            Err(std::env::VarError::NotUnicode(other)) => {
                eprintln!(
                    "drover-worker: DROVER_KERNELS={other:?} is not UTF-8; using the detected kernels"
                );
                Kernels::detect()
            }
        })
    }

    /// The dot product for weights of `ty`.
    pub fn dot(&self, ty: GgmlType) -> DotFn {
        match ty {
            GgmlType::F32 => self.f32,
            GgmlType::F16 => self.f16,
            GgmlType::BF16 => self.bf16,
            GgmlType::Q8_0 => self.q8_0,
            GgmlType::Q4_0 => self.q4_0,
            GgmlType::Q5_0 => self.q5_0,
            GgmlType::Q4_1 => self.q4_1,
            GgmlType::Q5_1 => self.q5_1,
            GgmlType::Q2K => self.q2k,
            GgmlType::Q3K => self.q3k,
            GgmlType::Q4K => self.q4k,
            GgmlType::Q5K => self.q5k,
            GgmlType::Q6K => self.q6k,
            GgmlType::IQ4NL => self.iq4nl,
            GgmlType::IQ4XS => self.iq4xs,
            GgmlType::Q8K | GgmlType::Q8_1 => {
                panic!("{ty} is an activation type, not a weight type")
            }
        }
    }

    /// The kernel for a single token (decode) against weights of `ty`,
    /// where one beats both the tile and the one-row kernel; a tile of
    /// one token.
    pub fn decode(&self, ty: GgmlType) -> Option<Tile> {
        match ty {
            GgmlType::Q8_0 => self.decode_q8_0,
            GgmlType::Q4_0 => self.decode_q4_0,
            GgmlType::F16 => self.decode_f16,
            GgmlType::Q5_0 => self.decode_q5_0,
            GgmlType::Q4_1 => self.decode_q4_1,
            GgmlType::Q5_1 => self.decode_q5_1,
            GgmlType::Q2K => self.decode_q2k,
            GgmlType::Q3K => self.decode_q3k,
            GgmlType::Q4K => self.decode_q4k,
            GgmlType::Q5K => self.decode_q5k,
            GgmlType::Q6K => self.decode_q6k,
            _ => None,
        }
    }

    /// The kernel for packed weights of `ty`, where `ty` has a packed layout.
    pub fn x8(&self, ty: GgmlType) -> Option<X8Fn> {
        match ty {
            GgmlType::Q4_0 => Some(self.x8_q4_0),
            GgmlType::Q4K => Some(self.x8_q4k),
            GgmlType::IQ4NL => Some(self.x8_iq4nl),
            GgmlType::IQ4XS => Some(self.x8_iq4xs),
            GgmlType::Q5K => Some(self.x8_q5k),
            GgmlType::Q3K => Some(self.x8_q3k),
            GgmlType::Q2K => Some(self.x8_q2k),
            _ => None,
        }
    }

    /// The kernel for two groups of packed weights of `ty` a call (see
    /// `x16_q4k`), where these kernels have one.
    pub fn x16(&self, ty: GgmlType) -> Option<X8Fn> {
        match ty {
            GgmlType::Q4_0 => self.x16_q4_0,
            GgmlType::Q4K => self.x16_q4k,
            GgmlType::IQ4NL => self.x16_iq4nl,
            GgmlType::IQ4XS => self.x16_iq4xs,
            GgmlType::Q5K => self.x16_q5k,
            GgmlType::Q3K => self.x16_q3k,
            GgmlType::Q2K => self.x16_q2k,
            _ => None,
        }
    }

    /// The tile for weights of `ty` packed in pairs ([`pairs`]), where
    /// these kernels have one.
    pub fn pair(&self, ty: GgmlType) -> Option<Tile> {
        match ty {
            GgmlType::F16 => self.pair_f16,
            _ => None,
        }
    }

    /// Whether a stage running these kernels packs a matrix of `ty` with
    /// `rows` rows (see [`x8`] and [`pairs`]).
    pub fn packs(&self, ty: GgmlType, rows: usize) -> bool {
        self.pack
            && (x8::packable(ty, rows) || (pairs::packable(ty, rows) && self.pair(ty).is_some()))
    }

    /// Rows per packed group of a matrix of `ty` with rows of `cols`
    /// values, and the group's bytes.
    pub fn packed_group(ty: GgmlType, cols: usize) -> (usize, usize) {
        match ty {
            GgmlType::F16 => (pairs::ROWS, pairs::pair_bytes(cols)),
            _ => (x8::ROWS, x8::group_bytes(ty, cols)),
        }
    }

    /// Packs `data`, whole groups of rows of `cols` values of `ty`, into
    /// `out` (their packed size).
    pub fn pack_into(ty: GgmlType, cols: usize, data: &[u8], out: &mut [u8]) {
        match ty {
            GgmlType::F16 => pairs::pack_into(cols, data, out),
            _ => x8::pack_into(ty, cols, data, out),
        }
    }

    /// The tile on unpacked rows of `ty` (see [`Unpacked`]), where these
    /// kernels have one.
    pub fn unpacked(&self, ty: GgmlType) -> Option<Unpacked> {
        match ty {
            GgmlType::Q5K => self.unpacked_q5k,
            _ => None,
        }
    }

    /// The tile kernel for weights of `ty`, where there is one.
    pub fn tile(&self, ty: GgmlType) -> Option<Tile> {
        match ty {
            GgmlType::Q8_0 => self.tile_q8_0,
            GgmlType::Q4_0 => self.tile_q4_0,
            GgmlType::F16 => self.tile_f16,
            GgmlType::Q5_0 => self.tile_q5_0,
            GgmlType::Q4_1 => self.tile_q4_1,
            GgmlType::Q5_1 => self.tile_q5_1,
            GgmlType::Q2K => self.tile_q2k,
            GgmlType::Q3K => self.tile_q3k,
            GgmlType::Q4K => self.tile_q4k,
            GgmlType::Q5K => self.tile_q5k,
            GgmlType::Q6K => self.tile_q6k,
            _ => None,
        }
    }
}
