//! q4_0, iq4_nl, q4_K and iq4_xs weights packed eight rows together, the
//! layout the processor reads best for these types on x86, as llama.cpp
//! repacks q4_0, iq4_nl and q4_K there (iq4_xs it does not: packed here
//! for the same reads, in the packed float order, not its one-row one).
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
//! scales (q4_K, iq4_xs; for q4_K `msum` its mins times the activation's
//! sub-block sums): `acc = fma(dx * dy, isum as f32, acc)`, and for q4_K also
//! `macc = fma(dmin * dy, msum as f32, macc)`, the result `acc - macc`
//! ([`dot`] is that order, one row at a time). Every kernel on packed
//! weights keeps that order, so a batch equals one token at a time bit
//! for bit.

use crate::tensor::GgmlType;
use crate::tensor::blocks::{f16_at, q4k_scale_min};
use crate::tensor::iq4::{IQ4_VALUES, iq4_value, iq4xs_scale};
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
        GgmlType::IQ4XS => (136, 256),
        _ => panic!("{ty} is not packed eight rows together"),
    }
}

/// Bytes of one packed block of eight rows.
fn group_block_bytes(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4K => Q4K_GROUP_BLOCK,
        GgmlType::IQ4XS => IQ4XS_GROUP_BLOCK,
        _ => ROWS * block_shape(ty).0,
    }
}

/// Bytes of a q4_K block of eight rows packed.
pub const Q4K_GROUP_BLOCK: usize = 160 + 8 * 128;

/// Bytes of an iq4_xs block of eight rows packed.
pub const IQ4XS_GROUP_BLOCK: usize = 80 + 8 * 128;

/// Whether a matrix of `ty` with `rows` rows can be packed.
pub fn packable(ty: GgmlType, rows: usize) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::IQ4NL | GgmlType::Q4K | GgmlType::IQ4XS
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
        GgmlType::Q4K => {
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
            (16, 128)
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

/// The integer dot product of one q4_0 (or iq4_nl) block of weights
/// (`x`, plain layout) and one q8_0 activation block (`y`).
fn block_isum(ty: GgmlType, x: &[u8], y: &[u8]) -> i32 {
    let value = |n: u8| match ty {
        GgmlType::IQ4NL => IQ4_VALUES[n as usize] as i32,
        _ => n as i32 - 8,
    };
    let a = |i: usize| y[2 + i] as i8 as i32;
    (0..16)
        .map(|i| {
            let q = x[2 + i];
            value(q & 0xF) * a(i) + value(q >> 4) * a(i + 16)
        })
        .sum()
}

/// A q4_K block's integer sums against a q8_K block `y`: its sub-block
/// sums times their scales, and its mins times the activation's sub-block
/// sums.
fn q4k_isums(parts: &Q4kScales, qs: impl Fn(usize) -> u8, y: &[u8]) -> (i32, i32) {
    let a = |i: usize| y[4 + i] as i8 as i32;
    let bsum = |i: usize| i16::from_le_bytes([y[260 + 2 * i], y[261 + 2 * i]]) as i32;
    let (mut total, mut msum) = (0i32, 0i32);
    for j in 0..8 {
        let shift = 4 * (j % 2);
        let sub: i32 = (0..32)
            .map(|l| ((qs(32 * (j / 2) + l) >> shift) & 0xF) as i32 * a(32 * j + l))
            .sum();
        total += parts.scales[j] as i32 * sub;
        msum += parts.mins[j] as i32 * (bsum(2 * j) + bsum(2 * j + 1));
    }
    (total, msum)
}

/// An iq4_xs block's integer sum against a q8_K block `y`: each
/// sub-block's sum times its scale (`scale(j)`), the sub-block's 16 bytes
/// of nibbles `qs(j, i)`.
fn iq4xs_isum(scale: impl Fn(usize) -> i32, qs: impl Fn(usize, usize) -> u8, y: &[u8]) -> i32 {
    (0..8)
        .map(|j| {
            let q: [u8; 16] = std::array::from_fn(|i| qs(j, i));
            let sub: i32 = (0..32)
                .map(|i| iq4_value(&q, i) * y[4 + 32 * j + i] as i8 as i32)
                .sum();
            scale(j) * sub
        })
        .sum()
}

/// The float steps of one block: `acc` and `macc` as the module says.
fn step(acc: &mut [f32; 2], d: f32, dmin: f32, dy: f32, isum: i32, msum: i32) {
    acc[0] = (d * dy).mul_add(isum as f32, acc[0]);
    acc[1] = (dmin * dy).mul_add(msum as f32, acc[1]);
}

/// One row of `ty` (plain layout) against one activation row (q8_0, or
/// q8_K for q4_K), in the packed kernels' order: the reference they are
/// tested against.
pub fn dot(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    let (bb, _) = block_shape(ty);
    let ab = ty.activation_type().row_bytes(block_shape(ty).1 as u64) as usize;
    let mut acc = [0f32; 2];
    for (x, y) in w.chunks_exact(bb).zip(a.chunks_exact(ab)) {
        match ty {
            GgmlType::Q4K => {
                let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                let (isum, msum) = q4k_isums(&Q4kScales::of(&x[4..16]), |i| x[16 + i], y);
                step(&mut acc, f16_at(x, 0), f16_at(x, 2), dy, isum, msum);
            }
            GgmlType::IQ4XS => {
                let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                let isum = iq4xs_isum(|j| iq4xs_scale(x, j), |j, i| x[8 + 16 * j + i], y);
                step(&mut acc, f16_at(x, 0), 0.0, dy, isum, 0);
            }
            _ => step(
                &mut acc,
                f16_at(x, 0),
                0.0,
                f16_at(y, 0),
                block_isum(ty, x, y),
                0,
            ),
        }
    }
    acc[0] - acc[1]
}

/// Row `r` (0..8) of block `b` of a packed group of q4_0 (or iq4_nl),
/// in the plain layout.
fn unpacked_q4_0(group: &[u8], b: usize, r: usize) -> Vec<u8> {
    let bb = block_shape(GgmlType::Q4_0).0;
    let block = &group[b * ROWS * bb..(b + 1) * ROWS * bb];
    let mut out = block[2 * r..2 * r + 2].to_vec();
    for j in 0..(bb - 2) / 4 {
        let at = 2 * ROWS + 32 * j + 4 * r;
        out.extend_from_slice(&block[at..at + 4]);
    }
    out
}

/// Row `r`'s part of a packed q4_K block: `d`, `dmin`, its scales and
/// mins, and its quant byte `i` (0..128).
fn q4k_row(block: &[u8], r: usize) -> (f32, f32, Q4kScales, impl Fn(usize) -> u8 + '_) {
    let parts = Q4kScales {
        scales: std::array::from_fn(|j| block[32 + 8 * j + r]),
        mins: std::array::from_fn(|j| block[96 + 16 * (j / 2) + 2 * r + j % 2]),
    };
    let qs = move |i: usize| block[160 + 32 * (i / 4) + 4 * r + i % 4];
    (f16_at(block, 2 * r), f16_at(block, 16 + 2 * r), parts, qs)
}

/// The portable [`super::X8Fn`] of `ty`: [`dot`]'s order on a packed group.
fn portable(ty: GgmlType, group: &[u8], a: &[&[u8]], out: &mut [[f32; ROWS]]) {
    let gb = group_block_bytes(ty);
    let ab = ty.activation_type().row_bytes(block_shape(ty).1 as u64) as usize;
    for (y, o) in a.iter().zip(out.iter_mut()) {
        for (r, o) in o.iter_mut().enumerate() {
            let mut acc = [0f32; 2];
            for (b, block) in group.chunks_exact(gb).enumerate() {
                let y = &y[ab * b..ab * (b + 1)];
                if ty == GgmlType::Q4K {
                    let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    let (d, dmin, parts, qs) = q4k_row(block, r);
                    let (isum, msum) = q4k_isums(&parts, qs, y);
                    step(&mut acc, d, dmin, dy, isum, msum);
                } else if ty == GgmlType::IQ4XS {
                    let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    let scale = |j: usize| block[16 + 8 * j + r] as i8 as i32;
                    let qs =
                        |j: usize, i: usize| block[80 + 128 * j + 32 * (i / 4) + 4 * r + i % 4];
                    let isum = iq4xs_isum(scale, qs, y);
                    step(&mut acc, f16_at(block, 2 * r), 0.0, dy, isum, 0);
                } else {
                    let x = unpacked_q4_0(group, b, r);
                    step(
                        &mut acc,
                        f16_at(&x, 0),
                        0.0,
                        f16_at(y, 0),
                        block_isum(ty, &x, y),
                        0,
                    );
                }
            }
            *o = acc[0] - acc[1];
        }
    }
}

/// The portable packed q4_0 kernel.
pub fn portable_q4_0(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::Q4_0, group, a, out)
}

/// The portable packed iq4_nl kernel.
pub fn portable_iq4nl(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::IQ4NL, group, a, out)
}

/// The portable packed iq4_xs kernel.
pub fn portable_iq4xs(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::IQ4XS, group, a, out)
}

/// The portable packed q4_K kernel.
pub fn portable_q4k(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::Q4K, group, a, out)
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
                assert_eq!(unpacked_q4_0(&packed, blk, r), plain);
            }
        }
    }
}
