//! Portable dot products: one weight row against one activation row already
//! encoded in the weight type's activation type. The reference the SIMD
//! kernels are tested against, and the fallback where none applies.

use crate::tensor::blocks::{
    f16_at, q2k_value, q3k_scales, q3k_value, q4_1_value, q4k_scale_min, q5_0_value, q5_1_value,
    q5k_value,
};
use crate::tensor::iq4::{iq4_value, iq4xs_scale};
use half::{bf16, f16};

/// f32 · f32.
pub fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(4).zip(a.chunks_exact(4)) {
        sum += f32::from_le_bytes([x[0], x[1], x[2], x[3]])
            * f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
    }
    sum
}

/// f16 · f16, accumulated in f32.
pub fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        sum +=
            f16::from_le_bytes([x[0], x[1]]).to_f32() * f16::from_le_bytes([y[0], y[1]]).to_f32();
    }
    sum
}

/// bf16 · bf16, accumulated in f32.
pub fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        sum +=
            bf16::from_le_bytes([x[0], x[1]]).to_f32() * bf16::from_le_bytes([y[0], y[1]]).to_f32();
    }
    sum
}

/// Q8_0 · Q8_0: integer sums per block, scaled by both block scales.
pub fn dot_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
        let s: i32 = x[2..]
            .iter()
            .zip(&y[2..])
            .map(|(&p, &q)| p as i8 as i32 * q as i8 as i32)
            .sum();
        sum += s as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sum
}

/// Q4_0 · Q8_0.
pub fn dot_q4_0(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let mut s = 0i32;
        for j in 0..16 {
            let q = x[2 + j];
            s += ((q & 0xF) as i32 - 8) * y[2 + j] as i8 as i32;
            s += ((q >> 4) as i32 - 8) * y[2 + j + 16] as i8 as i32;
        }
        sum += s as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sum
}

/// Q5_0 · Q8_0.
pub fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(22).zip(a.chunks_exact(34)) {
        let s: i32 = (0..32)
            .map(|j| q5_0_value(x, j) * y[2 + j] as i8 as i32)
            .sum();
        sum += s as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sum
}

/// Q4_1 · Q8_1: per block the scaled integer sum, plus the weights' min
/// times the activations' scaled sum.
pub fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    dot_x_1(w, a, 20, q4_1_value)
}

/// Q5_1 · Q8_1.
pub fn dot_q5_1(w: &[u8], a: &[u8]) -> f32 {
    dot_x_1(w, a, 24, q5_1_value)
}

fn dot_x_1(w: &[u8], a: &[u8], size: usize, value: fn(&[u8], usize) -> u8) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(size).zip(a.chunks_exact(36)) {
        let s: i32 = (0..32)
            .map(|j| value(x, j) as i32 * y[4 + j] as i8 as i32)
            .sum();
        sum += s as f32 * (f16_at(x, 0) * f16_at(y, 0)) + f16_at(x, 2) * f16_at(y, 2);
    }
    sum
}

/// Reads a Q8_K block's scale, values and 16-value sums.
#[inline]
fn q8k_parts(y: &[u8]) -> (f32, &[u8], impl Fn(usize) -> i32 + '_) {
    let d = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
    let bsum = move |j: usize| i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32;
    (d, &y[4..260], bsum)
}

/// Q4_K · Q8_K: per block the scaled integer sums, less the mins against
/// the activation's 16-value sums.
pub fn dot_q4k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(144).zip(a.chunks_exact(292)) {
        let (dy, qy, bsum) = q8k_parts(y);
        let scales = &x[4..16];
        let qs = &x[16..144];
        let mut sumi = 0i32;
        let mut summ = 0i32;
        for j in 0..8 {
            let (sc, m) = q4k_scale_min(j, scales);
            summ += m as i32 * (bsum(2 * j) + bsum(2 * j + 1));
            let q = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
            let shift = if j % 2 == 0 { 0 } else { 4 };
            let mut s = 0i32;
            for l in 0..32 {
                s += ((q[l] >> shift) & 0xF) as i32 * qy[j * 32 + l] as i8 as i32;
            }
            sumi += sc as i32 * s;
        }
        sum += f16_at(x, 0) * dy * sumi as f32 - f16_at(x, 2) * dy * summ as f32;
    }
    sum
}

/// Q5_K · Q8_K: as Q4_K, with values of five bits.
pub fn dot_q5k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(176).zip(a.chunks_exact(292)) {
        let (dy, qy, bsum) = q8k_parts(y);
        let mut sumi = 0i32;
        let mut summ = 0i32;
        for j in 0..8 {
            let (sc, m) = q4k_scale_min(j, &x[4..16]);
            summ += m as i32 * (bsum(2 * j) + bsum(2 * j + 1));
            let s: i32 = (0..32)
                .map(|l| q5k_value(x, j * 32 + l) as i32 * qy[j * 32 + l] as i8 as i32)
                .sum();
            sumi += sc as i32 * s;
        }
        sum += f16_at(x, 0) * dy * sumi as f32 - f16_at(x, 2) * dy * summ as f32;
    }
    sum
}

/// Q2_K · Q8_K: per block the integer sums of each 16-value sub-block by
/// its scale, less its min against the activation's 16-value sum.
pub fn dot_q2k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(84).zip(a.chunks_exact(292)) {
        let (dy, qy, bsum) = q8k_parts(y);
        let (mut sumi, mut summ) = (0i32, 0i32);
        for j in 0..16 {
            let part: i32 = (16 * j..16 * j + 16)
                .map(|n| q2k_value(x, n) as i32 * qy[n] as i8 as i32)
                .sum();
            sumi += (x[j] & 0xF) as i32 * part;
            summ += (x[j] >> 4) as i32 * bsum(j);
        }
        sum += f16_at(x, 80) * dy * sumi as f32 - f16_at(x, 82) * dy * summ as f32;
    }
    sum
}

/// Q3_K · Q8_K: per block the integer sums of each 16-value sub-block by
/// its scale.
pub fn dot_q3k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(110).zip(a.chunks_exact(292)) {
        let (dy, qy, _) = q8k_parts(y);
        let mut sumi = 0i32;
        for (j, s) in q3k_scales(x).into_iter().enumerate() {
            let part: i32 = (16 * j..16 * j + 16)
                .map(|n| q3k_value(x, n) * qy[n] as i8 as i32)
                .sum();
            sumi += s * part;
        }
        sum += f16_at(x, 108) * dy * sumi as f32;
    }
    sum
}

/// Q6_K · Q8_K.
pub fn dot_q6k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(210).zip(a.chunks_exact(292)) {
        let (dy, qy, _) = q8k_parts(y);
        let (ql, qh, sc) = (&x[0..128], &x[128..192], &x[192..208]);
        let mut q6 = [0i32; 256];
        for half in 0..2 {
            let (ql, qh) = (&ql[half * 64..], &qh[half * 32..]);
            let o = &mut q6[half * 128..];
            for l in 0..32 {
                o[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                o[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                o[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                o[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            }
        }
        let mut sumi = 0i32;
        for (j, &s) in sc.iter().enumerate() {
            let part: i32 = (0..16)
                .map(|l| q6[j * 16 + l] * qy[j * 16 + l] as i8 as i32)
                .sum();
            sumi += s as i8 as i32 * part;
        }
        sum += f16_at(x, 208) * dy * sumi as f32;
    }
    sum
}

/// IQ4_NL · Q8_0: as Q4_0, each value looked up in the table.
pub fn dot_iq4nl(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let s: i32 = (0..32)
            .map(|j| iq4_value(&x[2..], j) * y[2 + j] as i8 as i32)
            .sum();
        sum += s as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sum
}

/// IQ4_XS · Q8_K: per block the integer sums of each 32-value sub-block
/// by its scale.
pub fn dot_iq4xs(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(136).zip(a.chunks_exact(292)) {
        let (dy, qy, _) = q8k_parts(y);
        let mut sumi = 0i32;
        for j in 0..8 {
            let q = &x[8 + 16 * j..];
            let part: i32 = (0..32)
                .map(|l| iq4_value(q, l) * qy[32 * j + l] as i8 as i32)
                .sum();
            sumi += iq4xs_scale(x, j) * part;
        }
        sum += f16_at(x, 0) * dy * sumi as f32;
    }
    sum
}
