//! The kernels' CUDA C, held in the crate, and its compilation with NVRTC
//! straight to a cubin for the device's architecture (`sm_90` on an H200).
//!
//! A cubin, not PTX: the driver then loads machine code and never
//! JIT-compiles, so a driver older than the NVRTC that compiled the
//! kernels still loads them (PTX from a newer NVRTC would be refused).

use cudarc::nvrtc::{result, sys};
use std::ffi::{CString, c_char};

/// The helpers every source starts with.
const COMMON: &str = include_str!("common.cuh");

/// One kernel source file.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// Its file name under `workers/src/cuda/`.
    pub name: &'static str,
    /// Its text (without `COMMON`).
    pub text: &'static str,
    /// The kernels it defines, each loaded by name.
    pub kernels: &'static [&'static str],
}

/// The quantized and float products and the activation encoders.
pub const QUANT: Source = Source {
    name: "quant.cu",
    text: include_str!("quant.cu"),
    kernels: &[
        "quantize_q8_0",
        "quantize_q8_1",
        "encode_f16",
        "encode_bf16",
        "matvec_q8_0",
        "matvec_q4_0",
        "matvec_q5_0",
        "matvec_q4_1",
        "matvec_q5_1",
        "matvec_iq4_nl",
        "matvec_q8_0_tiled",
        "matvec_q4_0_tiled",
        "matvec_f32",
        "matvec_f16",
        "matvec_bf16",
    ],
};

/// The k-quant products and their activation encoder.
pub const KQUANT: Source = Source {
    name: "kquant.cu",
    text: include_str!("kquant.cu"),
    kernels: &[
        "quantize_q8_k",
        "matvec_q2_k",
        "matvec_q3_k",
        "matvec_q4_k",
        "matvec_q5_k",
        "matvec_q6_k",
        "matvec_iq4_xs",
    ],
};

/// Norms, rope, attention, SwiGLU, biases and residual adds.
pub const OPS: Source = Source {
    name: "ops.cu",
    text: include_str!("ops.cu"),
    kernels: &[
        "rms_norm",
        "add_bias",
        "add",
        "swiglu",
        "kv_store",
        "rope",
        "attention",
    ],
};

/// Every kernel source.
pub const SOURCES: [Source; 3] = [QUANT, KQUANT, OPS];

impl Source {
    /// The text NVRTC compiles: the helpers, then the file.
    pub fn full_text(&self) -> String {
        format!("{COMMON}\n{}", self.text)
    }
}

/// The NVRTC options for `arch` (`sm_90`). No multiply-add is fused, so
/// each quantized block's scaling rounds as the CPU's does; no fast math.
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--std=c++17".into(),
    ]
}

/// The architecture name of compute capability `major.minor` (`sm_90`).
pub fn arch_name(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// What NVRTC made of one source.
#[derive(Debug)]
pub struct Compiled {
    /// The machine code, for `cuModuleLoadData`.
    pub cubin: Vec<u8>,
    /// NVRTC's log: empty when it had nothing to say (no warnings).
    pub log: String,
}

/// Compiles `source` for `arch` with NVRTC, which must be loadable (see
/// [`super::probe`]); the error carries NVRTC's log.
pub fn compile(source: &Source, arch: &str) -> Result<Compiled, String> {
    let text = CString::new(source.full_text())
        .map_err(|_| format!("{}: a NUL byte in the source", source.name))?;
    let name = CString::new(source.name).map_err(|_| format!("{}: a NUL byte", source.name))?;
    let program = result::create_program(&text, Some(&name))
        .map_err(|e| format!("{}: nvrtcCreateProgram: {e:?}", source.name))?;
    let outcome = compile_program(program, &options(arch));
    // SAFETY: `program` came from create_program above and is destroyed
    // only here, once, after every use.
    let _ = unsafe { result::destroy_program(program) };
    outcome.map_err(|e| format!("{}: {e}", source.name))
}

/// Compiles `program` and reads its log and cubin.
fn compile_program(program: sys::nvrtcProgram, options: &[String]) -> Result<Compiled, String> {
    // SAFETY: `program` is live (created by the caller, destroyed after
    // this returns); the options are owned strings cudarc copies.
    let compiled = unsafe { result::compile_program(program, options) };
    // SAFETY: as above; the log can be read after a failed compile too.
    let log = unsafe { result::get_program_log(program) }
        .map(|raw| c_text(&raw))
        .unwrap_or_default();
    if let Err(e) = compiled {
        return Err(format!("nvrtcCompileProgram: {e:?}\n{log}"));
    }
    let mut size = 0usize;
    // SAFETY: `program` compiled; `size` is a valid place for the answer.
    unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }
        .result()
        .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` holds exactly the `size` bytes NVRTC said it writes.
    unsafe { sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast::<c_char>()) }
        .result()
        .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
    Ok(Compiled { cubin, log })
}

/// A C string's text from NVRTC's buffer (up to its NUL), trimmed.
fn c_text(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_kernel_is_defined_once_in_its_source() {
        for source in SOURCES {
            for kernel in source.kernels {
                let definition = format!("__global__ void {kernel}(");
                assert_eq!(
                    source.text.matches(&definition).count(),
                    1,
                    "{} defines {kernel} once",
                    source.name
                );
            }
            let defined = source.text.matches("__global__ void ").count();
            assert_eq!(defined, source.kernels.len(), "{} lists all", source.name);
        }
    }

    #[test]
    fn options_name_the_architecture_and_keep_multiply_adds_apart() {
        let o = options(&arch_name(9, 0));
        assert_eq!(o[0], "--gpu-architecture=sm_90");
        assert!(o.contains(&"--fmad=false".to_string()));
        assert!(!o.iter().any(|x| x.contains("fast-math")));
    }

    #[test]
    fn log_text_stops_at_the_nul() {
        let raw: Vec<c_char> = b"warning: x\n\0junk".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_text(&raw), "warning: x");
    }
}
