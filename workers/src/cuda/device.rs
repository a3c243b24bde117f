//! One GPU as a stage uses it: its context and stream, the compiled
//! kernels by name, and cuBLAS when it loads.

use super::compile::{self, SOURCES};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchArgs, LaunchConfig};
use cudarc::nvrtc::Ptx;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The device, its kernels and its BLAS.
pub struct Gpu {
    /// The stream every kernel and copy of the stage runs on, in order.
    pub stream: Arc<CudaStream>,
    /// cuBLAS on that stream, where the library loads (and is wanted).
    pub blas: Option<CudaBlas>,
    /// The device's name and architecture, for reports.
    pub name: String,
    functions: BTreeMap<&'static str, CudaFunction>,
}

impl Gpu {
    /// Opens device `ordinal` and compiles every kernel for it; the
    /// libraries must have passed [`super::probe`].
    pub fn open(ordinal: usize, use_cublas: bool) -> Result<Gpu, String> {
        let what =
            |e: cudarc::driver::DriverError| format!("--backend cuda: device {ordinal}: {e}");
        let ctx = CudaContext::new(ordinal).map_err(what)?;
        // SAFETY: a stage runs every kernel and copy on the one stream
        // below, in order, so no buffer is used by two streams and none is
        // freed while another stream still uses it: the events cudarc would
        // otherwise create and destroy with every buffer (two each, a driver
        // call apiece, for each of a step's short-lived activations) guard
        // nothing here.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().map_err(what)?;
        let arch = compile::arch_name(major, minor);
        let name = format!("{} ({arch})", ctx.name().map_err(what)?);
        // A stream of its own, not the legacy default one, which cannot
        // be captured into a graph (`graph.rs`).
        let stream = ctx.new_stream().map_err(what)?;
        let mut functions = BTreeMap::new();
        for source in SOURCES {
            let compiled = compile::compile(&source, &arch)?;
            let module = ctx
                .load_module(Ptx::from_binary(compiled.cubin))
                .map_err(|e| format!("--backend cuda: loading {}: {e}", source.name))?;
            for &kernel in source.kernels {
                let f = module
                    .load_function(kernel)
                    .map_err(|e| format!("--backend cuda: kernel {kernel}: {e}"))?;
                functions.insert(kernel, f);
            }
        }
        let blas = if use_cublas {
            Some(
                CudaBlas::new(stream.clone())
                    .map_err(|e| format!("--backend cuda: cuBLAS: {e:?}"))?,
            )
        } else {
            None
        };
        Ok(Gpu {
            stream,
            blas,
            name,
            functions,
        })
    }

    /// Launches kernel `name` with the arguments `args` pushes.
    pub fn launch<'a>(
        &'a self,
        name: &str,
        config: LaunchConfig,
        args: impl FnOnce(&mut LaunchArgs<'a>),
    ) -> Result<(), String> {
        let f = self
            .functions
            .get(name)
            .ok_or_else(|| format!("no kernel {name} was compiled"))?;
        let mut builder = self.stream.launch_builder(f);
        args(&mut builder);
        // SAFETY: every kernel's parameters are listed in its source; the
        // callers in `forward` push them in that order, with buffers sized
        // for the grid `config` describes (see `launch`'s shapes).
        unsafe { builder.launch(config) }
            .map(|_| ())
            .map_err(|e| format!("kernel {name}: {e}"))
    }
}
