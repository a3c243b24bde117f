//! Encoding f32 rows into every supported type.
//!
//! Activations are quantized exactly as ggml's CPU backend does before a dot
//! product (Q8_0 and Q8_1 as its AVX2 path, Q8_K as its reference), so that
//! a quantized matmul sees the same integers as llama.cpp's. The weight
//! encoders are simple: q4_0, q4_1, q5_0 and q5_1 are ggml's reference
//! quantizers, the k-quants and the iq4 types ([`iq4`]) one pass without
//! ggml's search. They write
//! valid blocks for the project's own fixtures and benchmark models, and
//! the goldens hold llama.cpp's answers on those same files.

use super::{GgmlType, iq4};
use half::{bf16, f16};

/// Encodes `x` (a whole number of blocks) as `ty`, appending to `out`.
pub fn quantize_row(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) {
    assert_eq!(
        x.len() as u64 % ty.block_elements(),
        0,
        "{ty} row of {}",
        x.len()
    );
    match ty {
        GgmlType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q8_0 => x.chunks_exact(32).for_each(|b| q8_0_block(b, out)),
        GgmlType::Q4_0 => x.chunks_exact(32).for_each(|b| q4_0_block(b, out)),
        GgmlType::Q5_0 => x.chunks_exact(32).for_each(|b| q5_0_block(b, out)),
        GgmlType::Q8_1 => x.chunks_exact(32).for_each(|b| q8_1_block(b, out)),
        GgmlType::Q4_1 => x.chunks_exact(32).for_each(|b| q1_block(b, 15, out)),
        GgmlType::Q5_1 => x.chunks_exact(32).for_each(|b| q1_block(b, 31, out)),
        GgmlType::Q8K => x.chunks_exact(256).for_each(|b| q8k_block(b, out)),
        GgmlType::Q2K => x.chunks_exact(256).for_each(|b| q2k_block(b, out)),
        GgmlType::Q3K => x.chunks_exact(256).for_each(|b| q3k_block(b, out)),
        GgmlType::Q4K => x.chunks_exact(256).for_each(|b| kquant_block(b, 15, out)),
        GgmlType::Q5K => x.chunks_exact(256).for_each(|b| kquant_block(b, 31, out)),
        GgmlType::Q6K => x.chunks_exact(256).for_each(|b| q6k_block(b, out)),
        GgmlType::IQ4NL => x.chunks_exact(32).for_each(|b| iq4::iq4_nl_block(b, out)),
        GgmlType::IQ4XS => x.chunks_exact(256).for_each(|b| iq4::iq4_xs_block(b, out)),
    }
}

/// Encodes a row into a fresh buffer.
pub fn quantized(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ty.row_bytes(x.len() as u64) as usize);
    quantize_row(ty, x, &mut out);
    out
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// `v.round_ties_even()` without a library call (the processor baseline
/// has no rounding instruction) for a value under 2^22 in magnitude or
/// not finite, as an activation scaled to its block is (at most 127):
/// adding and taking away 1.5 · 2^23 rounds |v| to an integer, ties to
/// even (the default rounding mode), exactly, and the sign goes back on
/// (-0.5 gives -0.0). No branch, so the loops around it vectorize.
#[inline]
fn round_small(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    ((v.abs() + MAGIC) - MAGIC).copysign(v)
}

/// ggml's AVX2 `quantize_row_q8_0`: scale by 127/amax, round half to even.
fn q8_0_block(x: &[f32], out: &mut Vec<u8>) {
    let max = amax(x);
    let d = max / 127.0;
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    let mut q = [0u8; 32];
    for (q, v) in q.iter_mut().zip(x) {
        *q = round_small(v * id) as i8 as u8;
    }
    out.extend_from_slice(&q);
}

/// ggml's AVX2 `quantize_row_q8_1`: q8_0's scale and quants, and the
/// f16 of the (unrounded) scale times the quants' sum.
fn q8_1_block(x: &[f32], out: &mut Vec<u8>) {
    let start = out.len();
    q8_0_block(x, out);
    let sum: i32 = out[start + 2..].iter().map(|&q| q as i8 as i32).sum();
    let d = amax(x) / 127.0;
    let s = f16::from_f32(d * sum as f32).to_le_bytes();
    out.splice(start + 2..start + 2, s);
}

/// ggml's `quantize_row_q4_1_ref` (`top` 15) and `quantize_row_q5_1_ref`
/// (`top` 31): the block's range in `top` steps from its least value.
fn q1_block(x: &[f32], top: u8, out: &mut Vec<u8>) {
    let min = x.iter().fold(f32::MAX, |m, &v| if v < m { v } else { m });
    let max = x.iter().fold(-f32::MAX, |m, &v| if v > m { v } else { m });
    let d = (max - min) / f32::from(top);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
    pack_quants(
        x,
        |v| (((v - min) * id + 0.5) as u8).min(top),
        top > 15,
        out,
    );
}

/// Appends the quants `q` gives `x`'s 32 values as ggml lays out four
/// and five bits: the fifth bits (`five`) first, as a little-endian word
/// whose bit `j` is value `j`'s, then 16 bytes, value `j` in byte `j`'s
/// low nibble and value `j + 16` in its high one.
fn pack_quants(x: &[f32], q: impl Fn(f32) -> u8, five: bool, out: &mut Vec<u8>) {
    let mut qh = 0u32;
    let mut qs = [0u8; 16];
    for j in 0..16 {
        let (lo, hi) = (q(x[j]), q(x[j + 16]));
        qs[j] = (lo & 0xF) | ((hi & 0xF) << 4);
        qh |= u32::from(lo >> 4) << j | u32::from(hi >> 4) << (j + 16);
    }
    if five {
        out.extend_from_slice(&qh.to_le_bytes());
    }
    out.extend_from_slice(&qs);
}

/// The first value of the largest magnitude, its sign kept (0 for none).
fn signed_max(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// ggml's `quantize_row_q4_0_ref`.
fn q4_0_block(x: &[f32], out: &mut Vec<u8>) {
    let max = signed_max(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    pack_quants(x, |v| ((v * id + 8.5) as i8).min(15) as u8, false, out);
}

/// ggml's `quantize_row_q5_0_ref`.
fn q5_0_block(x: &[f32], out: &mut Vec<u8>) {
    let max = signed_max(x);
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    pack_quants(x, |v| ((v * id + 16.5) as i8).min(31) as u8, true, out);
}

/// ggml's `quantize_row_q8_K_ref`: the scale from the first value of the
/// largest magnitude, its sign kept (NaNs pass over).
fn q8k_block(x: &[f32], out: &mut Vec<u8>) {
    let top = amax(x);
    let max = x.iter().copied().find(|v| v.abs() == top).unwrap_or(0.0);
    if max == 0.0 {
        out.extend_from_slice(&0f32.to_le_bytes());
        out.extend(std::iter::repeat_n(0u8, 256 + 32));
        return;
    }
    let iscale = -127.0 / max;
    let mut q = [0i8; 256];
    for (q, v) in q.iter_mut().zip(x) {
        *q = (round_small(iscale * v) as i32).min(127) as i8;
    }
    out.extend_from_slice(&(1.0 / iscale).to_le_bytes());
    out.extend_from_slice(&q.map(|q| q as u8));
    for sub in q.chunks_exact(16) {
        let sum: i16 = sub.iter().map(|&q| q as i16).sum();
        out.extend_from_slice(&sum.to_le_bytes());
    }
}

/// A one-pass Q4_K (`top` 15) or Q5_K (`top` 31) encoder: per 32-value
/// sub-block an affine range, the scales and mins then quantized to 6 bits
/// against their block maxima.
fn kquant_block(x: &[f32], top: u8, out: &mut Vec<u8>) {
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
fn q2k_block(x: &[f32], out: &mut Vec<u8>) {
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
fn q3k_block(x: &[f32], out: &mut Vec<u8>) {
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
fn q6k_block(x: &[f32], out: &mut Vec<u8>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The earlier, plainer forms of the two activation encoders, kept as
    /// the reference the faster ones are held to.
    fn q8_0_reference(x: &[f32], out: &mut Vec<u8>) {
        let max = amax(x);
        let d = max / 127.0;
        let id = if max != 0.0 { 127.0 / max } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend(x.iter().map(|v| (v * id).round_ties_even() as i8 as u8));
    }

    fn q8k_reference(x: &[f32], out: &mut Vec<u8>) {
        let max = x
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        if max == 0.0 {
            out.extend_from_slice(&0f32.to_le_bytes());
            out.extend(std::iter::repeat_n(0u8, 256 + 32));
            return;
        }
        let iscale = -127.0 / max;
        let qs: Vec<i8> = x
            .iter()
            .map(|v| ((iscale * v).round_ties_even() as i32).min(127) as i8)
            .collect();
        out.extend_from_slice(&(1.0 / iscale).to_le_bytes());
        out.extend(qs.iter().map(|&q| q as u8));
        for sub in qs.chunks_exact(16) {
            let sum: i16 = sub.iter().map(|&q| q as i16).sum();
            out.extend_from_slice(&sum.to_le_bytes());
        }
    }

    #[test]
    fn activation_encoders_give_the_reference_bytes() {
        let mut rng = crate::rng::SplitMix64::new(41);
        let mut rows: Vec<Vec<f32>> = (0..200)
            .map(|i| (0..256).map(|_| rng.symmetric(1.0 + i as f32)).collect())
            .collect();
        // Ties at every half step, a largest magnitude that is negative and
        // repeated with both signs, zeros (both signs), NaNs and infinities.
        rows.push((0..256).map(|i| (i as f32 - 128.0) * 0.5).collect());
        let mut both = vec![0.25f32; 256];
        (both[3], both[9], both[200]) = (-2.0, 2.0, -2.0);
        rows.push(both);
        rows.push(vec![0.0; 256]);
        rows.push(
            (0..256)
                .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
                .collect(),
        );
        let mut odd = rows[0].clone();
        (odd[0], odd[40], odd[77]) = (f32::NAN, f32::INFINITY, f32::NEG_INFINITY);
        rows.push(odd);
        // A subnormal largest magnitude: its scale, 127 over it, is
        // infinite, and every value saturates.
        let mut tiny = vec![0.0f32; 256];
        (tiny[5], tiny[6], tiny[100]) = (-1e-40, 1e-40, 5e-41);
        rows.push(tiny);
        let mut nan_first = vec![0.5f32; 256];
        (nan_first[0], nan_first[31], nan_first[255]) = (f32::NAN, -3.0, 1e-30);
        rows.push(nan_first);
        for (i, x) in rows.iter().enumerate() {
            let (mut got, mut want) = (Vec::new(), Vec::new());
            x.chunks_exact(32).for_each(|b| q8_0_block(b, &mut got));
            x.chunks_exact(32)
                .for_each(|b| q8_0_reference(b, &mut want));
            assert_eq!(got, want, "q8_0 row {i}");
            let (mut got, mut want) = (Vec::new(), Vec::new());
            q8k_block(x, &mut got);
            q8k_reference(x, &mut want);
            assert_eq!(got, want, "q8_K row {i}");
        }
    }

    #[test]
    fn round_small_is_round_ties_even_where_it_is_used() {
        let mut values = vec![
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -2.5,
            126.5,
            -127.5,
            4_194_303.5,
            -0.0,
        ];
        values.extend((-3000..3000).map(|i| i as f32 * 0.0625 + 0.001 * (i % 7) as f32));
        values.extend([f32::INFINITY, f32::NEG_INFINITY, 0.49999997]);
        for v in values {
            assert_eq!(
                round_small(v).to_bits(),
                v.round_ties_even().to_bits(),
                "{v}"
            );
        }
        assert!(round_small(f32::NAN).is_nan());
    }
}
