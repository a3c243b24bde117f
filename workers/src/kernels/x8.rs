//! q8_0 and q4_0 weights packed eight rows together, the layout the
//! processor reads best for these types on x86 (llama.cpp repacks q4_0
//! for the same reason).
//!
//! A packed matrix is a run of groups of eight rows. A group holds, for
//! each block of 32 columns in order, the eight rows' f16 scales (16
//! bytes) and then their quants in 32-byte chunks: chunk `j` holds bytes
//! `4j..4j + 4` of each row's quants, row `r` at bytes `4r..4r + 4`. q8_0
//! has eight chunks (32 quants a row), q4_0 four (16 bytes of packed
//! nibbles a row: the low nibbles are columns `4j..4j + 4`, the high ones
//! `16 + 4j..16 + 4j + 4`). A group takes the bytes of its eight rows
//! unpacked: the layout only moves them.
//!
//! So one 32-byte load holds four quants of each of eight rows, and one
//! integer multiply-add against four activation bytes broadcast sums them
//! into eight lanes, one a row: no horizontal sum anywhere. The float
//! steps follow: each output is, block after block,
//! `acc = fma(dx * dy, isum as f32, acc)` from `acc = 0`, where `isum` is
//! the block's exact integer dot product ([`dot`] is that order, one row
//! at a time). Every kernel on packed weights keeps that order, so a
//! batch equals one token at a time bit for bit.

use crate::tensor::GgmlType;
use crate::tensor::blocks::f16_at;
use rayon::prelude::*;

/// Rows per group.
pub const ROWS: usize = 8;

/// The most tokens one [`X8Fn`] call takes.
pub const TOKENS: usize = 4;

/// Bytes of one encoded block (32 columns) of one row of `ty`.
fn block_bytes(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q8_0 => 34,
        GgmlType::Q4_0 => 18,
        _ => panic!("{ty} is not packed eight rows together"),
    }
}

/// Whether a matrix of `ty` with `rows` rows can be packed.
pub fn packable(ty: GgmlType, rows: usize) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) && rows.is_multiple_of(ROWS) && rows > 0
}

/// `data`, `rows` rows of `cols` values of `ty` back to back, packed.
pub fn pack(ty: GgmlType, rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    assert!(packable(ty, rows));
    let mut out = vec![0u8; data.len()];
    pack_into(ty, cols, data, &mut out);
    out
}

/// Packs `data`, whole groups of eight rows of `cols` values of `ty`,
/// into `out` (as long), the groups on the thread pool.
pub fn pack_into(ty: GgmlType, cols: usize, data: &[u8], out: &mut [u8]) {
    assert!(cols.is_multiple_of(32));
    let bb = block_bytes(ty);
    let row_bytes = cols / 32 * bb;
    assert!(data.len().is_multiple_of(ROWS * row_bytes) && out.len() == data.len());
    out.par_chunks_exact_mut(ROWS * row_bytes)
        .zip(data.par_chunks_exact(ROWS * row_bytes))
        .for_each(|(out, group)| pack_group(bb, row_bytes, group, out));
}

/// One group of eight plain rows of `row_bytes` into `out`.
fn pack_group(bb: usize, row_bytes: usize, group: &[u8], out: &mut [u8]) {
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    for b in 0..row_bytes / bb {
        let row = |r: usize| &group[r * row_bytes + b * bb..r * row_bytes + (b + 1) * bb];
        for r in 0..ROWS {
            put(&row(r)[..2]);
        }
        for j in 0..(bb - 2) / 4 {
            for r in 0..ROWS {
                put(&row(r)[2 + 4 * j..2 + 4 * j + 4]);
            }
        }
    }
}

/// The integer dot product of one block of weights (`x`, plain layout)
/// and one q8_0 activation block (`y`).
fn block_isum(ty: GgmlType, x: &[u8], y: &[u8]) -> i32 {
    let a = |i: usize| y[2 + i] as i8 as i32;
    match ty {
        GgmlType::Q8_0 => (0..32).map(|i| x[2 + i] as i8 as i32 * a(i)).sum(),
        _ => (0..16)
            .map(|i| {
                let q = x[2 + i];
                ((q & 0xF) as i32 - 8) * a(i) + ((q >> 4) as i32 - 8) * a(i + 16)
            })
            .sum(),
    }
}

/// One row of `ty` (plain layout) against one q8_0 activation row, in the
/// packed kernels' order: the reference they are tested against.
pub fn dot(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    let bb = block_bytes(ty);
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(bb).zip(a.chunks_exact(34)) {
        let scale = f16_at(x, 0) * f16_at(y, 0);
        acc = scale.mul_add(block_isum(ty, x, y) as f32, acc);
    }
    acc
}

/// Row `r` (0..8) of block `b` of a packed group, in the plain layout.
fn unpacked_block(ty: GgmlType, group: &[u8], b: usize, r: usize) -> Vec<u8> {
    let bb = block_bytes(ty);
    let block = &group[b * ROWS * bb..(b + 1) * ROWS * bb];
    let mut out = block[2 * r..2 * r + 2].to_vec();
    for j in 0..(bb - 2) / 4 {
        let at = 2 * ROWS + 32 * j + 4 * r;
        out.extend_from_slice(&block[at..at + 4]);
    }
    out
}

/// The portable [`X8Fn`] of `ty`: [`dot`]'s order on a packed group.
fn portable<const Q4: bool>(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    let ty = if Q4 { GgmlType::Q4_0 } else { GgmlType::Q8_0 };
    let blocks = group.len() / (ROWS * block_bytes(ty));
    for (y, o) in a.iter().zip(out.iter_mut()) {
        for (r, o) in o.iter_mut().enumerate() {
            let mut acc = 0f32;
            for b in 0..blocks {
                let x = unpacked_block(ty, group, b, r);
                let y = &y[34 * b..34 * b + 34];
                let scale = f16_at(&x, 0) * f16_at(y, 0);
                acc = scale.mul_add(block_isum(ty, &x, y) as f32, acc);
            }
            *o = acc;
        }
    }
}

/// The portable packed q8_0 kernel.
pub fn portable_q8_0(group: &[u8], a: &[&[u8]], sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable::<false>(group, a, sums, out)
}

/// The portable packed q4_0 kernel.
pub fn portable_q4_0(group: &[u8], a: &[&[u8]], sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable::<true>(group, a, sums, out)
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
                assert_eq!(unpacked_block(GgmlType::Q4_0, &packed, blk, r), plain);
            }
        }
    }
}
