//! The CUDA backend (`--backend cuda`): a stage's weights on one NVIDIA
//! GPU, uploaded once as they lie in the GGUF (quantized blocks as they
//! are), and its forward pass run there.
//!
//! Nothing CUDA is linked: cudarc loads the driver (`libcuda.so.1`),
//! NVRTC (`libnvrtc.so.12`) and, when it is there, cuBLAS
//! (`libcublas.so.12`) with dlopen when a CUDA stage opens, so the build
//! needs no toolkit and the binary runs on machines without a GPU, where
//! `--backend cuda` is refused with an error that names what is missing
//! ([`probe`]). The kernels are CUDA C held in this folder (`*.cu`),
//! compiled at run time by NVRTC for the device's architecture
//! ([`compile`]). The float products use cuBLAS when it loads and a kernel
//! of ours otherwise (`DROVER_CUBLAS=0` forces the kernel).
//!
//! The pass computes what the CPU path computes, in the same order of
//! steps and with activations encoded as ggml encodes them, so greedy
//! tokens match; the sums run in another order, so logits differ by
//! rounding.
#![allow(unsafe_code)] // FFI through cudarc: each block says why it holds.

mod bandwidth;
mod blas;
pub mod compile;
mod device;
#[cfg(test)]
mod emulate;
#[cfg(test)]
mod emulate_ops;
mod forward;
mod graph;
mod kernels;
pub mod launch;

pub use bandwidth::copy_bandwidth;
pub use device::Gpu;
pub use forward::DeviceStage;

/// Which of the libraries the backend loads are on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Libraries {
    /// The driver, `libcuda.so.1`.
    pub driver: bool,
    /// NVRTC, `libnvrtc.so.12`.
    pub nvrtc: bool,
    /// cuBLAS, `libcublas.so.12`.
    pub cublas: bool,
}

impl Libraries {
    /// Looks for each library as cudarc will load it (dlopen by name, so
    /// through `LD_LIBRARY_PATH` and the loader's cache), without the panic
    /// cudarc's first call would raise for a missing one.
    pub fn find() -> Libraries {
        // SAFETY: each probe dlopens a library by name and closes it; the
        // libraries' initialisers are the vendor's, run as any load would.
        unsafe {
            Libraries {
                driver: cudarc::driver::sys::is_culib_present(),
                nvrtc: cudarc::nvrtc::sys::is_culib_present(),
                cublas: cudarc::cublas::sys::is_culib_present(),
            }
        }
    }

    /// Whether a CUDA stage can run: the driver and NVRTC are needed,
    /// cuBLAS is not.
    pub fn check(&self) -> Result<(), String> {
        if !self.driver {
            return Err(
                "--backend cuda: the CUDA driver library (libcuda.so.1) could not be loaded: \
                 this machine has no NVIDIA driver (or the loader cannot find it); \
                 use --backend cpu"
                    .into(),
            );
        }
        if !self.nvrtc {
            return Err(
                "--backend cuda: the NVRTC library (libnvrtc.so.12), which compiles the \
                 kernels, could not be loaded: install the CUDA toolkit or \
                 `pip install nvidia-cuda-nvrtc-cu12` and put the folder holding it \
                 (site-packages/nvidia/cuda_nvrtc/lib) on LD_LIBRARY_PATH; or use --backend cpu"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Checks that a CUDA stage can run on this machine, before anything is
/// opened: the error names the missing library.
pub fn probe() -> Result<Libraries, String> {
    let found = Libraries::find();
    found.check()?;
    Ok(found)
}

/// Whether cuBLAS is to be used when it loads (`DROVER_CUBLAS=0` says no).
pub fn cublas_wanted() -> bool {
    std::env::var("DROVER_CUBLAS").map_or(true, |v| v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_is_named_before_nvrtc() {
        let none = Libraries {
            driver: false,
            nvrtc: false,
            cublas: false,
        };
        let e = none.check().unwrap_err();
        assert!(
            e.contains("libcuda.so.1") && e.contains("--backend cpu"),
            "{e}"
        );
        let no_nvrtc = Libraries {
            driver: true,
            ..none
        };
        let e = no_nvrtc.check().unwrap_err();
        assert!(
            e.contains("libnvrtc.so.12") && e.contains("LD_LIBRARY_PATH"),
            "{e}"
        );
    }

    #[test]
    fn cublas_is_optional() {
        let found = Libraries {
            driver: true,
            nvrtc: true,
            cublas: false,
        };
        assert_eq!(found.check(), Ok(()));
    }
}
