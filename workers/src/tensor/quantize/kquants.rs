//! The k-quant weight encoders (q2_K, q3_K, q4_K, q5_K, q6_K): one pass
//! each, without ggml's search (see the parent module).

use super::{amax, signed_max};
use half::f16;

/// A one-pass Q4_K (`top` 15) or Q5_K (`top` 31) encoder: per 32-value
/// sub-block an affine range, the scales and mins then quantized to 6 bits
/// against their block maxima.
pub(super) fn kquant_block(x: &[f32], top: u8, out: &mut Vec<u8>) {
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    for (j, sub) in x.chunks_exact(32).enumerate() {
        let lo = sub.iter().fold(0.0f32, |m, &v| m.min(v));
        let hi = sub.iter().fold(f32::MIN, |m, &v| m.max(v));
        scales[j] = (hi - lo) / f32::from(top);
        mins[j] = -lo;
    }
    let max_scale = scales.iter().fold(0.0f32, |m, &v| m.max(v));
    let max_min = mins.iter().fold(0.0f32, |m, &v| m.max(v));
    let d = max_scale / 63.0;
    let dmin = max_min / 63.0;
    let (d16, dmin16) = (f16::from_f32(d), f16::from_f32(dmin));
    let (d, dmin) = (d16.to_f32(), dmin16.to_f32());
    let q6 = |v: f32, unit: f32| {
        if unit > 0.0 {
            (v / unit).round().clamp(0.0, 63.0) as u8
        } else {
            0
        }
    };
    let ls: Vec<u8> = scales.iter().map(|&s| q6(s, d)).collect();
    let lm: Vec<u8> = mins.iter().map(|&m| q6(m, dmin)).collect();
    let mut packed = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            packed[j] = ls[j];
            packed[j + 4] = lm[j];
        } else {
            packed[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            packed[j - 4] |= (ls[j] >> 4) << 6;
            packed[j] |= (lm[j] >> 4) << 6;
        }
    }
    out.extend_from_slice(&d16.to_le_bytes());
    out.extend_from_slice(&dmin16.to_le_bytes());
    out.extend_from_slice(&packed);
    let mut q = [0u8; 256];
    for j in 0..8 {
        let step = d * ls[j] as f32;
        let base = dmin * lm[j] as f32;
        for l in 0..32 {
            let v = x[j * 32 + l];
            q[j * 32 + l] = if step > 0.0 {
                ((v + base) / step).round().clamp(0.0, f32::from(top)) as u8
            } else {
                0
            };
        }
    }
    if top > 15 {
        // Q5_K: bit `j` of high byte `l` is value `32 j + l`'s fifth bit.
        let mut qh = [0u8; 32];
        for (i, &v) in q.iter().enumerate() {
            qh[i % 32] |= (v >> 4) << (i / 32);
        }
        out.extend_from_slice(&qh);
    }
    for chunk in 0..4 {
        for l in 0..32 {
            out.push((q[chunk * 64 + l] & 0xF) | ((q[chunk * 64 + 32 + l] & 0xF) << 4));
        }
    }
}

/// A one-pass Q2_K encoder: per 16-value sub-block an affine range from
/// its least value (or 0) in three steps, the steps and mins then
/// quantized to four bits against their block maxima.
pub(super) fn q2k_block(x: &[f32], out: &mut Vec<u8>) {
    let mut steps = [0f32; 16];
    let mut mins = [0f32; 16];
    for (j, sub) in x.chunks_exact(16).enumerate() {
        let lo = sub.iter().fold(0.0f32, |m, &v| m.min(v));
        let hi = sub.iter().fold(f32::MIN, |m, &v| m.max(v));
        (steps[j], mins[j]) = ((hi - lo) / 3.0, -lo);
    }
    let top = |v: &[f32]| v.iter().fold(0.0f32, |m, &s| m.max(s));
    let (d16, dmin16) = (
        f16::from_f32(top(&steps) / 15.0),
        f16::from_f32(top(&mins) / 15.0),
    );
    let (d, dmin) = (d16.to_f32(), dmin16.to_f32());
    let q4 = |v: f32, unit: f32| {
        if unit > 0.0 {
            (v / unit).round_ties_even().clamp(0.0, 15.0) as u8
        } else {
            0
        }
    };
    let mut scales = [0u8; 16];
    let mut qs = [0u8; 64];
    for j in 0..16 {
        let (ls, lm) = (q4(steps[j], d), q4(mins[j], dmin));
        scales[j] = ls | (lm << 4);
        let (step, base) = (d * ls as f32, dmin * lm as f32);
        for l in 0..16 {
            let n = 16 * j + l;
            let q = if step > 0.0 {
                ((x[n] + base) / step).round_ties_even().clamp(0.0, 3.0) as u8
            } else {
                0
            };
            let (c, p, i) = (n / 128, n % 128 / 32, n % 32);
            qs[32 * c + i] |= q << (2 * p);
        }
    }
    out.extend_from_slice(&scales);
    out.extend_from_slice(&qs);
    out.extend_from_slice(&d16.to_le_bytes());
    out.extend_from_slice(&dmin16.to_le_bytes());
}

/// A one-pass Q3_K encoder: per 16-value sub-block a signed scale that
/// puts its value of largest magnitude at -4 steps (the wider side of
/// -4..=3), the scales then quantized to six signed bits so that the one
/// of largest magnitude is -32.
pub(super) fn q3k_block(x: &[f32], out: &mut Vec<u8>) {
    let sub_scales: Vec<f32> = x.chunks_exact(16).map(|s| signed_max(s) / -4.0).collect();
    let d16 = f16::from_f32(signed_max(&sub_scales) / -32.0);
    let d = d16.to_f32();
    let ls: Vec<i32> = sub_scales
        .iter()
        .map(|&s| {
            if d != 0.0 {
                (s / d).round_ties_even().clamp(-32.0, 31.0) as i32
            } else {
                0
            }
        })
        .collect();
    let (mut hmask, mut qs, mut scales) = ([0u8; 32], [0u8; 64], [0u8; 12]);
    for (n, v) in x.iter().enumerate() {
        let step = d * ls[n / 16] as f32;
        let l = if step != 0.0 {
            (v / step).round_ties_even().clamp(-4.0, 3.0) as i32 + 4
        } else {
            4
        } as u8;
        let (c, p, i) = (n / 128, n % 128 / 32, n % 32);
        qs[32 * c + i] |= (l & 3) << (2 * p);
        hmask[i] |= (l >> 2) << (4 * c + p);
    }
    for (j, &s) in ls.iter().enumerate() {
        let v = (s + 32) as u8;
        if j < 8 {
            scales[j] |= v & 0xF;
        } else {
            scales[j - 8] |= (v & 0xF) << 4;
        }
        scales[8 + j % 4] |= (v >> 4) << (2 * (j / 4));
    }
    out.extend_from_slice(&hmask);
    out.extend_from_slice(&qs);
    out.extend_from_slice(&scales);
    out.extend_from_slice(&d16.to_le_bytes());
}

/// A one-pass Q6_K encoder: per 16-value sub-block a symmetric scale, the
/// scales then quantized to 8 bits against the block maximum.
pub(super) fn q6k_block(x: &[f32], out: &mut Vec<u8>) {
    let sub_scales: Vec<f32> = x.chunks_exact(16).map(|s| amax(s) / 31.5).collect();
    let max_scale = sub_scales.iter().fold(0.0f32, |m, &v| m.max(v));
    let d16 = f16::from_f32(max_scale / 127.0);
    let d = d16.to_f32();
    let sc: Vec<i8> = sub_scales
        .iter()
        .map(|&s| {
            if d > 0.0 {
                (s / d).round().clamp(-128.0, 127.0) as i8
            } else {
                0
            }
        })
        .collect();
    let mut q = [0u8; 256];
    for (i, v) in x.iter().enumerate() {
        let step = d * sc[i / 16] as f32;
        let l = if step != 0.0 {
            (v / step).round().clamp(-32.0, 31.0) as i32
        } else {
            0
        };
        q[i] = (l + 32) as u8;
    }
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for half in 0..2 {
        for l in 0..32 {
            let b = half * 128;
            let (q1, q2, q3, q4) = (q[b + l], q[b + l + 32], q[b + l + 64], q[b + l + 96]);
            ql[half * 64 + l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            ql[half * 64 + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            qh[half * 32 + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&d16.to_le_bytes());
}
