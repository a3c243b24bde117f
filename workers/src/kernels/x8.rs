//! q4_0, iq4_nl, q2_K, q3_K, q4_K, q5_K and iq4_xs weights packed eight
//! rows together, the layout the processor reads best for these types on
//! x86, as llama.cpp repacks q4_0, iq4_nl and q4_K there, and q2_K where
//! the processor has AVX-512 (q3_K, q5_K and iq4_xs it does not: packed
//! here for the same reads; all in the packed float order below, which
//! is not llama.cpp's one-row order).
//!
//! q8_0 is not packed: llama.cpp does not repack it on x86, and its
//! products there (llamafile's tinyBLAS, batch or one token) keep each
//! block's four-value groups in eight float lanes, which a row-major
//! kernel reproduces bit for bit (`avx2::imp::dot_q8_0` and the tiles)
//! and a packed one could only at eight times its float work.
//!
//! A packed matrix is a run of groups of eight rows. A group holds, for
//! each block in order, the eight rows' scales and then their quants in
//! 32-byte chunks: chunk `j` holds bytes `4j..4j + 4` of each row's
//! quants, row `r` at bytes `4r..4r + 4`.
//!
//! - q4_0 (32 columns a block): the eight f16 scales (16 bytes), then
//!   four chunks (16 bytes of packed nibbles a row: the low nibbles are
//!   columns `4j..4j + 4`, the high ones `16 + 4j..16 + 4j + 4`): the
//!   bytes of its eight rows unpacked, only moved. iq4_nl likewise (its
//!   nibbles index its table of values instead of being less 8).
//! - q4_K (256 columns): the eight `d` (16 bytes) and `dmin` (16), the
//!   six-bit sub-block scales decoded to bytes, `[sub-block][row]` (64),
//!   the mins likewise but in pairs of sub-blocks, `[pair][row][2]` (64),
//!   then for each pair of sub-blocks `p` eight chunks of the row's
//!   nibbles `32p..32p + 32` (low: sub-block `2p`, high: `2p + 1`):
//!   1184 bytes for eight rows' 1152.
//! - q5_K (256 columns): q4_K's, each pair of sub-blocks' eight chunks
//!   followed by their fifth bits, eight bytes a chunk, a byte a row
//!   (bit `i` value `4c + i` of sub-block `2p`, bit `4 + i` of `2p + 1`):
//!   1440 bytes for eight rows' 1408.
//! - q3_K (256 columns): the eight `d` (16 bytes), the sixteen six-bit
//!   sub-block scales less 32 as signed bytes, `[sub-block][row]` (128),
//!   then the two halves' quant chunks (chunk `8c + j`: bytes `4j..4j +
//!   4` of half `c`'s 32 bytes of two-bit quants; each byte value `i`'s
//!   bits 0-1, `32 + i`'s 2-3, `64 + i`'s 4-5, `96 + i`'s 6-7 of the
//!   half), then eight chunks of the high-bit mask (bytes `4j..4j + 4`;
//!   bit `4c + p` of byte `i` value `128c + 32p + i`'s): 912 bytes for
//!   eight rows' 880.
//! - q2_K (256 columns): the eight `d` (16 bytes) and `dmin` (16), the
//!   sixteen sub-blocks' scale bytes as stored (scale the low nibble, min
//!   the high one), `[sub-block][row]` (128), then the two halves' quant
//!   chunks as q3_K's: 672 bytes, as many as eight rows'.
//! - iq4_xs (256 columns): the eight `d` (16 bytes), the sub-block
//!   scales decoded to signed bytes, `[sub-block][row]` (64), then each
//!   sub-block's four chunks, as a q4_0 block's (its 16 bytes of
//!   nibbles: low values `4j..4j + 4`, high `16 + 4j..`): 1104 bytes for
//!   eight rows' 1088.
//!
//! So one 32-byte load holds four quants of each of eight rows, and one
//! integer multiply-add against four activation bytes broadcast sums them
//! into eight lanes, one a row: no horizontal sum anywhere. The float
//! steps follow, per block, from zero, with `isum` the block's exact
//! integer dot product (q4_0, iq4_nl) or its sub-block sums times their
//! scales (q2_K, q3_K, q4_K, q5_K, iq4_xs; for q2_K, q4_K and q5_K `msum`
//! their mins times the activation's sub-block sums): `acc = fma(dx * dy,
//! isum as f32, acc)`, and for q2_K, q4_K and q5_K also
//! `macc = fma(dmin * dy, msum as f32, macc)`, the result `acc - macc`
//! ([`dot`] is that order, one row at a time). Every kernel on packed
//! weights keeps that order, so a batch equals one token at a time bit
//! for bit.

mod reference;

pub use reference::{
    dot, portable_iq4nl, portable_iq4xs, portable_q2k, portable_q3k, portable_q4_0, portable_q4k,
    portable_q5k,
};

use crate::tensor::GgmlType;
use crate::tensor::blocks::{q3k_scales, q4k_scale_min};
use crate::tensor::iq4::iq4xs_scale;
use rayon::prelude::*;

/// Rows per group.
pub const ROWS: usize = 8;

/// The most tokens one [`super::X8Fn`] call takes.
pub const TOKENS: usize = 4;

/// Bytes of one encoded block of one row of `ty`, and its columns.
fn block_shape(ty: GgmlType) -> (usize, usize) {
    match ty {
        GgmlType::Q4_0 | GgmlType::IQ4NL => (18, 32),
        GgmlType::Q4K => (144, 256),
        GgmlType::Q5K => (176, 256),
        GgmlType::Q3K => (110, 256),
        GgmlType::Q2K => (84, 256),
        GgmlType::IQ4XS => (136, 256),
        _ => panic!("{ty} is not packed eight rows together"),
    }
}

/// Bytes of one packed block of eight rows.
fn group_block_bytes(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4K => Q4K_GROUP_BLOCK,
        GgmlType::Q5K => Q5K_GROUP_BLOCK,
        GgmlType::Q3K => Q3K_GROUP_BLOCK,
        GgmlType::Q2K => Q2K_GROUP_BLOCK,
        GgmlType::IQ4XS => IQ4XS_GROUP_BLOCK,
        _ => ROWS * block_shape(ty).0,
    }
}

/// Bytes of a q4_K block of eight rows packed.
pub const Q4K_GROUP_BLOCK: usize = 160 + 8 * 128;

/// Bytes of a q5_K block of eight rows packed: q4_K's, each pair of
/// sub-blocks' chunks followed by their fifth bits (64 bytes).
pub const Q5K_GROUP_BLOCK: usize = 160 + 4 * (256 + 64);

/// Bytes of a q3_K block of eight rows packed: the eight `d`, the 16
/// sub-block scales of each row as signed bytes (`[sub-block][row]`),
/// each half's eight chunks of two-bit quants, then the eight chunks of
/// high bits the two halves share.
pub const Q3K_GROUP_BLOCK: usize = 16 + 128 + 8 * 64 + 8 * 32;

/// Bytes of a q2_K block of eight rows packed: the eight `d` and `dmin`,
/// the 16 sub-blocks' scale bytes of each row (`[sub-block][row]`), each
/// half's eight chunks of two-bit quants.
pub const Q2K_GROUP_BLOCK: usize = 32 + 128 + 8 * 64;

/// Bytes of an iq4_xs block of eight rows packed.
pub const IQ4XS_GROUP_BLOCK: usize = 80 + 8 * 128;

/// Whether a matrix of `ty` with `rows` rows can be packed.
pub fn packable(ty: GgmlType, rows: usize) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::IQ4NL
            | GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::IQ4XS
    ) && rows.is_multiple_of(ROWS)
        && rows > 0
}

/// Bytes of one packed group of eight rows of `cols` values of `ty`.
pub fn group_bytes(ty: GgmlType, cols: usize) -> usize {
    cols / block_shape(ty).1 * group_block_bytes(ty)
}

/// `data`, `rows` rows of `cols` values of `ty` back to back, packed.
pub fn pack(ty: GgmlType, rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    assert!(packable(ty, rows));
    let mut out = vec![0u8; rows / ROWS * group_bytes(ty, cols)];
    pack_into(ty, cols, data, &mut out);
    out
}

/// Packs `data`, whole groups of eight rows of `cols` values of `ty`,
/// into `out` (their packed size), the groups on the thread pool.
pub fn pack_into(ty: GgmlType, cols: usize, data: &[u8], out: &mut [u8]) {
    let (bb, block_cols) = block_shape(ty);
    assert!(cols.is_multiple_of(block_cols));
    let row_bytes = cols / block_cols * bb;
    let groups = data.len() / (ROWS * row_bytes);
    assert!(data.len() == groups * ROWS * row_bytes);
    assert!(out.len() == groups * group_bytes(ty, cols));
    out.par_chunks_exact_mut(group_bytes(ty, cols))
        .zip(data.par_chunks_exact(ROWS * row_bytes))
        .for_each(|(out, group)| {
            let blocks = out.chunks_exact_mut(group_block_bytes(ty));
            for (b, out) in blocks.enumerate() {
                let rows: [&[u8]; ROWS] = std::array::from_fn(|r| {
                    &group[r * row_bytes + b * bb..r * row_bytes + (b + 1) * bb]
                });
                pack_block(ty, rows, out);
            }
        });
}

/// One block of eight plain rows into `out`.
fn pack_block(ty: GgmlType, rows: [&[u8]; ROWS], out: &mut [u8]) {
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    let (quants_at, quants) = match ty {
        GgmlType::Q4K | GgmlType::Q5K => {
            rows.iter().for_each(|x| put(&x[..2]));
            rows.iter().for_each(|x| put(&x[2..4]));
            let parts = rows.map(|x| Q4kScales::of(&x[4..16]));
            for j in 0..8 {
                parts.iter().for_each(|p| put(&[p.scales[j]]));
            }
            for pair in 0..4 {
                parts
                    .iter()
                    .for_each(|p| put(&[p.mins[2 * pair], p.mins[2 * pair + 1]]));
            }
            if ty == GgmlType::Q5K {
                for p in 0..4 {
                    for c in 0..8 {
                        rows.iter()
                            .for_each(|x| put(&x[48 + 32 * p + 4 * c..][..4]));
                    }
                    for c in 0..8 {
                        rows.iter().for_each(|x| put(&[q5k_fifth_bits(x, p, c)]));
                    }
                }
                return;
            }
            (16, 128)
        }
        GgmlType::Q3K => {
            rows.iter().for_each(|x| put(&x[108..110]));
            let scales = rows.map(q3k_scales);
            for j in 0..16 {
                scales.iter().for_each(|s| put(&[s[j] as i8 as u8]));
            }
            for j in 0..16 {
                rows.iter().for_each(|x| put(&x[32 + 4 * j..][..4]));
            }
            for j in 0..8 {
                rows.iter().for_each(|x| put(&x[4 * j..][..4]));
            }
            return;
        }
        GgmlType::Q2K => {
            rows.iter().for_each(|x| put(&x[80..82]));
            rows.iter().for_each(|x| put(&x[82..84]));
            for j in 0..16 {
                rows.iter().for_each(|x| put(&x[j..j + 1]));
            }
            (16, 64)
        }
        GgmlType::IQ4XS => {
            rows.iter().for_each(|x| put(&x[..2]));
            for j in 0..8 {
                rows.iter()
                    .for_each(|x| put(&[iq4xs_scale(x, j) as i8 as u8]));
            }
            (8, 128)
        }
        _ => {
            rows.iter().for_each(|x| put(&x[..2]));
            (2, block_shape(ty).0 - 2)
        }
    };
    for j in 0..quants / 4 {
        for x in rows {
            put(&x[quants_at + 4 * j..quants_at + 4 * j + 4]);
        }
    }
}

/// The fifth bits of a q5_K block's values `4c..4c + 4` of sub-blocks
/// `2p` (bits 0..4) and `2p + 1` (bits 4..8), as a packed chunk's byte
/// for the row holds them.
fn q5k_fifth_bits(x: &[u8], p: usize, c: usize) -> u8 {
    (0..4).fold(0u8, |bits, i| {
        let qh = x[16 + 4 * c + i];
        bits | ((qh >> (2 * p)) & 1) << i | ((qh >> (2 * p + 1)) & 1) << (4 + i)
    })
}

/// A q4_K block's eight six-bit sub-block scales and mins, decoded.
struct Q4kScales {
    scales: [u8; 8],
    mins: [u8; 8],
}

impl Q4kScales {
    fn of(packed: &[u8]) -> Q4kScales {
        let pairs: [(u8, u8); 8] = std::array::from_fn(|j| q4k_scale_min(j, packed));
        Q4kScales {
            scales: pairs.map(|p| p.0),
            mins: pairs.map(|p| p.1),
        }
    }
}

/// The sum of each q8_0 block's quants, block after block (what the packed
/// kernels subtract the weights' unsigned offset with).
pub fn block_sums(q8_0: &[u8]) -> Vec<i32> {
    q8_0.chunks_exact(34)
        .map(|b| b[2..].iter().map(|&q| q as i8 as i32).sum())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_moves_every_byte_once() {
        // Distinct bytes (a row of 2 q4_0 blocks = 36 bytes; 8 rows).
        let data: Vec<u8> = (0..8 * 36).map(|i| (i % 251) as u8).collect();
        let packed = pack(GgmlType::Q4_0, 8, 64, &data);
        let mut a = packed.clone();
        let mut b = data.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        for blk in 0..2 {
            for r in 0..8 {
                let plain = &data[r * 36 + blk * 18..r * 36 + blk * 18 + 18];
                assert_eq!(reference::unpacked_q4_0(&packed, blk, r), plain);
            }
        }
    }
}
