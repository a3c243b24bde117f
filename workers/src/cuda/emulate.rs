//! The kernels' index arithmetic replayed on the host, lane by lane, and
//! held against the CPU path: the check, without a GPU, that `quant.cu`
//! reads every block layout as the CPU does. Each function follows its
//! kernel line for line (one warp of 32 lanes, integer group sums exact).
//! `emulate_ops` does the same for `ops.cu`.

use crate::kernels::scalar;
use crate::tensor::GgmlType;
use crate::tensor::blocks::{f16_at, q4k_scale_min};
use crate::tensor::quantize::quantized;

/// `quantize_q8_k` for one 256-value block: (d, q, sums).
fn quantize_q8_k(x: &[f32]) -> (f32, Vec<i8>, Vec<i32>) {
    let lanes: Vec<(f32, usize)> = (0..32)
        .map(|lane| {
            let (mut max, mut at) = (0f32, 1usize << 30);
            for i in 0..8 {
                let v = x[lane * 8 + i];
                if v.abs() > max.abs() {
                    (max, at) = (v, lane * 8 + i);
                }
            }
            (max, at)
        })
        .collect();
    // The butterfly's result is the lane order's best: larger magnitude,
    // then lower index.
    let (max, _) = lanes
        .iter()
        .copied()
        .fold((0f32, 1usize << 30), |(m, a), (v, i)| {
            if v.abs() > m.abs() || (v.abs() == m.abs() && i < a) {
                (v, i)
            } else {
                (m, a)
            }
        });
    if max == 0.0 {
        return (0.0, vec![0; 256], vec![0; 16]);
    }
    let iscale = -127.0 / max;
    let q: Vec<i8> = x
        .iter()
        .map(|v| ((iscale * v).round_ties_even() as i32).min(127) as i8)
        .collect();
    let sums = q
        .chunks(16)
        .map(|s| s.iter().map(|&v| v as i32).sum())
        .collect();
    (1.0 / iscale, q, sums)
}

/// `matvec_kq`'s group of eight lanes on one block of q2_K to q6_K
/// (`bits` 2 to 6): `matvec_q2_k`'s, `matvec_q3_k`'s and so on.
fn k_block(bits: u8, blk: &[u8], a: &[i8], d: f32, sums: &[i32]) -> f32 {
    let (mut sumi, mut summ) = (0i32, 0i32);
    for j in 0..8 {
        if bits == 4 || bits == 5 {
            let (scale, min) = q4k_scale_min(j, &blk[4..16]);
            let q = &blk[if bits == 5 { 48 } else { 16 } + (j / 2) * 32..];
            let shift = (j % 2) * 4;
            let s: i32 = (0..32)
                .map(|l| {
                    let mut v = (q[l] >> shift) & 0xF;
                    if bits == 5 {
                        v |= ((blk[16 + l] >> j) & 1) << 4;
                    }
                    v as i32 * a[j * 32 + l] as i32
                })
                .sum();
            sumi += scale as i32 * s;
            summ += min as i32 * (sums[2 * j] + sums[2 * j + 1]);
            continue;
        }
        let value = |l: usize| -> i32 {
            match bits {
                2 => ((blk[16 + (j / 4) * 32 + l] >> (2 * (j % 4))) & 3) as i32,
                3 => {
                    let low = ((blk[32 + (j / 4) * 32 + l] >> (2 * (j % 4))) & 3) as i32;
                    low - if (blk[l] >> j) & 1 == 1 { 0 } else { 4 }
                }
                _ => {
                    let (half, quarter) = (j / 4, j % 4);
                    let ql = blk[half * 64 + (quarter & 1) * 32 + l];
                    let qh = blk[128 + half * 32 + l];
                    let nibble = if quarter >= 2 { ql >> 4 } else { ql & 0xF } as i32;
                    (nibble | ((((qh >> (2 * quarter)) & 3) as i32) << 4)) - 32
                }
            }
        };
        let (mut lo, mut hi) = (0i32, 0i32);
        for l in 0..32 {
            let p = value(l) * a[j * 32 + l] as i32;
            if l < 16 { lo += p } else { hi += p }
        }
        let q3k_scale = |k: usize| {
            let s = &blk[96..];
            let low = if k < 8 { s[k] & 0xF } else { s[k - 8] >> 4 } as i32;
            let high = ((s[8 + k % 4] >> (2 * (k / 4))) & 3) as i32;
            (low | (high << 4)) - 32
        };
        let (s0, s1) = (2 * j, 2 * j + 1);
        sumi += match bits {
            2 => (blk[s0] & 0xF) as i32 * lo + (blk[s1] & 0xF) as i32 * hi,
            3 => q3k_scale(s0) * lo + q3k_scale(s1) * hi,
            _ => blk[192 + s0] as i8 as i32 * lo + blk[192 + s1] as i8 as i32 * hi,
        };
        if bits == 2 {
            summ += (blk[s0] >> 4) as i32 * sums[s0] + (blk[s1] >> 4) as i32 * sums[s1];
        }
    }
    match bits {
        3 => f16_at(blk, 108) * d * sumi as f32,
        6 => f16_at(blk, 208) * d * sumi as f32,
        _ => {
            let at = if bits == 2 { 80 } else { 0 };
            f16_at(blk, at) * d * sumi as f32 - f16_at(blk, at + 2) * d * summ as f32
        }
    }
}

/// `__byte_perm(x, y, s)`: result byte `i` is byte `s`'s nibble `i`
/// (its low three bits) of `y:x` (x bytes 0..4, y 4..8).
fn byte_perm(x: u32, y: u32, s: u32) -> u32 {
    let bytes = (u64::from(y) << 32 | u64::from(x)).to_le_bytes();
    (0..4).fold(0, |r, i| {
        r | u32::from(bytes[((s >> (4 * i)) & 7) as usize]) << (8 * i)
    })
}

/// `iq4_lookup` (common.cuh): four indices' table values, as in the
/// kernel, its table as the kernel's four words.
fn iq4_lookup(q: u32) -> i32 {
    const WORDS: [u32; 4] = [0xBFAD_9881, 0xF6EA_DDCF, 0x2619_0D01, 0x7159_4535];
    let select = (q & 0x7) | ((q >> 4) & 0x70) | ((q >> 8) & 0x700) | ((q >> 12) & 0x7000);
    let low = byte_perm(WORDS[0], WORDS[1], select);
    let high = byte_perm(WORDS[2], WORDS[3], select);
    let upper = ((q >> 3) & 0x0101_0101) * 0xFF;
    ((high & upper) | (low & !upper)) as i32
}

/// `matvec_kq<4, true>`'s group of eight lanes on one iq4_xs block
/// (`matvec_iq4_xs`).
fn iq4xs_block(blk: &[u8], a: &[i8], d: f32) -> f32 {
    let mut sumi = 0i32;
    for j in 0..8 {
        let q = &blk[8 + 16 * j..];
        let mut s = 0;
        for l in 0..4 {
            let w = word(&q[4 * l..]) as u32;
            s = dp4a(iq4_lookup(w & 0x0F0F_0F0F), act(a, 32 * j + 4 * l), s);
            s = dp4a(
                iq4_lookup((w >> 4) & 0x0F0F_0F0F),
                act(a, 32 * j + 16 + 4 * l),
                s,
            );
        }
        let high = u32::from(blk[2]) | u32::from(blk[3]) << 8;
        let low = u32::from(blk[4 + j / 2] >> (4 * (j % 2))) & 0xF;
        sumi += ((low | ((high >> (2 * j)) & 3) << 4) as i32 - 32) * s;
    }
    f16_at(blk, 0) * d * sumi as f32
}

/// `__dp4a(a, b, c)`: the four signed byte products of `a` and `b`, plus `c`.
fn dp4a(a: i32, b: i32, c: i32) -> i32 {
    let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
    (0..4).fold(c, |s, i| s + a[i] as i8 as i32 * b[i] as i8 as i32)
}

/// `load_i32_b2`, and an aligned load of activation word `i` at `a`.
fn word(p: &[u8]) -> i32 {
    i32::from_le_bytes([p[0], p[1], p[2], p[3]])
}
fn act(a: &[i8], i: usize) -> i32 {
    i32::from_le_bytes([a[i] as u8, a[i + 1] as u8, a[i + 2] as u8, a[i + 3] as u8])
}

/// `matvec_q8_0`'s four lanes on one block: the group's integer sum.
fn q8_0_block(blk: &[u8], a: &[i8]) -> i32 {
    (0..4)
        .map(|part| {
            let q = &blk[2 + part * 8..];
            let s = dp4a(word(q), act(a, part * 8), 0);
            dp4a(word(&q[4..]), act(a, part * 8 + 4), s)
        })
        .sum()
}

/// `fifth_bits`: bits 0..4 of `b` as bit 4 of four bytes.
fn fifth_bits(b: u32) -> i32 {
    (((b & 1) << 4) | ((b & 2) << 11) | ((b & 4) << 18) | ((b & 8) << 25)) as i32
}

/// `matvec_q45`'s two lanes on one block of `ty` (q4_0, q5_0, q4_1, q5_1
/// or iq4_nl): the pair's integer sum.
fn q45_block(ty: GgmlType, blk: &[u8], a: &[i8]) -> i32 {
    let (quants, fifth, offset) = match ty {
        GgmlType::Q4_0 => (2, None, 8),
        GgmlType::Q5_0 => (6, Some(2), 16),
        GgmlType::Q4_1 => (4, None, 0),
        GgmlType::Q5_1 => (8, Some(4), 0),
        GgmlType::IQ4NL => (2, None, 0),
        other => unreachable!("matvec_q45 takes no {other}"),
    };
    (0..2)
        .map(|half| {
            let q = &blk[quants + half * 8..];
            let (w0, w1) = (word(q), word(&q[4..]));
            let mut w = [
                w0 & 0x0F0F_0F0F,
                w1 & 0x0F0F_0F0F,
                (w0 >> 4) & 0x0F0F_0F0F,
                (w1 >> 4) & 0x0F0F_0F0F,
            ];
            if let Some(fifth) = fifth {
                let (qh, v) = (word(&blk[fifth..]) as u32, half * 8);
                for (w, shift) in w.iter_mut().zip([v, v + 4, v + 16, v + 20]) {
                    *w |= fifth_bits(qh >> shift);
                }
            }
            if ty == GgmlType::IQ4NL {
                w = w.map(|w| iq4_lookup(w as u32));
            }
            let at = [half * 8, half * 8 + 4, 16 + half * 8, 20 + half * 8];
            let s = (0..4).fold(0, |s, k| dp4a(w[k], act(a, at[k]), s));
            if offset == 0 {
                return s;
            }
            let total = (0..4).fold(0, |t, k| dp4a(0x0101_0101, act(a, at[k]), t));
            s - offset * total
        })
        .sum()
}

/// `quantize_q8_1` for one 32-value block: (d, q, s), the scales as the
/// f32 of their f16.
fn quantize_q8_1(x: &[f32]) -> (f32, Vec<i8>, f32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (scale, inverse) = (amax / 127.0, if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let q: Vec<i8> = x
        .iter()
        .map(|v| (v * inverse).round_ties_even() as i32 as i8)
        .collect();
    let sum: i32 = q.iter().map(|&v| v as i32).sum();
    let f16 = |v: f32| half::f16::from_f32(v).to_f32();
    (f16(scale), q, f16(scale * sum as f32))
}

/// The Q8_K activation block as the CPU encodes it, in the kernel's parts.
fn q8k_parts(bytes: &[u8]) -> (f32, Vec<i8>, Vec<i32>) {
    let d = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let q = bytes[4..260].iter().map(|&b| b as i8).collect();
    let sums = (0..16).map(|j| i16::from_le_bytes([bytes[260 + 2 * j], bytes[261 + 2 * j]]) as i32);
    (d, q, sums.collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    #[test]
    fn q8_k_encoding_matches_the_cpu_including_ties() {
        let mut cases: Vec<Vec<f32>> = (0..20).map(|s| values(s, 256)).collect();
        let mut tie = vec![0.25f32; 256];
        (tie[3], tie[200]) = (-0.9, 0.9);
        cases.extend([tie, vec![0.0; 256]]);
        for x in cases {
            assert_eq!(quantize_q8_k(&x), q8k_parts(&quantized(GgmlType::Q8K, &x)));
        }
    }

    #[test]
    fn q8_1_encoding_matches_the_cpu() {
        let mut cases: Vec<Vec<f32>> = (0..40).map(|s| values(s, 32)).collect();
        cases.extend([vec![0.0; 32], vec![-1.0; 32], vec![1.0; 32]]);
        for x in cases {
            let b = quantized(GgmlType::Q8_1, &x);
            let cpu = (
                f16_at(&b, 0),
                b[4..].iter().map(|&v| v as i8).collect(),
                f16_at(&b, 2),
            );
            assert_eq!(quantize_q8_1(&x), cpu);
        }
    }

    #[test]
    fn q8_0_q4_0_q5_0_q4_1_q5_1_and_iq4_nl_blocks_read_as_the_cpu_reads_them() {
        let mut cases: Vec<(Vec<f32>, Vec<f32>)> = (0..40)
            .map(|s| (values(s, 32), values(s + 100, 32)))
            .collect();
        // Extremes: every nibble 0 or 15 (every fifth bit 0 or 1),
        // activations at +-127.
        cases.push((vec![-1.0; 32], vec![1.0; 32]));
        cases.push((
            (0..32).map(|i| [1.0, -1.0][i % 2]).collect(),
            vec![-1.0; 32],
        ));
        for (w, x) in cases {
            for ty in [
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q5_0,
                GgmlType::Q4_1,
                GgmlType::Q5_1,
                GgmlType::IQ4NL,
            ] {
                let acts = quantized(ty.activation_type(), &x);
                let (d, a, s) = quantize_q8_1(&x);
                let blk = quantized(ty, &w);
                let scaled = |sum: i32| sum as f32 * (f16_at(&blk, 0) * d);
                let (got, want) = match ty {
                    GgmlType::Q8_0 => (scaled(q8_0_block(&blk, &a)), scalar::dot_q8_0(&blk, &acts)),
                    GgmlType::Q4_0 => (
                        scaled(q45_block(ty, &blk, &a)),
                        scalar::dot_q4_0(&blk, &acts),
                    ),
                    GgmlType::Q5_0 => (
                        scaled(q45_block(ty, &blk, &a)),
                        scalar::dot_q5_0(&blk, &acts),
                    ),
                    GgmlType::Q4_1 => (
                        scaled(q45_block(ty, &blk, &a)) + f16_at(&blk, 2) * s,
                        scalar::dot_q4_1(&blk, &acts),
                    ),
                    GgmlType::Q5_1 => (
                        scaled(q45_block(ty, &blk, &a)) + f16_at(&blk, 2) * s,
                        scalar::dot_q5_1(&blk, &acts),
                    ),
                    GgmlType::IQ4NL => (
                        scaled(q45_block(ty, &blk, &a)),
                        scalar::dot_iq4nl(&blk, &acts),
                    ),
                    other => unreachable!("no {other} case"),
                };
                assert_eq!(got.to_bits(), want.to_bits(), "{ty}");
            }
        }
    }

    #[test]
    fn k_quant_blocks_read_as_the_cpu_reads_them() {
        for seed in 0..20 {
            let (w, x) = (values(seed, 256), values(seed + 100, 256));
            let acts = quantized(GgmlType::Q8K, &x);
            let (d, q, sums) = q8k_parts(&acts);
            for (bits, ty, dot) in [
                (4, GgmlType::Q4K, scalar::dot_q4k as fn(&[u8], &[u8]) -> f32),
                (5, GgmlType::Q5K, scalar::dot_q5k),
                (2, GgmlType::Q2K, scalar::dot_q2k),
            ] {
                let blk = quantized(ty, &w);
                assert_eq!(
                    k_block(bits, &blk, &q, d, &sums).to_bits(),
                    dot(&blk, &acts).to_bits(),
                    "{ty}"
                );
            }
            // A q2_K block of random bytes but its scales.
            let mut random = SplitMix64::new(seed + 1000);
            let mut raw: Vec<u8> = (0..84).map(|_| random.next_u64() as u8).collect();
            raw[80..82].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            raw[82..].copy_from_slice(&half::f16::from_f32(0.02).to_le_bytes());
            assert_eq!(
                k_block(2, &raw, &q, d, &sums).to_bits(),
                scalar::dot_q2k(&raw, &acts).to_bits()
            );
            let q6k = quantized(GgmlType::Q6K, &w);
            assert_eq!(
                k_block(6, &q6k, &q, d, &sums).to_bits(),
                scalar::dot_q6k(&q6k, &acts).to_bits()
            );
            // The encoder's block, and one of random bytes (negative
            // scales, every high bit pattern) with a finite scale.
            let mut random = SplitMix64::new(seed);
            let mut raw: Vec<u8> = (0..110).map(|_| random.next_u64() as u8).collect();
            raw[108..].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            for q3k in [quantized(GgmlType::Q3K, &w), raw] {
                assert_eq!(
                    k_block(3, &q3k, &q, d, &sums).to_bits(),
                    scalar::dot_q3k(&q3k, &acts).to_bits()
                );
            }
            // iq4_xs: the encoder's block, and random bytes (every index
            // and every scale) with a finite scale.
            let mut raw: Vec<u8> = (0..136).map(|_| random.next_u64() as u8).collect();
            raw[..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            for xs in [quantized(GgmlType::IQ4XS, &w), raw] {
                assert_eq!(
                    iq4xs_block(&xs, &q, d).to_bits(),
                    scalar::dot_iq4xs(&xs, &acts).to_bits()
                );
            }
        }
    }
}

#[cfg(test)]
mod lookup_tests {
    use super::*;
    use crate::tensor::iq4::IQ4_VALUES;

    #[test]
    fn the_kernels_table_lookup_gives_every_value_in_every_byte() {
        for i in 0..16u32 {
            for other in [0u32, 7, 8, 15] {
                for at in 0..4 {
                    let mut q = [other; 4];
                    q[at] = i;
                    let word = q[0] | q[1] << 8 | q[2] << 16 | q[3] << 24;
                    let got = iq4_lookup(word).to_le_bytes().map(|b| b as i8);
                    let want = q.map(|v| IQ4_VALUES[v as usize]);
                    assert_eq!(got, want, "indices {q:?}");
                }
            }
        }
    }
}
