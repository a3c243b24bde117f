//! q4_0, iq4_nl, q2_K, q3_K, q4_K, q5_K and iq4_xs weights packed eight
//! rows together (`kernels::x8`): every kernel set's products on packed weights against the packed order's
//! one-row reference, bit for bit, and against the portable kernels on
//! the rows as stored.

mod common;

use common::kernel_sets;
use workers::kernels::{Encoded, Kernels, Matrix, matmul, x8};
use workers::rng::SplitMix64;
use workers::tensor::GgmlType;
use workers::tensor::quantize::quantized;

const PACKED_TYPES: [GgmlType; 7] = [
    GgmlType::Q4_0,
    GgmlType::IQ4NL,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::IQ4XS,
];

/// Columns of `blocks` blocks of `ty`.
fn cols(ty: GgmlType, blocks: usize) -> usize {
    ty.block_elements() as usize * blocks
}

fn values(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.symmetric(scale)).collect()
}

/// `rows` random rows of `cols` values of `ty`, as stored in a GGUF.
fn rows_of(rng: &mut SplitMix64, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    values(rng, rows * cols, 1.0)
        .chunks_exact(cols)
        .flat_map(|r| quantized(ty, r))
        .collect()
}

fn packed(ty: GgmlType, rows: usize, cols: usize, data: &[u8]) -> Matrix<'_> {
    Matrix {
        ty,
        rows,
        cols,
        data,
        packed: true,
    }
}

#[test]
fn packing_keeps_each_row_and_takes_the_bytes_it_had() {
    let mut rng = SplitMix64::new(5);
    for ty in PACKED_TYPES {
        let (rows, cols) = (16, cols(ty, 3).max(96));
        let plain = rows_of(&mut rng, ty, rows, cols);
        let data = x8::pack(ty, rows, cols, &plain);
        assert_eq!(data.len(), rows / 8 * x8::group_bytes(ty, cols), "{ty}");
        if ![GgmlType::Q3K, GgmlType::Q4K, GgmlType::Q5K, GgmlType::IQ4XS].contains(&ty) {
            assert_eq!(data.len(), plain.len(), "{ty}: packing only moves bytes");
        }
        assert_ne!(
            data[..plain.len()],
            plain[..],
            "{ty}: packing moved nothing"
        );
        // Each row's dot product against a one-hot activation (one 1.0,
        // so one block's scale times one quant) reads that row back out
        // of the packed group through every kernel set.
        for kernels in kernel_sets() {
            for col in [0, 5, 17, cols / 2 + 1, cols - 1] {
                let mut x = vec![0f32; cols];
                x[col] = 1.0;
                let mut y = vec![0f32; rows];
                matmul(
                    &kernels,
                    &packed(ty, rows, cols, &data),
                    &Encoded::new(ty, &x, cols),
                    &mut y,
                );
                let a = quantized(ty.activation_type(), &x);
                let row_bytes = plain.len() / rows;
                for (r, got) in y.iter().enumerate() {
                    let row = &plain[r * row_bytes..(r + 1) * row_bytes];
                    let want = x8::dot(ty, row, &a);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{} {ty} row {r} col {col}",
                        kernels.name
                    );
                }
            }
        }
    }
    assert!(!x8::packable(GgmlType::Q4_0, 12));
    assert!(!x8::packable(GgmlType::Q6K, 16));
    assert!(x8::packable(GgmlType::Q4_0, 24));
    assert!(x8::packable(GgmlType::IQ4NL, 24));
    assert!(!x8::packable(GgmlType::IQ4NL, 12));
    assert!(!x8::packable(GgmlType::Q5K, 12));
    // q8_0 stays as stored, summed as llama.cpp sums it (`kernels.rs`).
    assert!(!x8::packable(GgmlType::Q8_0, 24));
}

#[test]
fn packed_products_equal_the_one_row_reference_bit_for_bit() {
    let mut rng = SplitMix64::new(13);
    for kernels in kernel_sets() {
        for ty in PACKED_TYPES {
            // One group and many, short rows and rows of many blocks;
            // batches on and off the four-token edge, small enough for the
            // calling thread and large enough for the pool.
            for (rows, blocks, n) in [
                (8, 1, 1),
                (8, 3, 5),
                (16, 48, 4),
                (40, 9, 7),
                (96, 16, 1),
                (264, 28, 13),
            ] {
                // The k-quant and iq4_xs blocks are 256 wide: fewer of them.
                let cols = match ty {
                    GgmlType::Q2K
                    | GgmlType::Q3K
                    | GgmlType::Q4K
                    | GgmlType::Q5K
                    | GgmlType::IQ4XS => cols(ty, blocks.min(3)),
                    _ => cols(ty, blocks),
                };
                let mut plain = rows_of(&mut rng, ty, rows, cols);
                // iq4, q2_K and q3_K blocks of random bytes but their f16
                // scales: every index, sub-block scales from -32 to 31
                // (q3_K), scales and mins from 0 to 15 (q2_K).
                let random = match ty {
                    GgmlType::IQ4NL | GgmlType::IQ4XS => 2..ty.block_bytes() as usize,
                    GgmlType::Q3K => 0..108,
                    GgmlType::Q2K => 0..80,
                    _ => 0..0,
                };
                let size = ty.block_bytes() as usize;
                for block in plain.chunks_exact_mut(size).skip(1).step_by(2) {
                    block[random.clone()]
                        .iter_mut()
                        .for_each(|x| *x = rng.next_u64() as u8);
                }
                let data = x8::pack(ty, rows, cols, &plain);
                let m = packed(ty, rows, cols, &data);
                let x = values(&mut rng, n * cols, 2.0);
                let row_bytes = plain.len() / rows;
                let want =
                    |r: usize, a: &[u8]| x8::dot(ty, &plain[r * row_bytes..(r + 1) * row_bytes], a);
                let what = format!("{ty} rows {rows} blocks {blocks}");
                common::assert_alone_and_batched(&kernels, &m, &x, n, want, &what);
            }
        }
    }
}

#[test]
fn the_largest_q5_k_values_against_the_largest_activations_stay_exact() {
    // Every value 31 (nibbles 15, fifth bits set) against activations all
    // 127 of one sign: the AVX2 kernel's 16-bit sums at their bound (four
    // chunks of 2 · 31 · 127 a lane before they widen), against the
    // reference, one token and a batch.
    let (rows, cols) = (16, 512);
    let mut plain = rows_of(&mut SplitMix64::new(3), GgmlType::Q5K, rows, cols);
    for block in plain.chunks_exact_mut(176) {
        block[16..].iter_mut().for_each(|b| *b = 0xFF);
    }
    let data = x8::pack(GgmlType::Q5K, rows, cols, &plain);
    let m = packed(GgmlType::Q5K, rows, cols, &data);
    let row_bytes = plain.len() / rows;
    let want =
        |r: usize, a: &[u8]| x8::dot(GgmlType::Q5K, &plain[r * row_bytes..(r + 1) * row_bytes], a);
    for kernels in kernel_sets() {
        for sign in [1.0f32, -1.0] {
            let x = vec![sign; 2 * cols];
            let what = format!("q5_K at its largest, activations of sign {sign}");
            common::assert_alone_and_batched(&kernels, &m, &x, 2, want, &what);
        }
    }
}

#[test]
fn packed_products_are_close_to_the_portable_ones_on_the_rows_as_stored() {
    let mut rng = SplitMix64::new(21);
    for ty in PACKED_TYPES {
        let (rows, cols, n) = (48, 256, 6);
        let plain = rows_of(&mut rng, ty, rows, cols);
        let data = x8::pack(ty, rows, cols, &plain);
        let x = values(&mut rng, n * cols, 2.0);
        let encoded = Encoded::new(ty, &x, cols);
        let stored = Matrix {
            packed: false,
            ..packed(ty, rows, cols, &plain)
        };
        let mut want = vec![0f32; n * rows];
        matmul(&Kernels::portable(), &stored, &encoded, &mut want);
        for kernels in kernel_sets() {
            let mut got = vec![0f32; n * rows];
            matmul(&kernels, &packed(ty, rows, cols, &data), &encoded, &mut got);
            let what = format!(
                "{} {ty} packed against the portable kernel as stored",
                kernels.name
            );
            common::assert_close(&got, &want, &what);
        }
    }
}

#[test]
fn packed_and_stored_products_share_activations_as_each_alone() {
    // Q, K and V of one block where K and V have too few rows to pack, or
    // (q4_K_M) are q6_K, which does not pack.
    let mut rng = SplitMix64::new(34);
    let n = 5;
    for (ty, other) in [
        (GgmlType::Q4_0, GgmlType::Q4_0),
        (GgmlType::Q4K, GgmlType::Q6K),
        (GgmlType::Q5K, GgmlType::Q6K),
        (GgmlType::Q3K, GgmlType::Q6K),
        (GgmlType::Q2K, GgmlType::Q3K),
    ] {
        let cols = cols(ty, 2).max(128);
        for kernels in kernel_sets() {
            let q = rows_of(&mut rng, ty, 32, cols);
            let q = x8::pack(ty, 32, cols, &q);
            let k = rows_of(&mut rng, other, 12, cols);
            let ms = [
                packed(ty, 32, cols, &q),
                Matrix {
                    packed: false,
                    ..packed(other, 12, cols, &k)
                },
            ];
            let x = values(&mut rng, n * cols, 2.0);
            let encoded = Encoded::new(ty, &x, cols);
            common::assert_shared_equals_alone(&kernels, &ms, &encoded, n);
        }
    }
}

#[test]
fn an_encoding_for_q8_0_weights_serves_a_packed_q4_0_matrix_too() {
    // Q in q8_0 and K, V in q4_0 (a file with types chosen per tensor):
    // the block's activations are encoded once, for Q's type, and the
    // packed q4_0 product takes its block sums from that encoding.
    let mut rng = SplitMix64::new(55);
    let (n, cols) = (5, 128);
    for kernels in kernel_sets() {
        let q = rows_of(&mut rng, GgmlType::Q8_0, 24, cols);
        let k = rows_of(&mut rng, GgmlType::Q4_0, 32, cols);
        let k = x8::pack(GgmlType::Q4_0, 32, cols, &k);
        let ms = [
            Matrix {
                packed: false,
                ..packed(GgmlType::Q8_0, 24, cols, &q)
            },
            packed(GgmlType::Q4_0, 32, cols, &k),
        ];
        let x = values(&mut rng, n * cols, 2.0);
        let encoded = Encoded::new(GgmlType::Q8_0, &x, cols);
        common::assert_shared_equals_alone(&kernels, &ms, &encoded, n);
    }
}
