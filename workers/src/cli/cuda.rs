//! `drover-worker cuda-compile`: compile every CUDA kernel source with
//! NVRTC, no GPU needed; the check CI runs (`tests/cuda_nvrtc.rs`).

use super::CliResult;
use crate::cuda::compile::{SOURCES, compile};
use std::path::Path;

/// Compiles each source for `arch` (`sm_90`); any NVRTC message (a
/// warning too) fails it. With `out`, writes each cubin there.
pub fn cuda_compile(arch: &str, out: Option<&Path>) -> CliResult {
    // Looked for first: cudarc's first NVRTC call panics without it.
    if !crate::cuda::Libraries::find().nvrtc {
        return Err(crate::cuda::Libraries {
            driver: true,
            nvrtc: false,
            cublas: false,
        }
        .check()
        .unwrap_err());
    }
    let mut failed = Vec::new();
    for source in SOURCES {
        match compile(&source, arch) {
            Ok(c) if c.log.is_empty() => {
                outln!(
                    "{}: {} kernels, {} bytes of {arch} code",
                    source.name,
                    source.kernels.len(),
                    c.cubin.len()
                );
                if let Some(dir) = out {
                    let path = dir.join(source.name.replace(".cu", ".cubin"));
                    std::fs::write(&path, &c.cubin)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                }
            }
            Ok(c) => {
                outln!("{}: NVRTC said:\n{}", source.name, c.log);
                failed.push(source.name);
            }
            Err(e) => {
                outln!("{e}");
                failed.push(source.name);
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("NVRTC warned or failed on {}", failed.join(", ")))
    }
}
