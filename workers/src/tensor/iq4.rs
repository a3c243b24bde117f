//! The four-bit non-linear types, iq4_nl and iq4_xs: each value a 4-bit
//! index into ggml's fixed table of 16 (`kvalues_iq4nl`), denser where
//! weights are many (near zero) than a uniform grid.
//!
//! - iq4_nl (18 bytes, 32 values): an f16 scale at 0, then 16 bytes at
//!   2 whose low nibbles are values 0..16 and high nibbles values 16..32
//!   (q4_0's layout). Its activations are q8_0.
//! - iq4_xs (136 bytes, 256 values): an f16 scale at 0, the two high bits
//!   of each 32-value sub-block's 6-bit scale in the word at 2 (sub-block
//!   `j`'s at bits `2j`), their low nibbles in bytes 4..8 (sub-block `j`'s
//!   in byte `4 + j / 2`, low nibble first), then each sub-block's 16
//!   bytes at `8 + 16 j` laid out as an iq4_nl block's. A sub-block's
//!   scale is its six bits less 32. Its activations are q8_K.
//!
//! The encoders are one pass (nearest value, then the scale that fits
//! those indices best), without ggml's search over scales: they write
//! valid blocks for the project's fixtures, and the goldens hold
//! llama.cpp's answers on those files.

use super::blocks::f16_at;
use super::quantize::signed_max;
use half::f16;

/// ggml's `kvalues_iq4nl`, ascending.
pub const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The table index of value `j` (0..32) of 16 packed bytes.
#[inline]
pub fn iq4_index(q: &[u8], j: usize) -> usize {
    (if j < 16 { q[j] & 0xF } else { q[j - 16] >> 4 }) as usize
}

/// Value `j` (0..32) of 16 packed bytes, before its scale.
#[inline]
pub fn iq4_value(q: &[u8], j: usize) -> i32 {
    IQ4_VALUES[iq4_index(q, j)] as i32
}

/// Sub-block `j`'s (0..8) scale of an iq4_xs block, -32..=31.
#[inline]
pub fn iq4xs_scale(b: &[u8], j: usize) -> i32 {
    let low = (b[4 + j / 2] >> (4 * (j % 2))) & 0xF;
    let high = (u16::from_le_bytes([b[2], b[3]]) >> (2 * j)) & 3;
    (low as i32 | (high as i32) << 4) - 32
}

/// Decodes iq4_nl blocks (`bytes`, whole blocks) into `out`.
pub fn dequantize_iq4nl(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(18)) {
        let d = f16_at(b, 0);
        for (j, x) in o.iter_mut().enumerate() {
            *x = d * iq4_value(&b[2..], j) as f32;
        }
    }
}

/// Decodes iq4_xs blocks (`bytes`, whole blocks) into `out`.
pub fn dequantize_iq4xs(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(136)) {
        let d = f16_at(b, 0);
        for (sub, o) in o.chunks_exact_mut(32).enumerate() {
            let step = d * iq4xs_scale(b, sub) as f32;
            let q = &b[8 + 16 * sub..];
            for (j, x) in o.iter_mut().enumerate() {
                *x = step * iq4_value(q, j) as f32;
            }
        }
    }
}

/// The index of the table value nearest `v` (the lower on a tie; for a
/// NaN, as a zero times an infinite inverse scale gives, index 8, the
/// value nearest zero).
fn nearest(v: f32) -> u8 {
    let mut best = 8;
    for (i, &t) in IQ4_VALUES.iter().enumerate() {
        if (v - t as f32).abs() < (v - IQ4_VALUES[best] as f32).abs() {
            best = i;
        }
    }
    best as u8
}

/// The indices of `x`'s 32 values at `scale` (every value 0 at scale 0:
/// index 8, value 1, decodes to 0 too), packed, and the scale that fits
/// them best by least squares (`scale` itself where none is better).
fn indices(x: &[f32], scale: f32) -> ([u8; 16], f32) {
    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    let index: Vec<u8> = x.iter().map(|&v| nearest(v * inverse)).collect();
    let mut qs = [0u8; 16];
    for j in 0..16 {
        qs[j] = index[j] | index[j + 16] << 4;
    }
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (&v, &i) in x.iter().zip(&index) {
        let q = IQ4_VALUES[i as usize] as f32;
        sumqx += v * q;
        sumq2 += q * q;
    }
    let fitted = if sumq2 > 0.0 && sumqx != 0.0 {
        sumqx / sumq2
    } else {
        scale
    };
    (qs, fitted)
}

/// Encodes 32 values as an iq4_nl block: the value of largest magnitude
/// at the table's first (-127), then the fitted scale.
pub fn iq4_nl_block(x: &[f32], out: &mut Vec<u8>) {
    let (qs, d) = indices(x, signed_max(x) / -127.0);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&qs);
}

/// Encodes 256 values as an iq4_xs block: each sub-block's fitted scale
/// as iq4_nl's, those in 6-bit steps of the largest's 32nd, then each
/// sub-block's indices again at its stepped scale.
pub fn iq4_xs_block(x: &[f32], out: &mut Vec<u8>) {
    let scales: Vec<f32> = x
        .chunks_exact(32)
        .map(|s| indices(s, signed_max(s) / -127.0).1)
        .collect();
    let max = signed_max(&scales);
    let d = f16::from_f32(max / -32.0);
    let inverse = if max != 0.0 { 1.0 / d.to_f32() } else { 0.0 };
    let mut high = 0u16;
    let mut low = [0u8; 4];
    let mut qs = Vec::with_capacity(128);
    for (j, (s, &scale)) in x.chunks_exact(32).zip(&scales).enumerate() {
        let l = ((scale * inverse).round() as i32).clamp(-32, 31);
        let stepped = d.to_f32() * l as f32;
        let inverse = if stepped != 0.0 { 1.0 / stepped } else { 0.0 };
        for j in 0..16 {
            qs.push(nearest(s[j] * inverse) | nearest(s[j + 16] * inverse) << 4);
        }
        let ls = (l + 32) as u16;
        low[j / 2] |= ((ls & 0xF) as u8) << (4 * (j % 2));
        high |= (ls >> 4) << (2 * j);
    }
    out.extend_from_slice(&d.to_le_bytes());
    out.extend_from_slice(&high.to_le_bytes());
    out.extend_from_slice(&low);
    out.extend_from_slice(&qs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seed: u64, n: usize) -> Vec<f32> {
        let mut rng = crate::rng::SplitMix64::new(seed);
        (0..n)
            .map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    #[test]
    fn encoded_blocks_decode_near_their_values() {
        for seed in 0..8 {
            let x = rows(seed, 512);
            let mut nl = Vec::new();
            x.chunks_exact(32).for_each(|b| iq4_nl_block(b, &mut nl));
            let mut xs = Vec::new();
            x.chunks_exact(256).for_each(|b| iq4_xs_block(b, &mut xs));
            assert_eq!((nl.len(), xs.len()), (16 * 18, 2 * 136));
            let (mut a, mut b) = (vec![0.0; 512], vec![0.0; 512]);
            dequantize_iq4nl(&nl, &mut a);
            dequantize_iq4xs(&xs, &mut b);
            for (i, v) in x.iter().enumerate() {
                // The table's widest gap is 24 of its 240 between the
                // ends, a fifth of a block's range of 2: half of it, and
                // a little for the fitted scale.
                assert!((a[i] - v).abs() < 0.16, "iq4_nl {i}: {} for {v}", a[i]);
                assert!((b[i] - v).abs() < 0.16, "iq4_xs {i}: {} for {v}", b[i]);
            }
        }
    }

    #[test]
    fn zero_blocks_decode_to_zero_and_extremes_to_the_table_ends() {
        let mut out = Vec::new();
        iq4_nl_block(&[0.0; 32], &mut out);
        iq4_xs_block(&[0.0; 256], &mut out);
        let mut back = vec![1.0; 32 + 256];
        dequantize_iq4nl(&out[..18], &mut back[..32]);
        dequantize_iq4xs(&out[18..], &mut back[32..]);
        assert!(back.iter().all(|&v| v == 0.0));
        let mut x = vec![0.5f32; 32];
        x[7] = -2.0;
        let mut b = Vec::new();
        iq4_nl_block(&x, &mut b);
        assert_eq!(iq4_index(&b[2..], 7), 0);
        // Sub-block scales span -32..=31 (the largest at -32).
        let mut y = vec![0.01f32; 256];
        y[40] = 4.0;
        let mut c = Vec::new();
        iq4_xs_block(&y, &mut c);
        assert_eq!(iq4xs_scale(&c, 1), -32);
        assert!((0..8).all(|j| (-32..=31).contains(&iq4xs_scale(&c, j))));
    }
}
