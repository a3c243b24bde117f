//! `ops.cu`'s exponentials and per-thread sums replayed on the host and
//! held bit for bit against `model::ops`: the check, without a GPU, that
//! the device computes the CPU's formulas in the CPU's order (the block
//! reductions' other orders aside: RMSNorm's sum of squares).

/// `ops.cu`'s `v_expf`.
fn v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000);
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),
        (-n).mul_add(f32::from_bits(0x3f31_7200), x),
    );
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let inner = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)),
        );
    let j = inner.mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0));
    let whole = n as i32; // CUDA's conversion: NaN to 0, as Rust's
    (j as f64 * f64::from_bits(((whole as i64 + 1023) as u64) << 52)) as f32
}

/// `ops.cu`'s `EXPF_TABLE`.
const EXPF_TABLE: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `ops.cu`'s `libm_expf`.
fn libm_expf(x: f32) -> f32 {
    let ix = x.to_bits();
    let abstop = (ix >> 20) & 0x7ff;
    if abstop >= 0x42b {
        if ix == 0xff80_0000 {
            return 0.0;
        }
        if abstop >= 0x7f8 {
            return x + x;
        }
        if x > f32::from_bits(0x42b1_7217) {
            return f32::INFINITY;
        }
        if x < -f32::from_bits(0x42cf_f1b4) {
            return 0.0;
        }
    }
    let inv_ln2_n = f64::from_bits(0x3ff7_1547_652b_82fe) * 32.0;
    let shift = f64::from_bits(0x4338_0000_0000_0000);
    let c0 = f64::from_bits(0x3fac_6af8_4b91_2394) / 32.0 / 32.0 / 32.0;
    let c1 = f64::from_bits(0x3fce_bfce_50fa_c4f3) / 32.0 / 32.0;
    let c2 = f64::from_bits(0x3fe6_2e42_ff0c_52d6) / 32.0;
    let xd = x as f64;
    let mut kd = inv_ln2_n.mul_add(xd, shift);
    let ki = kd.to_bits();
    kd -= shift;
    let r = inv_ln2_n.mul_add(xd, -kd);
    let s = f64::from_bits(EXPF_TABLE[(ki % 32) as usize].wrapping_add(ki << 47));
    let z = c0.mul_add(r, c1);
    let y = z.mul_add(r * r, c2.mul_add(r, 1.0));
    (y * s) as f32
}

/// `ops.cu`'s `reduce16`.
fn reduce16(v: &[f32]) -> f32 {
    let a: Vec<f32> = (0..8).map(|i| v[i + 8] + v[i]).collect();
    let (b0, b1, b2, b3) = (a[4] + a[0], a[5] + a[1], a[6] + a[2], a[7] + a[3]);
    (b0 + b2) + (b1 + b3)
}

/// `ops.cu`'s `reduce64`.
fn reduce64(v: &[f32]) -> f32 {
    let x: Vec<f32> = (0..16)
        .map(|l| (v[l] + v[32 + l]) + (v[16 + l] + v[48 + l]))
        .collect();
    reduce16(&x)
}

/// `ops.cu`'s `dot64`.
fn dot64(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 64];
    let whole = a.len() / 64 * 64;
    for i in (0..whole).step_by(64) {
        for l in 0..64 {
            lanes[l] = a[i + l].mul_add(b[i + l], lanes[l]);
        }
    }
    let mut sum = reduce64(&lanes);
    for i in whole..a.len() {
        sum += a[i] * b[i];
    }
    sum
}

/// The `swiglu` kernel, thread by thread.
fn swiglu(gate: &mut [f32], up: &[f32]) {
    let total = gate.len();
    for (i, (g, &u)) in gate.iter_mut().zip(up).enumerate() {
        let e = if i < total / 16 * 16 {
            v_expf(0.0 - *g)
        } else {
            libm_expf(-*g)
        };
        *g = *g / (1.0 + e) * u;
    }
}

/// The `attention` kernel's softmax of one block's scores: the exps, the
/// groups' sums THREADS at a time, thread 0's double, the scaling.
fn softmax(s: &mut [f32]) {
    let max = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in s.iter_mut() {
        *v = v_expf(*v - max);
    }
    let groups = s.len().div_ceil(16);
    let mut total = 0f64;
    for g0 in (0..groups).step_by(super::launch::REDUCE_THREADS as usize) {
        let n = (super::launch::REDUCE_THREADS as usize).min(groups - g0);
        let scratch: Vec<f32> = (g0..g0 + n)
            .map(|g| {
                let mut lanes = [0f32; 16];
                let group = &s[16 * g..(16 * g + 16).min(s.len())];
                lanes[..group.len()].copy_from_slice(group);
                reduce16(&lanes)
            })
            .collect();
        for v in scratch {
            total += v as f64;
        }
    }
    let inverse = (1.0 / total) as f32;
    for v in s.iter_mut() {
        *v *= inverse;
    }
}

/// The `attention` kernel's block for one query head over `len` positions
/// (keys and values of position j at `j * stride + offset`), for token `t`
/// of `n` computed together.
fn attend(
    q: &[f32],
    kv: (&[f32], &[f32]),
    (stride, offset, len): (usize, usize, usize),
    (n, t): (usize, usize),
) -> Vec<f32> {
    let piece = t / 512 * 512;
    let batch = n.min(piece + 512) - piece > 1;
    let (hd, scale) = (q.len(), 1.0 / (q.len() as f32).sqrt());
    let at = |j: usize| j * stride + offset..j * stride + offset + hd;
    let mut s: Vec<f32> = (0..len).map(|j| dot64(&kv.0[at(j)], q) * scale).collect();
    softmax(&mut s);
    let slots = if batch { 16 } else { 64 };
    (0..hd)
        .map(|d| {
            let lanes: Vec<f32> = (0..slots)
                .map(|k| {
                    (k..len)
                        .step_by(slots)
                        .fold(0f32, |acc, j| kv.1[at(j)][d].mul_add(s[j], acc))
                })
                .collect();
            if batch {
                reduce16(&lanes)
            } else {
                reduce64(&lanes)
            }
        })
        .collect()
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

    /// Every 997th f32 (both signs, every exponent) within `range`, and
    /// the edges the kernels meet.
    fn sweep(range: std::ops::RangeInclusive<f32>) -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=u32::MAX / 997)
            .map(|i| f32::from_bits(i * 997))
            .filter(|x| range.contains(x))
            .collect();
        let edges = [
            0.0, -0.0, 1e-30, -1e-30, 87.3, -87.3, 88.0, -88.0, 88.72, 88.73, -103.0,
        ];
        xs.extend(
            edges
                .iter()
                .chain(&[-103.3, -103.98, -104.0, -126.0, -150.0, 100.0]),
        );
        xs.extend(edges.iter().map(|e| range.start().max(range.end().min(*e))));
        xs
    }

    #[test]
    fn the_device_v_expf_is_the_cpus() {
        for x in sweep(-200.0..=200.0) {
            let cpu = crate::model::ops::v_expf(x);
            assert_eq!(v_expf(x).to_bits(), cpu.to_bits(), "v_expf({x:e})");
        }
    }

    #[test]
    fn the_device_libm_expf_is_rusts_f32_exp() {
        let mut xs = sweep(f32::MIN..=f32::MAX);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, 0.5, -2.5]);
        // glibc's FMA build and its SSE2 one differ at these two; x86-64
        // machines with FMA and AVX2 (the GPU machine's) run the former.
        #[cfg(target_arch = "x86_64")]
        let fma = is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let fma = true;
        if fma {
            xs.extend([f32::from_bits(0x4202_422f), f32::from_bits(0xc27c_65d9)]);
        }
        for x in xs {
            assert_eq!(libm_expf(x).to_bits(), x.exp().to_bits(), "expf({x:e})");
        }
    }

    /// `n` values in [-scale, scale], with a few of the edges mixed in.
    fn spread(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        let mut v: Vec<f32> = values(seed, n).iter().map(|x| x * scale).collect();
        let edges = [0.0, -0.0, 90.0, -90.0, 104.0, -104.0, 1e-20];
        for (i, e) in edges.iter().enumerate() {
            if i * 7 < n && seed.is_multiple_of(3) {
                v[i * 7] = *e;
            }
        }
        v
    }

    #[test]
    fn the_device_swiglu_is_the_cpus_tail_included() {
        for n in (1..=41).chain([172, 173, 768 * 3 + 5, 4096 + 7]) {
            for seed in 0..4 {
                let (gate, up) = (spread(seed, n, 12.0), spread(seed + 50, n, 2.0));
                let (mut cpu, mut gpu) = (gate.clone(), gate);
                crate::model::ops::swiglu(&mut cpu, &up);
                swiglu(&mut gpu, &up);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&gpu), bits(&cpu), "n {n} seed {seed}");
            }
        }
    }

    #[test]
    fn the_device_dot_and_softmax_are_the_cpus() {
        for n in (1..=70).chain([128, 255, 2047, 2049, 2100, 4999]) {
            for (seed, scale) in [(1, 1.0), (2, 30.0), (3, 1e4)] {
                let (a, b) = (spread(seed, n, scale), spread(seed + 9, n, 1.0));
                let cpu = crate::model::ops::dot(&a, &b);
                assert_eq!(dot64(&a, &b).to_bits(), cpu.to_bits(), "dot n {n}");
                let (mut cpu, mut gpu) = (a.clone(), a);
                crate::model::ops::softmax(&mut cpu);
                softmax(&mut gpu);
                for (j, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        c.to_bits(),
                        "softmax n {n} scale {scale} at {j}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_device_attention_block_is_the_cpus_attend() {
        for (hd, len) in [(8, 1), (12, 5), (64, 33), (67, 9), (16, 2100), (6, 300)] {
            let (kv_heads, stride) = (2, 2 * hd);
            let keys = spread(hd as u64, len * stride, 3.0);
            let values = spread(hd as u64 + 1, len * stride, 1.0);
            let q = spread(hd as u64 + 2, hd, 3.0);
            // Alone, in a batch, and alone or not at the edge of a piece.
            let tokens = [(1, 0), (2, 1), (513, 512), (513, 511), (1025, 1024)];
            for (kv, (n, t)) in (0..kv_heads).flat_map(|kv| tokens.map(|nt| (kv, nt))) {
                let batch = crate::model::ops::in_batch(n, t);
                let mut cpu = vec![0f32; hd];
                let scale = 1.0 / (hd as f32).sqrt();
                let (k, v, lanes) = (&keys, &values, &mut Vec::new());
                let at = kv * hd;
                crate::model::ops::attend(&q, k, v, stride, at, len, scale, batch, lanes, &mut cpu);
                let gpu = attend(&q, (k, v), (stride, at, len), (n, t));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&gpu),
                    bits(&cpu),
                    "head_dim {hd} len {len} batch {batch}"
                );
            }
        }
    }
}
