//! The choices among correct kernels that the processor's maker decides:
//! the instruction sets say which kernels can run, and measurements on
//! each maker's processors say which of them run faster. Every choice
//! gives the same bits; only the speed differs.

/// Whose measurements pick the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tuning {
    /// AMD processors (the choices measured on 2-core Zen 4 EPYC VMs; a
    /// Zen 3 takes them unmeasured).
    Amd,
    /// Every other maker (measured: 2-core Intel Xeon VMs).
    Other,
}

impl Tuning {
    /// The tuning of this processor, by its CPUID vendor string.
    pub fn detect() -> Tuning {
        #[cfg(target_arch = "x86_64")]
        {
            let id = std::arch::x86_64::__cpuid(0);
            let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
                .iter()
                .flat_map(|r| r.to_le_bytes())
                .collect();
            if vendor == b"AuthenticAMD" {
                return Tuning::Amd;
            }
        }
        Tuning::Other
    }

    /// Whether f16, with AVX-512, is packed in pairs of rows (`pairs`) for
    /// the 512-bit pair kernels, rather than multiplied as stored. On a
    /// 2-core AMD EPYC (Zen 4), 0.5B f16, 2 threads, 3 interleaved rounds:
    /// decode 23.9 -> 30.6 tok/s and 512-token prefill 164.5 -> 175.8 with
    /// the pairs (llama.cpp 37.9 and 187.0 in the same rounds); one thread
    /// 15.3 -> 22.6 and 96.1 -> 101.2 (llama.cpp 23.6 and 101.6). One row
    /// as stored keeps its two sums in one register, a single chain of
    /// fused multiply-adds; two rows from their own places are two
    /// streams, which the EPYC reads slower. On a 2-core Xeon the rows as
    /// stored beat the 256-bit pairs (the 512-bit pairs were not measured
    /// there).
    pub fn f16_pairs(self) -> bool {
        self == Tuning::Amd
    }

    /// Whether a packed product of one token (`x8`) asks for its weights'
    /// bytes ahead of its reading. On a 2-core Xeon, 0.5B q4_0 decode:
    /// 34-37 tok/s without, 47-54 with (see `x8::AHEAD`). On a 2-core AMD
    /// EPYC (Zen 4, the VNNI kernels), 0.5B decode, 5 interleaved rounds,
    /// medians with and without: one thread q4_K_M 53.6 -> 67.4 tok/s,
    /// q4_0 73.3 -> 79.5, q8_0 41.9 -> 45.9; two threads q4_K_M 73.2 ->
    /// 84.8, q4_0 101.4 -> 101.7, q8_0 55.7 -> 59.7. There a profile of
    /// one-thread q4_K_M decode put a fifth of the packed kernel's time on
    /// the prefetch instructions themselves.
    pub fn prefetch(self) -> bool {
        self == Tuning::Other
    }
}
