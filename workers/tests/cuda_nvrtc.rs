//! Every CUDA kernel source compiles with NVRTC for the H200 (sm_90), to
//! machine code, with no message at all (a warning fails): run through
//! `drover-worker cuda-compile`, with NVRTC from NVIDIA's pip wheel.
//!
//! NVRTC is found in `$DROVER_NVRTC_LIB` (a folder holding
//! `libnvrtc.so.12` and its `libnvrtc-builtins`), else in the venv
//! `cargo xtask setup` makes (`~/.cache/drover/nvidia-cuda-nvrtc-12.4.127`).
//! Without either the test fails and says so: it never passes unchecked.

use std::path::PathBuf;
use std::process::Command;

/// The folder holding `libnvrtc.so.12`, or why none was found.
fn nvrtc_folder() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("DROVER_NVRTC_LIB") {
        let dir = PathBuf::from(dir);
        return match dir.join("libnvrtc.so.12").is_file() {
            true => Ok(dir),
            false => Err(format!(
                "DROVER_NVRTC_LIB={}: no libnvrtc.so.12 there",
                dir.display()
            )),
        };
    }
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()));
    let venv = home.join(".cache/drover/nvidia-cuda-nvrtc-12.4.127/lib");
    let found = std::fs::read_dir(&venv).ok().and_then(|entries| {
        let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        dirs.sort();
        dirs.into_iter()
            .map(|d| d.join("site-packages/nvidia/cuda_nvrtc/lib"))
            .find(|d| d.join("libnvrtc.so.12").is_file())
    });
    found.ok_or_else(|| {
        format!(
            "NVRTC not found: neither DROVER_NVRTC_LIB nor {} holds libnvrtc.so.12; \
             `cargo xtask setup` installs it (nvidia-cuda-nvrtc-cu12==12.4.127)",
            venv.display()
        )
    })
}

#[test]
fn every_kernel_compiles_for_sm_90_without_a_warning() {
    let lib = nvrtc_folder().unwrap_or_else(|e| panic!("{e}"));
    let out_dir = std::env::temp_dir().join(format!("drover-cubin-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
        .args(["cuda-compile", "--arch", "sm_90", "--out"])
        .arg(&out_dir)
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .expect("run drover-worker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for source in workers::cuda::compile::SOURCES {
        let cubin = out_dir.join(source.name.replace(".cu", ".cubin"));
        let bytes = std::fs::read(&cubin).unwrap_or_else(|e| panic!("{}: {e}", cubin.display()));
        assert!(
            bytes.starts_with(b"\x7fELF"),
            "{} is no cubin",
            cubin.display()
        );
        for kernel in source.kernels {
            let symbol = kernel.as_bytes();
            assert!(
                bytes.windows(symbol.len()).any(|w| w == symbol),
                "{} lacks {kernel}",
                cubin.display()
            );
        }
        assert!(stdout.contains(&format!(
            "{}: {} kernels",
            source.name,
            source.kernels.len()
        )));
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
}
