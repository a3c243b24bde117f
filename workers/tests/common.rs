//! Shared paths of the worker tests.
#![allow(dead_code)]

use std::path::PathBuf;

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

/// The portable kernels and every SIMD set this processor runs.
pub fn kernel_sets() -> Vec<workers::kernels::Kernels> {
    let simd = [
        workers::kernels::avx2::kernels(),
        workers::kernels::avx2::kernels_vnni(),
    ];
    std::iter::once(workers::kernels::Kernels::portable())
        .chain(simd.into_iter().flatten())
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
