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

mod kquants;

use super::{GgmlType, iq4};
use half::{bf16, f16};
use kquants::{kquant_block, q2k_block, q3k_block, q6k_block};

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
pub(super) fn signed_max(x: &[f32]) -> f32 {
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
