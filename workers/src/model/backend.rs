//! Where a stage's blocks run: the CPU, or one NVIDIA GPU
//! ([`crate::cuda`]).

/// A stage's compute backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Backend {
    /// The CPU kernels (`crate::kernels`).
    #[default]
    Cpu,
    /// CUDA on device 0 ([`crate::cuda`]).
    Cuda,
}

impl Backend {
    /// The backend `--backend NAME` names (`cpu`, `cuda`).
    pub fn parse(name: &str) -> Result<Backend, String> {
        match name {
            "cpu" => Ok(Backend::Cpu),
            "cuda" => Ok(Backend::Cuda),
            other => Err(format!("--backend {other}: unknown (cpu, cuda)")),
        }
    }

    /// Its name, as `--backend` and a plan take it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        }
    }

    /// Checks that this machine can run the backend, naming what is missing
    /// (the CPU always can); a CLI calls it before loading anything.
    pub fn check(self) -> Result<(), String> {
        match self {
            Backend::Cpu => Ok(()),
            Backend::Cuda => crate::cuda::probe().map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_others_are_refused() {
        assert_eq!(Backend::parse("cpu"), Ok(Backend::Cpu));
        assert_eq!(Backend::parse("cuda"), Ok(Backend::Cuda));
        let e = Backend::parse("rocm").unwrap_err();
        assert!(e.contains("rocm") && e.contains("cpu, cuda"), "{e}");
        assert_eq!(Backend::Cpu.check(), Ok(()));
    }
}
