//! The GPU's own copy bandwidth, the bound a decode step's weight reads
//! are held to in `drover-worker bench --backend cuda`.

use cudarc::driver::CudaContext;
use cudarc::driver::sys::CUevent_flags;

/// Bytes per second device 0 moves copying (read plus write) a 1 GiB
/// buffer within its own memory, the best of five copies timed with
/// events on the stream.
pub fn copy_bandwidth() -> Result<f64, String> {
    let what = |e: cudarc::driver::DriverError| format!("--backend cuda: copy bandwidth: {e}");
    let ctx = CudaContext::new(0).map_err(what)?;
    let stream = ctx.default_stream();
    let n = 1usize << 30;
    let src = stream.alloc_zeros::<u8>(n).map_err(what)?;
    let mut dst = stream.alloc_zeros::<u8>(n).map_err(what)?;
    let start = ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(what)?;
    let end = ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(what)?;
    // One copy first, untimed: the first touch of the pages costs extra.
    stream.memcpy_dtod(&src, &mut dst).map_err(what)?;
    let mut best_ms = f32::MAX;
    for _ in 0..5 {
        start.record(&stream).map_err(what)?;
        stream.memcpy_dtod(&src, &mut dst).map_err(what)?;
        end.record(&stream).map_err(what)?;
        best_ms = best_ms.min(start.elapsed_ms(&end).map_err(what)?);
    }
    stream.synchronize().map_err(what)?;
    // A copy moves each byte twice: once read, once written.
    Ok(2.0 * n as f64 / (f64::from(best_ms) / 1e3))
}
