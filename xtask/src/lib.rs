//! drover's developer tasks, as a library so the checks also run as tests.

#![forbid(unsafe_code)]

pub mod setup;
pub mod spec;
pub mod tidy;

use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}
