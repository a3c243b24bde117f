//! Dot products on encoded blocks: the detected SIMD kernels against the
//! portable ones, and both against the dot product of the decoded rows.

mod common;

use common::{kernel_sets, matrix, matrix_bytes, row};
use workers::kernels::Kernels;
use workers::model::{RopeLayout, ops};
use workers::rng::SplitMix64;
use workers::tensor::GgmlType;
use workers::tensor::blocks::dequantize_row;
use workers::tensor::quantize::quantized;

const WEIGHT_TYPES: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::IQ4NL,
    GgmlType::IQ4XS,
];

fn decoded(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    dequantize_row(ty, &quantized(ty, x), &mut out);
    out
}

#[test]
fn every_kernel_equals_the_dot_product_of_its_decoded_rows() {
    let mut rng = SplitMix64::new(11);
    for kernels in kernel_sets() {
        for ty in WEIGHT_TYPES {
            // An odd count of 32-value blocks too (iq4_nl's one-row kernel
            // takes them in pairs).
            for n in [256usize, 512, 4096, 288] {
                if n % ty.block_elements() as usize != 0 {
                    continue;
                }
                let w = row(&mut rng, n, 1.0);
                let a = row(&mut rng, n, 3.0);
                let (wq, aq) = (quantized(ty, &w), quantized(ty.activation_type(), &a));
                let got = kernels.dot(ty)(&wq, &aq);
                let wd = decoded(ty, &w);
                let ad = decoded(ty.activation_type(), &a);
                let want: f64 = wd.iter().zip(&ad).map(|(x, y)| *x as f64 * *y as f64).sum();
                let tol = 1e-4
                    * wd.iter()
                        .zip(&ad)
                        .map(|(x, y)| (x * y).abs() as f64)
                        .sum::<f64>()
                    + mins_rounding(ty, &wq, &aq);
                assert!(
                    (got as f64 - want).abs() <= tol,
                    "{} {ty} n={n}: {got} vs {want}",
                    kernels.name
                );
            }
        }
    }
}

/// How far q4_1's and q5_1's products may be from the decoded rows' on
/// top of the rest: a q8_1 block's `s`, its scale times its sum, is made
/// from the scale before it was rounded to f16, then rounded to f16
/// itself, so each block's `min · s` may be off by twice f16's rounding
/// (2^-11 each) of itself.
fn mins_rounding(ty: GgmlType, w: &[u8], a: &[u8]) -> f64 {
    use workers::tensor::blocks::f16_at;
    if ty.activation_type() != GgmlType::Q8_1 {
        return 0.0;
    }
    let size = ty.block_bytes() as usize;
    w.chunks_exact(size)
        .zip(a.chunks_exact(36))
        .map(|(x, y)| (f16_at(x, 2) * f16_at(y, 2)).abs() as f64 * 2.0 * 2f64.powi(-11))
        .sum()
}

#[test]
fn quantized_rows_decode_close_to_their_values() {
    let mut rng = SplitMix64::new(5);
    let x = row(&mut rng, 1024, 2.0);
    for (ty, rel) in [
        (GgmlType::F16, 1e-3),
        (GgmlType::BF16, 1e-2),
        (GgmlType::Q8_0, 1e-2),
        (GgmlType::Q8K, 1e-2),
        (GgmlType::Q6K, 4e-2),
        (GgmlType::Q5_0, 0.08),
        (GgmlType::Q5_1, 0.08),
        (GgmlType::Q5K, 0.08),
        (GgmlType::Q4_0, 0.15),
        (GgmlType::Q4_1, 0.15),
        (GgmlType::Q3K, 0.2),
        (GgmlType::Q2K, 0.35),
        (GgmlType::Q4K, 0.15),
        (GgmlType::IQ4NL, 0.15),
        (GgmlType::IQ4XS, 0.15),
    ] {
        let d = decoded(ty, &x);
        let err: f32 = x.iter().zip(&d).map(|(a, b)| (a - b).abs()).sum::<f32>() / x.len() as f32;
        let mean: f32 = x.iter().map(|a| a.abs()).sum::<f32>() / x.len() as f32;
        assert!(err / mean < rel, "{ty}: mean error {}", err / mean);
    }
}

#[test]
fn q8_0_activations_round_half_to_even_like_ggml() {
    // amax 127 makes the scale exactly 1, so 2.5 lands on a tie.
    let mut x = vec![0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -3.5;
    let q = quantized(GgmlType::Q8_0, &x);
    assert_eq!(q[2 + 1] as i8, 2);
    assert_eq!(q[2 + 2] as i8, -4);
}

/// Columns for `ty`: whole blocks, and for the float types a count that
/// leaves both a partial SIMD step and a scalar tail.
fn cols_for(ty: GgmlType) -> usize {
    match ty.block_elements() {
        1 => 16 * 32 + 8 + 3,
        b => 2 * b as usize,
    }
}

#[test]
fn a_batched_product_equals_one_row_at_a_time_bit_for_bit() {
    use workers::kernels::{Encoded, matmul};
    let mut rng = SplitMix64::new(3);
    for kernels in kernel_sets() {
        for ty in WEIGHT_TYPES {
            // Row and token counts on and off every tile's edges, products
            // small enough for the calling thread and large enough for the
            // pool, and a batch large enough to be encoded on the pool.
            for (rows, n) in [
                (96, 7),
                (1, 2),
                (5, 3),
                (7, 5),
                (14, 4),
                (103, 9),
                (258, 13),
                (37, 41),
            ] {
                let cols = cols_for(ty);
                let data = matrix_bytes(&mut rng, ty, rows, cols);
                let m = matrix(ty, rows, cols, &data);
                let x = row(&mut rng, n * cols, 2.0);
                let mut batched = vec![0f32; n * rows];
                matmul(&kernels, &m, &Encoded::new(ty, &x, cols), &mut batched);
                for t in 0..n {
                    let mut one = vec![0f32; rows];
                    let xt = &x[t * cols..(t + 1) * cols];
                    matmul(&kernels, &m, &Encoded::new(ty, xt, cols), &mut one);
                    let same = one
                        .iter()
                        .zip(&batched[t * rows..])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{} {ty} rows {rows} batch {n}: token {t} differs from the token alone",
                        kernels.name
                    );
                }
            }
        }
    }
}

#[test]
fn a_batched_product_is_close_to_the_portable_one() {
    use workers::kernels::{Encoded, matmul};
    let mut rng = SplitMix64::new(8);
    for ty in WEIGHT_TYPES {
        let (rows, n, cols) = (37, 11, cols_for(ty));
        let data = matrix_bytes(&mut rng, ty, rows, cols);
        let m = matrix(ty, rows, cols, &data);
        let x = row(&mut rng, n * cols, 2.0);
        let encoded = Encoded::new(ty, &x, cols);
        let mut portable = vec![0f32; n * rows];
        matmul(&Kernels::portable(), &m, &encoded, &mut portable);
        for kernels in kernel_sets() {
            let mut fast = vec![0f32; n * rows];
            matmul(&kernels, &m, &encoded, &mut fast);
            let what = format!("{} {ty} against the portable kernel", kernels.name);
            common::assert_close(&fast, &portable, &what);
        }
    }
}

#[test]
fn every_kernel_set_attends_and_gates_with_the_same_bits() {
    let mut rng = SplitMix64::new(21);
    // Heads narrower than 64, of whole groups of 64 and with a tail;
    // positions fewer and more than 16 and 64 lanes; one query head a KV
    // head and several.
    let cases = [(24, 72, 24), (20, 60, 40), (128, 384, 128), (136, 408, 136)];
    for (((hd, stride, offset), len), heads) in cases
        .into_iter()
        .flat_map(|c| [1usize, 2, 3, 5, 8, 13, 130].map(|len| (c, len)))
        .flat_map(|c| [1usize, 3, 4, 6].map(|heads| (c, heads)))
    {
        let q = row(&mut rng, heads * hd, 1.0);
        let keys = row(&mut rng, len * stride, 1.0);
        let values = row(&mut rng, len * stride, 1.0);
        // Each head alone through the one-head reference, in a batch's
        // order and in one token's.
        for batch in [false, true] {
            let mut want = vec![0f32; heads * hd];
            let mut lanes = Vec::new();
            for (q, out) in q.chunks_exact(hd).zip(want.chunks_exact_mut(hd)) {
                let (v, k) = (&values, &keys);
                ops::attend(q, k, v, stride, offset, len, 0.3, batch, &mut lanes, out);
            }
            for kernels in kernel_sets() {
                let mut got = vec![0f32; heads * hd];
                let (v, k) = (&values, &keys);
                (kernels.attend)(&q, hd, k, v, stride, offset, len, 0.3, batch, &mut got);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{} attention of {heads} {hd}-wide heads over {len} positions, batch {batch}",
                    kernels.name
                );
            }
        }
    }
    // 16 * 2 + 11 values: whole groups of 16 with v_expf, then a tail.
    let gate = row(&mut rng, 43, 6.0);
    let up = row(&mut rng, 43, 2.0);
    let mut want = gate.clone();
    (Kernels::portable().swiglu)(&mut want, &up);
    for kernels in kernel_sets() {
        let mut got = gate.clone();
        (kernels.swiglu)(&mut got, &up);
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{} swiglu", kernels.name);
    }
    // Rope over all of each 32-wide head and over half of it, both layouts.
    let x = row(&mut rng, 4 * 32, 3.0);
    for (dims, layout, pos) in [(32, RopeLayout::Adjacent, 7), (16, RopeLayout::Neox, 300)] {
        let mut want = x.clone();
        (Kernels::portable().rope)(&mut want, 32, dims, 10000.0, layout, pos);
        assert_ne!(want, x, "rope moved nothing");
        for kernels in kernel_sets() {
            let mut got = x.clone();
            (kernels.rope)(&mut got, 32, dims, 10000.0, layout, pos);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{} rope over {dims} dimensions", kernels.name);
        }
    }
}

#[test]
fn products_sharing_activations_equal_each_product_alone() {
    use workers::kernels::{Encoded, Matrix};
    let mut rng = SplitMix64::new(34);
    // q4_K (or q5_K) and q6_K share q8_K activations, as Q, K and V of a
    // q4_K_M (q5_K_M) model; one token, a batch, and a batch large enough
    // for q5_K's unpacked rows.
    let rows = [23, 9, 40];
    let cols = 512;
    for (kernels, base) in kernel_sets()
        .into_iter()
        .flat_map(|k| [(k, GgmlType::Q4K), (k, GgmlType::Q5K)])
    {
        let types = [base, GgmlType::Q6K, base];
        for n in [1, 6, 9] {
            let data: Vec<Vec<u8>> = types
                .iter()
                .zip(rows)
                .map(|(&ty, r)| matrix_bytes(&mut rng, ty, r, cols))
                .collect();
            let ms: Vec<Matrix> = (0..3)
                .map(|i| Matrix {
                    ty: types[i],
                    rows: rows[i],
                    cols,
                    data: &data[i],
                    packed: false,
                })
                .collect();
            let x = row(&mut rng, n * cols, 2.0);
            let encoded = Encoded::new(base, &x, cols);
            common::assert_shared_equals_alone(&kernels, &ms, &encoded, n);
        }
    }
}

#[test]
fn decoding_long_rows_equals_the_one_row_kernel_and_the_batch_bit_for_bit() {
    let mut rng = SplitMix64::new(55);
    for kernels in kernel_sets() {
        for ty in [
            GgmlType::F16,
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q2K,
            GgmlType::Q3K,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
        ] {
            // Whole chunks of eight blocks and remainders (the q0 decode
            // kernels' scales are converted eight blocks at a time), and
            // row counts on and off the decode kernels' edges (three rows a
            // call for q8_0 and q4_0 in 256 bits, four in 512, one for f16,
            // two for the k-quants).
            for (rows, blocks) in [
                (1, 8),
                (3, 19),
                (4, 16),
                (5, 1),
                (9, 27),
                (37, 9),
                (258, 28),
            ] {
                // f16: 16-value steps, then an 8-value step and a tail,
                // either alone, or neither; five tokens, one past the
                // 512-bit tile's four.
                let (ends, n): (&[usize], _) = match ty {
                    GgmlType::F16 => (&[11, 8, 3, 0], 5),
                    _ => (&[0], 3),
                };
                for &end in ends {
                    let cols = match ty.block_elements() as usize {
                        1 => 16 * blocks + end,
                        b => b * blocks,
                    };
                    let data = matrix_bytes(&mut rng, ty, rows, cols);
                    let m = matrix(ty, rows, cols, &data);
                    let x = row(&mut rng, n * cols, 2.0);
                    let dot = kernels.dot(ty);
                    let want = |r: usize, a: &[u8]| dot(m.row(r), a);
                    let what = format!("{ty} rows {rows} cols {cols}");
                    common::assert_alone_and_batched(&kernels, &m, &x, n, want, &what);
                }
            }
        }
    }
}

#[test]
fn each_kernel_set_names_its_instructions_and_tuning() {
    // What `bench` and a stage's description print: two sets that differ
    // only in their maker's tuning are told apart.
    use workers::kernels::avx2::{Tuning, kernels_avx_vnni_for, kernels_for, kernels_vnni_for};
    let names: Vec<&str> = kernel_sets().iter().map(|k| k.name).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        names.len(),
        "kernel set names repeat: {names:?}"
    );
    for (set, simd) in [
        ("avx2", kernels_for as fn(Tuning) -> _),
        ("avx2+avx-vnni", kernels_avx_vnni_for),
        ("avx2+vnni", kernels_vnni_for),
    ] {
        if let (Some(amd), Some(zen5), Some(other)) =
            (simd(Tuning::Amd), simd(Tuning::Zen5), simd(Tuning::Other))
        {
            assert_eq!(amd.name, format!("{set}, amd"));
            assert_eq!(zen5.name, format!("{set}, zen 5"));
            assert_eq!(other.name, set);
        }
    }
}
