//! The float products through cuBLAS: `GemmEx` with the weights in their
//! own type (f32, f16 or bf16), the activations encoded to the same type,
//! f32 results and f32 accumulation (no TF32), as the CPU path computes.

use super::device::Gpu;
use super::forward::DeviceMatrix;
use super::launch::int;
use crate::tensor::GgmlType;
use cudarc::cublas::{CudaBlas, result, sys};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use std::ffi::c_void;

/// cuBLAS's name of a float weight type.
pub fn data_type(ty: GgmlType) -> Option<sys::cudaDataType> {
    match ty {
        GgmlType::F32 => Some(sys::cudaDataType::CUDA_R_32F),
        GgmlType::F16 => Some(sys::cudaDataType::CUDA_R_16F),
        GgmlType::BF16 => Some(sys::cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

/// `y[t][r] = w.row(r) · x[t]` for `n` tokens. cuBLAS is column-major: the
/// weights' rows × cols bytes read as a cols × rows matrix, transposed;
/// the activations as cols × n; `y` as rows × n.
pub fn gemm<T>(
    gpu: &Gpu,
    blas: &CudaBlas,
    w: &DeviceMatrix,
    x: &CudaSlice<T>,
    y: &mut CudaSlice<f32>,
    n: usize,
) -> Result<(), String> {
    let ty = data_type(w.ty).ok_or_else(|| format!("cuBLAS takes no {} weights", w.ty))?;
    let (rows, cols, tokens) = (int(w.rows)?, int(w.cols)?, int(n)?);
    let (alpha, beta) = (1.0f32, 0.0f32);
    let stream = &gpu.stream;
    let (wp, _w) = w.data.device_ptr(stream);
    let (xp, _x) = x.device_ptr(stream);
    let (yp, _y) = y.device_ptr_mut(stream);
    // SAFETY: the three pointers are live device buffers of this stream
    // (their guards are held until the call returns): `w` holds rows ×
    // cols values of `ty`, `x` n × cols of the same type, `y` n × rows
    // f32; alpha and beta are host f32 values, as COMPUTE_32F reads them.
    unsafe {
        result::gemm_ex(
            *blas.handle(),
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            rows,
            tokens,
            cols,
            (&alpha as *const f32).cast::<c_void>(),
            wp as *const c_void,
            ty,
            cols,
            xp as *const c_void,
            ty,
            cols,
            (&beta as *const f32).cast::<c_void>(),
            yp as *mut c_void,
            sys::cudaDataType::CUDA_R_32F,
            rows,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| format!("cublasGemmEx: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_float_weights_go_to_cublas() {
        for ty in GgmlType::ALL {
            let float = matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
            assert_eq!(data_type(ty).is_some(), float, "{ty}");
        }
    }
}
