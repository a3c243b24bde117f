//! The reference of the packed layout (`super`): one row at a time in
//! the packed kernels' order ([`dot`], on rows as stored), and the
//! portable packed kernels, which read that order off a packed group.

use super::{Q4kScales, ROWS, block_shape, group_block_bytes};
use crate::tensor::GgmlType;
use crate::tensor::blocks::{f16_at, q2k_value, q3k_scales, q3k_value, q5k_value};
use crate::tensor::iq4::{IQ4_VALUES, iq4_value, iq4xs_scale};

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

/// A q4_K or q5_K block's integer sums against a q8_K block `y`: its
/// sub-block sums (value `l` of sub-block `j` is `value(j, l)`) times
/// their scales, and its mins times the activation's sub-block sums.
fn q4k_isums(parts: &Q4kScales, value: impl Fn(usize, usize) -> i32, y: &[u8]) -> (i32, i32) {
    let a = |i: usize| y[4 + i] as i8 as i32;
    let bsum = |i: usize| i16::from_le_bytes([y[260 + 2 * i], y[261 + 2 * i]]) as i32;
    let (mut total, mut msum) = (0i32, 0i32);
    for j in 0..8 {
        let sub: i32 = (0..32).map(|l| value(j, l) * a(32 * j + l)).sum();
        total += parts.scales[j] as i32 * sub;
        msum += parts.mins[j] as i32 * (bsum(2 * j) + bsum(2 * j + 1));
    }
    (total, msum)
}

/// A q2_K or q3_K block's integer sum against a q8_K block `y`: each 16-value
/// sub-block's sum (value `n` is `value(n)`) times its scale.
fn q3k_isum(scale: impl Fn(usize) -> i32, value: impl Fn(usize) -> i32, y: &[u8]) -> i32 {
    (0..16)
        .map(|j| {
            let sub: i32 = (16 * j..16 * j + 16)
                .map(|n| value(n) * y[4 + n] as i8 as i32)
                .sum();
            scale(j) * sub
        })
        .sum()
}

/// A q2_K block's mins (`min(j)`, sub-block `j`'s) times the q8_K block
/// `y`'s 16-value sums.
fn q2k_msum(min: impl Fn(usize) -> i32, y: &[u8]) -> i32 {
    (0..16)
        .map(|j| min(j) * i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32)
        .sum()
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
/// q8_K for q2_K, q3_K, q4_K, q5_K and iq4_xs), in the packed kernels'
/// order: the reference they are tested against.
pub fn dot(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    let (bb, _) = block_shape(ty);
    let ab = ty.activation_type().row_bytes(block_shape(ty).1 as u64) as usize;
    let mut acc = [0f32; 2];
    for (x, y) in w.chunks_exact(bb).zip(a.chunks_exact(ab)) {
        match ty {
            GgmlType::Q4K | GgmlType::Q5K => {
                let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                let value = |j: usize, l: usize| match ty {
                    GgmlType::Q5K => q5k_value(x, 32 * j + l) as i32,
                    _ => ((x[16 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) as i32,
                };
                let (isum, msum) = q4k_isums(&Q4kScales::of(&x[4..16]), value, y);
                step(&mut acc, f16_at(x, 0), f16_at(x, 2), dy, isum, msum);
            }
            GgmlType::Q3K => {
                let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                let scales = q3k_scales(x);
                let isum = q3k_isum(|j| scales[j], |n| q3k_value(x, n), y);
                step(&mut acc, f16_at(x, 108), 0.0, dy, isum, 0);
            }
            GgmlType::Q2K => {
                let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                let isum = q3k_isum(|j| (x[j] & 0xF) as i32, |n| q2k_value(x, n) as i32, y);
                let msum = q2k_msum(|j| (x[j] >> 4) as i32, y);
                step(&mut acc, f16_at(x, 80), f16_at(x, 82), dy, isum, msum);
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
pub(super) fn unpacked_q4_0(group: &[u8], b: usize, r: usize) -> Vec<u8> {
    let bb = block_shape(GgmlType::Q4_0).0;
    let block = &group[b * ROWS * bb..(b + 1) * ROWS * bb];
    let mut out = block[2 * r..2 * r + 2].to_vec();
    for j in 0..(bb - 2) / 4 {
        let at = 2 * ROWS + 32 * j + 4 * r;
        out.extend_from_slice(&block[at..at + 4]);
    }
    out
}

/// Row `r`'s part of a packed q4_K (or, `five`, q5_K) block: `d`,
/// `dmin`, its scales and mins, and value `l` of its sub-block `j`.
fn q4k_row(
    block: &[u8],
    r: usize,
    five: bool,
) -> (f32, f32, Q4kScales, impl Fn(usize, usize) -> i32 + '_) {
    let parts = Q4kScales {
        scales: std::array::from_fn(|j| block[32 + 8 * j + r]),
        mins: std::array::from_fn(|j| block[96 + 16 * (j / 2) + 2 * r + j % 2]),
    };
    let pair = if five { 320 } else { 256 };
    let value = move |j: usize, l: usize| {
        let at = 160 + pair * (j / 2);
        let nibble = (block[at + 32 * (l / 4) + 4 * r + l % 4] >> (4 * (j % 2))) & 0xF;
        let fifth = if five {
            (block[at + 256 + 8 * (l / 4) + r] >> (l % 4 + 4 * (j % 2))) & 1
        } else {
            0
        };
        (nibble | fifth << 4) as i32
    };
    (
        f16_at(block, 2 * r),
        f16_at(block, 16 + 2 * r),
        parts,
        value,
    )
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
                if matches!(ty, GgmlType::Q4K | GgmlType::Q5K) {
                    let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    let (d, dmin, parts, value) = q4k_row(block, r, ty == GgmlType::Q5K);
                    let (isum, msum) = q4k_isums(&parts, value, y);
                    step(&mut acc, d, dmin, dy, isum, msum);
                } else if ty == GgmlType::Q3K {
                    let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    let scale = |j: usize| block[16 + 8 * j + r] as i8 as i32;
                    let value = |n: usize| {
                        let (c, p, i) = (n / 128, n % 128 / 32, n % 32);
                        let q = block[144 + 256 * c + 32 * (i / 4) + 4 * r + i % 4];
                        let h = block[656 + 32 * (i / 4) + 4 * r + i % 4];
                        let low = ((q >> (2 * p)) & 3) as i32;
                        low - if (h >> (4 * c + p)) & 1 == 1 { 0 } else { 4 }
                    };
                    let isum = q3k_isum(scale, value, y);
                    step(&mut acc, f16_at(block, 2 * r), 0.0, dy, isum, 0);
                } else if ty == GgmlType::Q2K {
                    let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    let byte = |j: usize| block[32 + 8 * j + r];
                    let value = |n: usize| {
                        let (c, p, i) = (n / 128, n % 128 / 32, n % 32);
                        let q = block[160 + 256 * c + 32 * (i / 4) + 4 * r + i % 4];
                        ((q >> (2 * p)) & 3) as i32
                    };
                    let isum = q3k_isum(|j| (byte(j) & 0xF) as i32, value, y);
                    let msum = q2k_msum(|j| (byte(j) >> 4) as i32, y);
                    let (d, dmin) = (f16_at(block, 2 * r), f16_at(block, 16 + 2 * r));
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

/// The portable packed q3_K kernel.
pub fn portable_q3k(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::Q3K, group, a, out)
}

/// The portable packed q2_K kernel.
pub fn portable_q2k(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::Q2K, group, a, out)
}

/// The portable packed q5_K kernel.
pub fn portable_q5k(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::Q5K, group, a, out)
}

/// The portable packed iq4_xs kernel.
pub fn portable_iq4xs(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::IQ4XS, group, a, out)
}

/// The portable packed q4_K kernel.
pub fn portable_q4k(group: &[u8], a: &[&[u8]], _sums: &[&[i32]], out: &mut [[f32; ROWS]]) {
    portable(GgmlType::Q4K, group, a, out)
}
