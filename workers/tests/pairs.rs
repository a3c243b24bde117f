//! f16 weights packed two rows together (`kernels::pairs`): every kernel
//! set that packs them gives, bit for bit, the one-row kernel's product on
//! the rows as stored, alone and in a batch, and beside unpacked products
//! sharing the same activations.

mod common;

use common::kernel_sets;
use workers::kernels::{Encoded, Matrix, pairs};
use workers::rng::SplitMix64;
use workers::tensor::GgmlType;
use workers::tensor::quantize::quantized;

const F16: GgmlType = GgmlType::F16;

fn values(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.symmetric(scale)).collect()
}

fn matrix(rows: usize, cols: usize, data: &[u8], packed: bool) -> Matrix<'_> {
    Matrix {
        ty: F16,
        rows,
        cols,
        data,
        packed,
    }
}

#[test]
fn packed_f16_products_equal_the_rows_as_stored_bit_for_bit() {
    let mut rng = SplitMix64::new(77);
    let sets: Vec<_> = kernel_sets()
        .into_iter()
        .filter(|k| k.pair(F16).is_some())
        .collect();
    // The AVX2 set packs f16, and the AVX-512 ones tuned for AMD, Zen 5
    // too (the portable one multiplies the rows as stored).
    if let Some(avx2) = workers::kernels::avx2::kernels() {
        assert!(avx2.pair(F16).is_some(), "the AVX2 set has no f16 pairs");
    }
    use workers::kernels::avx2::Tuning;
    for amd in [Tuning::Amd, Tuning::Zen5] {
        if let Some(wide) = workers::kernels::avx2::kernels_vnni_for(amd) {
            assert!(wide.pair(F16).is_some(), "{}: no f16 pairs", wide.name);
        }
    }
    for kernels in sets {
        assert!(kernels.packs(F16, 4) && !kernels.packs(F16, 5));
        // Whole 16-value steps only, steps with an 8-value rest and a
        // tail, a rest alone, a tail alone; one pair and many (the pool);
        // batches on and off the tiles' three and four tokens.
        for (rows, cols, n) in [
            (2, 16, 1),
            (2, 27, 4),
            (6, 8, 3),
            (4, 5, 2),
            (10, 100, 7),
            (34, 1544, 1),
            (258, 107, 5),
            (12, 48, 9),
        ] {
            let plain: Vec<u8> = values(&mut rng, rows * cols, 1.0)
                .chunks_exact(cols)
                .flat_map(|r| quantized(F16, r))
                .collect();
            let data = pairs::pack(rows, cols, &plain);
            assert_eq!(data.len(), plain.len());
            let m = matrix(rows, cols, &data, true);
            let x = values(&mut rng, n * cols, 2.0);
            let dot = kernels.dot(F16);
            let want = |r: usize, a: &[u8]| dot(&plain[r * 2 * cols..(r + 1) * 2 * cols], a);
            let what = format!("packed f16 rows {rows} cols {cols}");
            common::assert_alone_and_batched(&kernels, &m, &x, n, want, &what);
        }
    }
}

#[test]
fn packed_and_stored_f16_products_share_activations_as_each_alone() {
    // Gate and up where one has an odd number of rows and stays unpacked.
    let mut rng = SplitMix64::new(78);
    let cols = 72;
    for kernels in kernel_sets().into_iter().filter(|k| k.pair(F16).is_some()) {
        for n in [1, 4] {
            let gate = quantized(F16, &values(&mut rng, 40 * cols, 1.0));
            let gate = pairs::pack(40, cols, &gate);
            let up = quantized(F16, &values(&mut rng, 7 * cols, 1.0));
            let ms = [matrix(40, cols, &gate, true), matrix(7, cols, &up, false)];
            let x = values(&mut rng, n * cols, 2.0);
            let encoded = Encoded::new(F16, &x, cols);
            common::assert_shared_equals_alone(&kernels, &ms, &encoded, n);
        }
    }
}
