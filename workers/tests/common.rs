//! Shared paths of the worker tests.
#![allow(dead_code)]

use std::path::PathBuf;
use workers::kernels::Matrix;
use workers::rng::SplitMix64;
use workers::tensor::GgmlType;
use workers::tensor::quantize::quantized;

/// The trained model every developer and CI run has beside the repository.
pub fn stories() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/models/stories260k.gguf"
    ))
}

/// The same model as GGUF version 1.
pub fn stories_v1() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/models/stories260k-v1.gguf"
    ))
}

/// A scratch directory under the workspace's target dir, emptied first.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/test-scratch"
    ))
    .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The portable kernels and every SIMD set this processor runs, each
/// with every maker's tuning (whichever maker this is).
pub fn kernel_sets() -> Vec<workers::kernels::Kernels> {
    use workers::kernels::avx2::{Tuning, kernels_avx_vnni_for, kernels_for, kernels_vnni_for};
    let simd = [Tuning::Amd, Tuning::Zen5, Tuning::Other]
        .into_iter()
        .flat_map(|t| [kernels_for(t), kernels_avx_vnni_for(t), kernels_vnni_for(t)]);
    std::iter::once(workers::kernels::Kernels::portable())
        .chain(simd.flatten())
        .collect()
}

/// Asserts that `ms` multiplied together against `encoded` (one set of
/// tasks) give each product's bits alone.
pub fn assert_shared_equals_alone(
    kernels: &workers::kernels::Kernels,
    ms: &[workers::kernels::Matrix],
    encoded: &workers::kernels::Encoded,
    n: usize,
) {
    use workers::kernels::{Matrix, matmul, matmuls};
    let mut outs: Vec<Vec<f32>> = ms.iter().map(|m| vec![0f32; n * m.rows]).collect();
    let mut products: Vec<(Matrix, &mut [f32])> = ms
        .iter()
        .zip(outs.iter_mut())
        .map(|(m, y)| (*m, &mut y[..]))
        .collect();
    matmuls(kernels, encoded, &mut products);
    for (m, got) in ms.iter().zip(&outs) {
        let mut alone = vec![0f32; got.len()];
        matmul(kernels, m, encoded, &mut alone);
        let same = got
            .iter()
            .zip(&alone)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        let (name, ty, rows, packed) = (kernels.name, m.ty, m.rows, m.packed);
        assert!(same, "{name} {ty} rows {rows} packed {packed} batch {n}");
    }
}

/// Asserts that every output of `got` is within 1e-4 (relative, plus 1e-4
/// absolute) of `want`, naming `what` and the output.
pub fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{what} output {i}: {a} against {b}"
        );
    }
}

/// Asserts that `m` against each of the `n` activation rows of `x`, one
/// token at a time and all of them in one batch, gives for row `r` the
/// bits of `want(row, a)`, where `row` is row `r`'s index and `a` the
/// token's activations encoded for `m`'s type.
pub fn assert_alone_and_batched(
    kernels: &workers::kernels::Kernels,
    m: &workers::kernels::Matrix,
    x: &[f32],
    n: usize,
    want: impl Fn(usize, &[u8]) -> f32,
    what: &str,
) {
    use workers::kernels::{Encoded, matmul};
    let (rows, cols) = (m.rows, m.cols);
    let mut batched = vec![0f32; n * rows];
    matmul(kernels, m, &Encoded::new(m.ty, x, cols), &mut batched);
    for t in 0..n {
        let xt = &x[t * cols..(t + 1) * cols];
        let mut one = vec![0f32; rows];
        matmul(kernels, m, &Encoded::new(m.ty, xt, cols), &mut one);
        let a = workers::tensor::quantize::quantized(m.ty.activation_type(), xt);
        for r in 0..rows {
            let want = want(r, &a);
            let (got, in_batch) = (one[r], batched[t * rows + r]);
            assert!(
                got.to_bits() == want.to_bits() && in_batch.to_bits() == want.to_bits(),
                "{} {what} batch {n}: row {r} token {t}: {got} alone, {in_batch} in the batch, \
                 {want} wanted",
                kernels.name
            );
        }
    }
}

/// `n` values in `-scale..scale` from `rng`.
pub fn row(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.symmetric(scale)).collect()
}

/// `data` as a `rows` × `cols` matrix of `ty`.
pub fn matrix(ty: GgmlType, rows: usize, cols: usize, data: &[u8]) -> Matrix<'_> {
    Matrix {
        ty,
        rows,
        cols,
        data,
        packed: false,
    }
}

/// A `rows` × `cols` matrix of `ty` encoded from values in -1..1 from
/// `rng`.
pub fn matrix_bytes(rng: &mut SplitMix64, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let w: Vec<f32> = row(rng, rows * cols, 1.0);
    w.chunks_exact(cols)
        .flat_map(|r| quantized(ty, r))
        .collect()
}
