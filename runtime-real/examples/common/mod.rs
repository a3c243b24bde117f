//! What the benchmark examples share.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the binaries next to this example's profile; returns `drover`.
pub fn build_binaries(example: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("target/<profile>/examples/{example}"));
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "-p", "runtime-real", "--bins"]);
    if release {
        build.arg("--release");
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "building drover and drover-agent failed");
    profile_dir.join("drover")
}
