//! drover-worker's SIMD products against llama.cpp's float order, bit for
//! bit: each kernel set's one-row kernels, decode kernels and tiles against
//! a plain replay of the steps llama.cpp's x86 kernels take.

mod common;

use common::{kernel_sets, matrix, matrix_bytes, row};
use workers::kernels::Kernels;
use workers::rng::SplitMix64;
use workers::tensor::GgmlType;

/// One q8_0 row against one q8_0 activation row as llama.cpp sums it on
/// x86 (llamafile's tinyBLAS, for a batch and for one token alike): each
/// block's eight groups of four products in eight float lanes, each lane
/// `fma(dx * dy, group, lane)` block after block, then the lanes added
/// pairwise (4 apart, then 2, then 1).
fn q8_0_in_eight_lanes(w: &[u8], a: &[u8]) -> f32 {
    use workers::tensor::blocks::f16_at;
    let mut lanes = [0f32; 8];
    for (x, y) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
        let d = f16_at(x, 0) * f16_at(y, 0);
        for (j, lane) in lanes.iter_mut().enumerate() {
            let group: i32 = (2 + 4 * j..6 + 4 * j)
                .map(|i| x[i] as i8 as i32 * y[i] as i8 as i32)
                .sum();
            *lane = d.mul_add(group as f32, *lane);
        }
    }
    let l = lanes;
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

#[test]
fn q8_0_products_on_every_simd_set_sum_as_llama_cpp_does_bit_for_bit() {
    let mut rng = SplitMix64::new(17);
    let simd: Vec<Kernels> = kernel_sets()
        .into_iter()
        .filter(|k| k.name != "portable")
        .collect();
    #[cfg(target_arch = "x86_64")]
    assert!(
        !std::is_x86_feature_detected!("avx2") || !simd.is_empty(),
        "an AVX2 processor without a SIMD kernel set"
    );
    for kernels in &simd {
        // Row counts that whole groups of eight would have packed, and
        // others; one token and batches on and off the tiles' edges.
        for (rows, blocks, n) in [
            (8, 1, 1),
            (16, 40, 4),
            (40, 9, 7),
            (264, 28, 13),
            (37, 5, 3),
        ] {
            assert!(!kernels.packs(GgmlType::Q8_0, rows), "{}", kernels.name);
            let cols = 32 * blocks;
            let data = matrix_bytes(&mut rng, GgmlType::Q8_0, rows, cols);
            let m = matrix(GgmlType::Q8_0, rows, cols, &data);
            let x = row(&mut rng, n * cols, 2.0);
            let row_bytes = data.len() / rows;
            let want = |r: usize, a: &[u8]| {
                q8_0_in_eight_lanes(&data[r * row_bytes..(r + 1) * row_bytes], a)
            };
            let what = format!("q8_0 rows {rows} blocks {blocks}");
            common::assert_alone_and_batched(kernels, &m, &x, n, want, &what);
        }
    }
}

/// One q4_1 or q5_1 row against one q8_1 activation row as llama.cpp sums
/// it on x86 (`ggml_vec_dot_q4_1_q8_1`, `_q5_1_`): the block's values
/// 0..32 as bytes, each group of four products in a float lane, each lane
/// `fma(dx * dy, group, lane)` block after block, the lanes added as
/// [`q8_0_in_eight_lanes`] adds them, and last the weights' mins times the
/// activations' scaled sums, fused into one float block after block.
fn q_1_in_eight_lanes(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    use workers::tensor::blocks::{f16_at, q4_1_value, q5_1_value};
    let size = ty.block_bytes() as usize;
    let mut lanes = [0f32; 8];
    let mut mins = 0f32;
    for (x, y) in w.chunks_exact(size).zip(a.chunks_exact(36)) {
        mins = f16_at(x, 2).mul_add(f16_at(y, 2), mins);
        let d = f16_at(x, 0) * f16_at(y, 0);
        let value = |i| match ty {
            GgmlType::Q4_1 => q4_1_value(x, i),
            _ => q5_1_value(x, i),
        };
        for (j, lane) in lanes.iter_mut().enumerate() {
            let group: i32 = (4 * j..4 * j + 4)
                .map(|i| value(i) as i32 * y[4 + i] as i8 as i32)
                .sum();
            *lane = d.mul_add(group as f32, *lane);
        }
    }
    let l = lanes;
    (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) + mins
}

#[test]
fn q4_1_and_q5_1_products_on_every_simd_set_sum_as_llama_cpp_does_bit_for_bit() {
    let mut rng = SplitMix64::new(19);
    let simd = kernel_sets().into_iter().filter(|k| k.name != "portable");
    for kernels in simd {
        for ty in [GgmlType::Q4_1, GgmlType::Q5_1] {
            for (rows, blocks, n) in [(1, 1, 1), (8, 3, 1), (13, 40, 4), (37, 9, 7), (5, 2, 13)] {
                let cols = 32 * blocks;
                let data = matrix_bytes(&mut rng, ty, rows, cols);
                let m = matrix(ty, rows, cols, &data);
                let x = row(&mut rng, n * cols, 2.0);
                let row_bytes = data.len() / rows;
                let want = |r: usize, a: &[u8]| {
                    q_1_in_eight_lanes(ty, &data[r * row_bytes..(r + 1) * row_bytes], a)
                };
                let what = format!("{ty} rows {rows} blocks {blocks}");
                common::assert_alone_and_batched(&kernels, &m, &x, n, want, &what);
            }
        }
    }
}

/// One q3_K row against one q8_K activation row as llama.cpp sums it on
/// x86 (`ggml_vec_dot_q3_K_q8_K`): per block, eight integer lanes, lane
/// `k` the products of values `32 v + 4 k .. 32 v + 4 k + 4` over the
/// block's eight runs of 32, each by its sub-block's scale; then each
/// lane `fma(dy * dx, lane, acc)` block after block, the lanes added as
/// [`q8_0_in_eight_lanes`] adds them.
fn q3k_in_eight_lanes(w: &[u8], a: &[u8]) -> f32 {
    use workers::tensor::blocks::{f16_at, q3k_scales, q3k_value};
    let mut acc = [0f32; 8];
    for (x, y) in w.chunks_exact(110).zip(a.chunks_exact(292)) {
        let d = f32::from_le_bytes([y[0], y[1], y[2], y[3]]) * f16_at(x, 108);
        let scales = q3k_scales(x);
        for (k, lane) in acc.iter_mut().enumerate() {
            let sum: i32 = (0..8)
                .flat_map(|v| 32 * v + 4 * k..32 * v + 4 * k + 4)
                .map(|n| scales[n / 16] * q3k_value(x, n) * y[4 + n] as i8 as i32)
                .sum();
            *lane = d.mul_add(sum as f32, *lane);
        }
    }
    let l = acc;
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// Every SIMD set's products of `ty` (q2_K, q3_K, q5_K or iq4_xs) against
/// `reference`, bit for bit: one token and batches, on the encoder's
/// blocks and on blocks of random bytes but their f16 scales (`random`
/// the bytes made random): negative sub-block scales, every pattern of
/// high bits, as llama.cpp's quantizer writes.
fn k_products_sum_as(
    ty: GgmlType,
    random: std::ops::Range<usize>,
    seed: u64,
    reference: fn(&[u8], &[u8]) -> f32,
) {
    let mut rng = SplitMix64::new(seed);
    let size = ty.block_bytes() as usize;
    for kernels in kernel_sets().into_iter().filter(|k| k.name != "portable") {
        for (rows, blocks, n) in [(1, 1, 1), (7, 3, 1), (5, 6, 4), (3, 2, 11)] {
            // Row counts no group of eight would pack (q2_K, q3_K, q5_K,
            // iq4_xs).
            assert!(!kernels.packs(ty, rows), "{}", kernels.name);
            let cols = 256 * blocks;
            let mut data = matrix_bytes(&mut rng, ty, rows, cols);
            for (b, block) in data.chunks_exact_mut(size).enumerate() {
                if b % 2 == 1 {
                    block[random.clone()]
                        .iter_mut()
                        .for_each(|x| *x = rng.next_u64() as u8);
                }
            }
            let m = matrix(ty, rows, cols, &data);
            let x = row(&mut rng, n * cols, 2.0);
            let row_bytes = data.len() / rows;
            let want = |r: usize, a: &[u8]| reference(&data[r * row_bytes..(r + 1) * row_bytes], a);
            let what = format!("{ty} rows {rows} blocks {blocks}");
            common::assert_alone_and_batched(&kernels, &m, &x, n, want, &what);
        }
    }
}

#[test]
fn q3_k_products_on_every_simd_set_sum_as_llama_cpp_does_bit_for_bit() {
    k_products_sum_as(GgmlType::Q3K, 0..108, 23, q3k_in_eight_lanes);
}

/// One q2_K row against one q8_K activation row as llama.cpp sums it on
/// x86 (`ggml_vec_dot_q2_K_q8_K`): per block, first eight lanes of the
/// mins against the 16-value sums, lane `k` sub-blocks `2k` and `2k + 1`,
/// into `fma(-dy * dmin, lane, acc)`; then [`q3k_in_eight_lanes`]'s
/// value lanes (values 0..=3, the scales the low nibbles) into
/// `fma(dy * d, lane, acc)`.
fn q2k_in_eight_lanes(w: &[u8], a: &[u8]) -> f32 {
    use workers::tensor::blocks::{f16_at, q2k_value};
    let mut acc = [0f32; 8];
    for (x, y) in w.chunks_exact(84).zip(a.chunks_exact(292)) {
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let bsum = |j: usize| i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32;
        let (d, dmin) = (dy * f16_at(x, 80), -dy * f16_at(x, 82));
        for (k, lane) in acc.iter_mut().enumerate() {
            let mins =
                (x[2 * k] >> 4) as i32 * bsum(2 * k) + (x[2 * k + 1] >> 4) as i32 * bsum(2 * k + 1);
            *lane = dmin.mul_add(mins as f32, *lane);
        }
        for (k, lane) in acc.iter_mut().enumerate() {
            let sum: i32 = (0..8)
                .flat_map(|v| 32 * v + 4 * k..32 * v + 4 * k + 4)
                .map(|n| (x[n / 16] & 0xF) as i32 * q2k_value(x, n) as i32 * y[4 + n] as i8 as i32)
                .sum();
            *lane = d.mul_add(sum as f32, *lane);
        }
    }
    let l = acc;
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

#[test]
fn q2_k_products_on_every_simd_set_sum_as_llama_cpp_does_bit_for_bit() {
    k_products_sum_as(GgmlType::Q2K, 0..80, 29, q2k_in_eight_lanes);
}

/// One iq4_xs row against one q8_K activation row as llama.cpp sums it on
/// x86 (`ggml_vec_dot_iq4_xs_q8_K`): [`q3k_in_eight_lanes`]'s lanes, each
/// 32-value run by its own scale.
fn iq4xs_in_eight_lanes(w: &[u8], a: &[u8]) -> f32 {
    use workers::tensor::blocks::f16_at;
    use workers::tensor::iq4::{iq4_value, iq4xs_scale};
    let mut acc = [0f32; 8];
    for (x, y) in w.chunks_exact(136).zip(a.chunks_exact(292)) {
        let d = f16_at(x, 0) * f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        for (k, lane) in acc.iter_mut().enumerate() {
            let sum: i32 = (0..8)
                .map(|v| {
                    let q = &x[8 + 16 * v..];
                    let part: i32 = (4 * k..4 * k + 4)
                        .map(|i| iq4_value(q, i) * y[4 + 32 * v + i] as i8 as i32)
                        .sum();
                    iq4xs_scale(x, v) * part
                })
                .sum();
            *lane = d.mul_add(sum as f32, *lane);
        }
    }
    let l = acc;
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

#[test]
fn iq4_xs_products_on_every_simd_set_sum_as_llama_cpp_does_bit_for_bit() {
    k_products_sum_as(GgmlType::IQ4XS, 2..136, 31, iq4xs_in_eight_lanes);
}

/// One iq4_nl row against one q8_0 activation row as llama.cpp sums one
/// token on x86 where it does not repack the matrix
/// (`ggml_vec_dot_iq4_nl_q8_0`; a batch of two or more it takes through
/// llamafile's tinyBLAS, whose order drover-worker's batches, equal to
/// one token at a time, do not follow):
/// each block's eight lanes (lane `k` values `4k..4k + 4`) into
/// `fma(dy * dx, lane, acc)`, even blocks into one accumulator and odd
/// ones into another, the two added lane by lane and then across as
/// [`q8_0_in_eight_lanes`] adds them; an odd last block's whole sum fused
/// in last.
fn iq4nl_in_two_accumulators(w: &[u8], a: &[u8]) -> f32 {
    use workers::tensor::blocks::f16_at;
    use workers::tensor::iq4::iq4_value;
    let mut acc = [[0f32; 8]; 2];
    let blocks = w.len() / 18;
    let isum = |b: usize, r: std::ops::Range<usize>| -> i32 {
        r.map(|i| iq4_value(&w[18 * b + 2..], i) * a[34 * b + 2 + i] as i8 as i32)
            .sum()
    };
    let d = |b: usize| f16_at(a, 34 * b) * f16_at(w, 18 * b);
    for b in 0..blocks / 2 * 2 {
        for (k, lane) in acc[b % 2].iter_mut().enumerate() {
            *lane = d(b).mul_add(isum(b, 4 * k..4 * k + 4) as f32, *lane);
        }
    }
    let l: [f32; 8] = std::array::from_fn(|k| acc[0][k] + acc[1][k]);
    let sum = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    if blocks % 2 == 1 {
        d(blocks - 1).mul_add(isum(blocks - 1, 0..32) as f32, sum)
    } else {
        sum
    }
}

#[test]
fn unpacked_iq4_nl_products_on_every_simd_set_sum_as_llama_cpps_one_token_does() {
    let mut rng = SplitMix64::new(37);
    for kernels in kernel_sets().into_iter().filter(|k| k.name != "portable") {
        // Row counts that are not whole groups of eight (those are packed,
        // `tests/packed.rs`), even and odd block counts, one token and
        // batches.
        for (rows, blocks, n) in [(1, 1, 1), (7, 3, 1), (5, 6, 4), (3, 9, 11), (13, 2, 2)] {
            assert!(!kernels.packs(GgmlType::IQ4NL, rows), "{}", kernels.name);
            let cols = 32 * blocks;
            let mut data = matrix_bytes(&mut rng, GgmlType::IQ4NL, rows, cols);
            // Every index: the odd blocks' nibbles random.
            for block in data.chunks_exact_mut(18).skip(1).step_by(2) {
                block[2..]
                    .iter_mut()
                    .for_each(|x| *x = rng.next_u64() as u8);
            }
            let m = matrix(GgmlType::IQ4NL, rows, cols, &data);
            let x = row(&mut rng, n * cols, 2.0);
            let row_bytes = data.len() / rows;
            let want = |r: usize, a: &[u8]| {
                iq4nl_in_two_accumulators(&data[r * row_bytes..(r + 1) * row_bytes], a)
            };
            let what = format!("iq4_nl rows {rows} blocks {blocks}");
            common::assert_alone_and_batched(&kernels, &m, &x, n, want, &what);
        }
    }
}

/// One q5_K row against one q8_K activation row as llama.cpp sums it on
/// x86 (`ggml_vec_dot_q5_K_q8_K`): per block, [`q3k_in_eight_lanes`]'s
/// lanes (each run of 32 a sub-block, by its six-bit scale) into
/// `fma(dy * dx, lane, acc)`, and the mins against the 16-value sums
/// into one float apart, `fma(-dy * dmin, mins, summs)`, added last.
fn q5k_in_eight_lanes(w: &[u8], a: &[u8]) -> f32 {
    use workers::tensor::blocks::{f16_at, q4k_scale_min, q5k_value};
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (x, y) in w.chunks_exact(176).zip(a.chunks_exact(292)) {
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let (d, dmin) = (dy * f16_at(x, 0), -dy * f16_at(x, 2));
        let bsum = |j: usize| i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32;
        let parts: Vec<(u8, u8)> = (0..8).map(|j| q4k_scale_min(j, &x[4..16])).collect();
        let mins: i32 = (0..8)
            .map(|j| parts[j].1 as i32 * (bsum(2 * j) + bsum(2 * j + 1)))
            .sum();
        summs = dmin.mul_add(mins as f32, summs);
        for (k, lane) in acc.iter_mut().enumerate() {
            let sum: i32 = (0..8)
                .map(|j| {
                    let part: i32 = (32 * j + 4 * k..32 * j + 4 * k + 4)
                        .map(|n| q5k_value(x, n) as i32 * y[4 + n] as i8 as i32)
                        .sum();
                    parts[j].0 as i32 * part
                })
                .sum();
            *lane = d.mul_add(sum as f32, *lane);
        }
    }
    let l = acc;
    (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) + summs
}

#[test]
fn unpacked_q5_k_products_on_every_simd_set_sum_as_llama_cpp_does_bit_for_bit() {
    k_products_sum_as(GgmlType::Q5K, 4..176, 41, q5k_in_eight_lanes);
}
