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
