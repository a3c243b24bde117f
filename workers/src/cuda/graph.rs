//! A one-token step as a CUDA graph: captured at a stage's first decode
//! step and replayed for every one after it, so a token costs the host one
//! graph launch instead of a driver call for each of the step's ~20
//! kernels, copies and buffers a block. The step reads its position from
//! device memory (`rope`, `kv_store`, `attention`) and gives attention a
//! score room as wide as the cache, so the same graph is right at every
//! position. `DROVER_CUDA_GRAPH=0` turns it off; it is off where cuBLAS
//! runs a product (a float matrix with cuBLAS loaded: its calls are not
//! captured here); and a capture that fails turns it off for the stage,
//! which then runs its steps kernel by kernel, with the same results.

use super::forward::DeviceStage;
use crate::model::Logits;
use cudarc::driver::sys::{
    CUdevice_attribute, CUgraphInstantiate_flags_enum, CUstreamCaptureMode, CUstreamCaptureStatus,
};
use cudarc::driver::{CudaGraph, CudaSlice};

/// Whether one-token steps run as a graph.
pub enum Decode {
    /// Not captured yet.
    Untried,
    /// Captured: replay it.
    Captured(Step),
    /// Off: by `DROVER_CUDA_GRAPH=0`, for cuBLAS, or after a failed capture.
    Off,
}

/// A captured step and the buffers it reads its input from and writes its
/// output to (allocated before the capture, so they outlive it).
pub struct Step {
    graph: CudaGraph,
    input: CudaSlice<f32>,
    output: CudaSlice<f32>,
}

// SAFETY: Send only moves the step to another thread. The graph's
// handles are the driver's, not tied to the thread that made them: any
// thread may launch or destroy them once the context is current there,
// and cudarc makes it current before each launch and in Drop.
unsafe impl Send for Step {}

/// Whether graphs are wanted (`DROVER_CUDA_GRAPH=0` says no).
fn wanted() -> bool {
    std::env::var("DROVER_CUDA_GRAPH").map_or(true, |v| v != "0")
}

impl DeviceStage {
    /// Runs one token's activations `x` through the captured step (after
    /// capturing it, the first time), with the position already uploaded:
    /// the output, or None where graphs are off.
    pub(super) fn decode_step(&mut self, x: &[f32]) -> Result<Option<Vec<f32>>, String> {
        if matches!(self.decode, Decode::Untried) {
            self.decode = self.capture()?;
        }
        let Decode::Captured(step) = &mut self.decode else {
            return Ok(None);
        };
        let stream = self.gpu.stream.clone();
        stream
            .memcpy_htod(x, &mut step.input)
            .map_err(|e| format!("upload: {e}"))?;
        step.graph
            .launch()
            .map_err(|e| format!("decode graph: {e}"))?;
        let out = stream
            .clone_dtoh(&step.output)
            .map_err(|e| format!("download: {e}"))?;
        Ok(Some(out))
    }

    /// Captures one token's step: input copied into a fresh buffer, the
    /// blocks and head, the result copied out.
    fn capture(&mut self) -> Result<Decode, String> {
        if !wanted() || (self.gpu.blas.is_some() && self.has_float_products()) {
            return Ok(Decode::Off);
        }
        let ctx = self.gpu.stream.context().clone();
        let what = |e: cudarc::driver::DriverError| format!("--backend cuda: {e}");
        // The step's buffers must be allocated and freed in stream order to
        // be captured (cudarc frees synchronously without memory pools,
        // which would break the capture).
        let pools = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
            .map_err(what)?;
        if pools == 0 {
            return Ok(Decode::Off);
        }
        // An error a Drop stored earlier is the device's, not the capture's:
        // report it here rather than let it turn graphs off.
        ctx.check_err().map_err(what)?;
        let d = self.config.embedding;
        let out_len = self.head.as_ref().map_or(d, |(_, output)| output.rows);
        let input = self.gpu.alloc::<f32>(d)?;
        let mut output = self.gpu.alloc::<f32>(out_len)?;
        let stream = self.gpu.stream.clone();
        if stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .is_err()
        {
            return Ok(Decode::Off);
        }
        let capacity = self.capacity;
        let body = (|| {
            let mut xd = self.gpu.alloc::<f32>(d)?;
            self.gpu.copy(&input, &mut xd)?;
            let y = self.run(xd, 1, capacity, Logits::Last)?;
            self.gpu.copy(&y, &mut output)
        })();
        // A capture that broke part way leaves errors stored by the Drops of
        // its buffers (their frees fail once it is invalid); cudarc would
        // return such an error before ending the capture, and the stream
        // would stay in capture mode. Clear them, then end it.
        let _ = ctx.check_err();
        let graph = stream.end_capture(CUgraphInstantiate_flags_enum(0));
        let _ = ctx.check_err();
        let capturing = stream.capture_status().map_err(what)?;
        if capturing != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err("--backend cuda: the decode step's capture could not be ended".into());
        }
        match (body, graph) {
            (Ok(()), Ok(Some(graph))) => Ok(Decode::Captured(Step {
                graph,
                input,
                output,
            })),
            _ => Ok(Decode::Off),
        }
    }
}
