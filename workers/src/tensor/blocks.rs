//! Decoding rows of every supported type to f32.
//!
//! Used for embedding lookups and as the reference the dot-product kernels
//! are tested against; matrix products never dequantize a whole matrix.

use super::GgmlType;
use half::{bf16, f16};

/// Reads the f16 at `b[i..i + 2]`.
#[inline]
pub fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K block's 12 scale
/// bytes (ggml's `get_scale_min_k4`).
#[inline]
pub fn q4k_scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Value `j` (0..32) of a Q5_0 block, -16..=15: low nibbles are values
/// 0..16, high nibbles 16..32, and bit `j` of the little-endian word at
/// byte 2 is value `j`'s fifth bit.
#[inline]
pub fn q5_0_value(b: &[u8], j: usize) -> i32 {
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let nibble = if j < 16 {
        b[6 + j] & 0xF
    } else {
        b[6 + j - 16] >> 4
    };
    (nibble as i32 | (((qh >> j) & 1) << 4) as i32) - 16
}

/// Value `j` (0..32) of a Q5_1 block, 0..=31, before its scale and min:
/// laid out as [`q5_0_value`]'s two bytes later (after the min),
/// unsigned.
#[inline]
pub fn q5_1_value(b: &[u8], j: usize) -> u8 {
    (q5_0_value(&b[2..], j) + 16) as u8
}

/// Value `j` (0..32) of a Q4_1 block, 0..=15, before its scale and min.
#[inline]
pub fn q4_1_value(b: &[u8], j: usize) -> u8 {
    if j < 16 {
        b[4 + j] & 0xF
    } else {
        b[4 + j - 16] >> 4
    }
}

/// Value `n` (0..256) of a Q2_K block, 0..=3, before its sub-block's
/// scale and min: bits `2p` of quant byte `16 + 32c + i`, with `c = n /
/// 128`, `p = n % 128 / 32` and `i = n % 32`. Sub-block `j`'s scale is
/// byte `j`'s low nibble, its min the high one.
#[inline]
pub fn q2k_value(b: &[u8], n: usize) -> u8 {
    let (c, p, i) = (n / 128, n % 128 / 32, n % 32);
    (b[16 + 32 * c + i] >> (2 * p)) & 3
}

/// The sixteen 6-bit scales of a Q3_K block (its bytes 96..108), less
/// 32: sub-block `j`'s low four bits are byte `j`'s low nibble (`j < 8`)
/// or byte `j - 8`'s high one, its high two bits are bits `2 (j / 4)` of
/// byte `8 + j % 4` (ggml's unpacking of `scales`).
#[inline]
pub fn q3k_scales(b: &[u8]) -> [i32; 16] {
    let s = &b[96..108];
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i32 - 32
    })
}

/// Value `n` (0..256) of a Q3_K block, -4..=3, before its sub-block's
/// scale: with `c = n / 128`, `p = n % 128 / 32` and `i = n % 32`, bits
/// `2p` of quant byte `32 + 32c + i`, less 4 where bit `4c + p` of high
/// mask byte `i` is clear.
#[inline]
pub fn q3k_value(b: &[u8], n: usize) -> i32 {
    let (c, p, i) = (n / 128, n % 128 / 32, n % 32);
    let low = (b[32 + 32 * c + i] >> (2 * p)) & 3;
    let set = (b[i] >> (4 * c + p)) & 1 == 1;
    low as i32 - if set { 0 } else { 4 }
}

/// Value `i` (0..256) of a Q5_K block, 0..=31, before its sub-block's
/// scale and min: the nibble of quant byte `32 (i / 64) + i % 32` (low for
/// the first 32 of each 64), and bit `i / 32` of high byte `i % 32`.
#[inline]
pub fn q5k_value(b: &[u8], i: usize) -> u8 {
    let (sub, l) = (i / 32, i % 32);
    let q = b[48 + (sub / 2) * 32 + l];
    let nibble = if sub % 2 == 0 { q & 0xF } else { q >> 4 };
    nibble | (((b[16 + l] >> sub) & 1) << 4)
}

/// Decodes one row of `ty` (`bytes` holds exactly the row) into `out`.
pub fn dequantize_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    assert_eq!(
        bytes.len() as u64,
        ty.row_bytes(out.len() as u64),
        "{ty} row"
    );
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(34)) {
                let d = f16_at(b, 0);
                for (x, &q) in o.iter_mut().zip(&b[2..]) {
                    *x = q as i8 as f32 * d;
                }
            }
        }
        GgmlType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(18)) {
                let d = f16_at(b, 0);
                for (j, &q) in b[2..].iter().enumerate() {
                    o[j] = ((q & 0xF) as i32 - 8) as f32 * d;
                    o[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
        }
        GgmlType::Q5_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(22)) {
                let d = f16_at(b, 0);
                for (j, x) in o.iter_mut().enumerate() {
                    *x = q5_0_value(b, j) as f32 * d;
                }
            }
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            let five = ty == GgmlType::Q5_1;
            let size = ty.block_bytes() as usize;
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(size)) {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                for (j, x) in o.iter_mut().enumerate() {
                    let q = if five {
                        q5_1_value(b, j)
                    } else {
                        q4_1_value(b, j)
                    };
                    *x = q as f32 * d + m;
                }
            }
        }
        GgmlType::Q8_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(36)) {
                let d = f16_at(b, 0);
                for (x, &q) in o.iter_mut().zip(&b[4..]) {
                    *x = q as i8 as f32 * d;
                }
            }
        }
        GgmlType::Q2K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(84)) {
                let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
                for (n, x) in o.iter_mut().enumerate() {
                    let sc = b[n / 16];
                    let (step, min) = (d * (sc & 0xF) as f32, dmin * (sc >> 4) as f32);
                    *x = step * q2k_value(b, n) as f32 - min;
                }
            }
        }
        GgmlType::Q3K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(110)) {
                let (d, scales) = (f16_at(b, 108), q3k_scales(b));
                for (n, x) in o.iter_mut().enumerate() {
                    *x = d * scales[n / 16] as f32 * q3k_value(b, n) as f32;
                }
            }
        }
        GgmlType::Q4K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(144)) {
                dequantize_q4k(b, o);
            }
        }
        GgmlType::Q5K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(176)) {
                dequantize_q5k(b, o);
            }
        }
        GgmlType::Q6K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(210)) {
                dequantize_q6k(b, o);
            }
        }
        GgmlType::IQ4NL => super::iq4::dequantize_iq4nl(bytes, out),
        GgmlType::IQ4XS => super::iq4::dequantize_iq4xs(bytes, out),
        GgmlType::Q8K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(292)) {
                let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                for (x, &q) in o.iter_mut().zip(&b[4..260]) {
                    *x = q as i8 as f32 * d;
                }
            }
        }
    }
}

fn dequantize_q4k(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for chunk in 0..4 {
        let (sc1, m1) = q4k_scale_min(2 * chunk, scales);
        let (sc2, m2) = q4k_scale_min(2 * chunk + 1, scales);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let q = &qs[chunk * 32..chunk * 32 + 32];
        let o = &mut out[chunk * 64..chunk * 64 + 64];
        for l in 0..32 {
            o[l] = d1 * (q[l] & 0xF) as f32 - min1;
            o[l + 32] = d2 * (q[l] >> 4) as f32 - min2;
        }
    }
}

fn dequantize_q5k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    for (sub, o) in out.chunks_exact_mut(32).enumerate() {
        let (sc, m) = q4k_scale_min(sub, &b[4..16]);
        let (step, min) = (d * sc as f32, dmin * m as f32);
        for (l, x) in o.iter_mut().enumerate() {
            *x = step * q5k_value(b, sub * 32 + l) as f32 - min;
        }
    }
}

fn dequantize_q6k(b: &[u8], out: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = f16_at(b, 208);
    for half in 0..2 {
        let ql = &ql[half * 64..];
        let qh = &qh[half * 32..];
        let sc = &sc[half * 8..];
        let o = &mut out[half * 128..];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            o[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            o[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            o[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            o[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}
