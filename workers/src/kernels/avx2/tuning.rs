//! The choices among correct kernels that the processor's maker decides:
//! the instruction sets say which kernels can run, and measurements on
//! each maker's processors say which of them run faster. Every choice
//! gives the same bits; only the speed differs.

/// Whose measurements pick the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tuning {
    /// AMD processors before Zen 5, CPUID family under 26 (the choices
    /// measured on 2-core Zen 4 EPYC VMs; a Zen 3 takes them unmeasured).
    Amd,
    /// AMD processors from Zen 5 on (CPUID family 26 and later; measured
    /// on a 2-core Zen 5 EPYC VM): [`Tuning::Amd`]'s choices but asking
    /// ahead for packed weights, as on Intel's (see [`Tuning::prefetch`]).
    Zen5,
    /// Every other maker (measured: 2-core Intel Xeon VMs).
    Other,
}

impl Tuning {
    /// The tuning of this processor, by its CPUID vendor string and, for
    /// AMD, its family.
    pub fn detect() -> Tuning {
        #[cfg(target_arch = "x86_64")]
        {
            let id = std::arch::x86_64::__cpuid(0);
            let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
                .iter()
                .flat_map(|r| r.to_le_bytes())
                .collect();
            if vendor == b"AuthenticAMD" {
                return Tuning::amd(std::arch::x86_64::__cpuid(1).eax);
            }
        }
        Tuning::Other
    }

    /// An AMD processor's tuning by its CPUID leaf 1 `eax`: the family is
    /// the base family (bits 8-11) plus, where that is 15, the extended
    /// family (bits 20-27); Zen 5 is family 26.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn amd(eax: u32) -> Tuning {
        let base = (eax >> 8) & 0xF;
        let family = if base == 0xF {
            base + ((eax >> 20) & 0xFF)
        } else {
            base
        };
        if family >= 26 {
            Tuning::Zen5
        } else {
            Tuning::Amd
        }
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
    /// there). On a 2-core Zen 5 the pairs and the rows as stored decode
    /// alike (39.4-44.0 against 44.7-45.0 tok/s in two pairs of runs) and
    /// the pairs prefill a little faster (349-357 against 337-339).
    pub fn f16_pairs(self) -> bool {
        self != Tuning::Other
    }

    /// Whether a packed product of one token (`x8`) asks for its weights'
    /// bytes ahead of its reading. On a 2-core Xeon, 0.5B q4_0 decode:
    /// 34-37 tok/s without, 47-54 with (see `x8::AHEAD`). On a 2-core AMD
    /// EPYC (Zen 4, the VNNI kernels), 0.5B decode, 5 interleaved rounds,
    /// medians with and without: one thread q4_K_M 53.6 -> 67.4 tok/s,
    /// q4_0 73.3 -> 79.5, q8_0 41.9 -> 45.9; two threads q4_K_M 73.2 ->
    /// 84.8, q4_0 101.4 -> 101.7, q8_0 55.7 -> 59.7. There a profile of
    /// one-thread q4_K_M decode put a fifth of the packed kernel's time on
    /// the prefetch instructions themselves. On a 2-core Zen 5 EPYC VM
    /// asking ahead is faster again: 0.5B decode, two threads, three
    /// interleaved pairs of runs, without and with: q4_0 140-144 -> 175-178
    /// tok/s, q4_K_M 143-144 -> 145-148; two pairs, iq4_nl 98-115 ->
    /// 140-143, q3_K_M 96-99 -> 120-123, q5_K_M 102-104 -> 107-108.
    pub fn prefetch(self) -> bool {
        self != Tuning::Amd
    }
}

#[cfg(test)]
mod tests {
    use super::Tuning;

    #[test]
    fn amd_families_pick_their_tunings() {
        // CPUID leaf 1 eax: stepping 0-3, model 4-7, family 8-11, extended
        // model 16-19, extended family 20-27.
        let eax = |ext_family: u32, ext_model: u32, model: u32| {
            ext_family << 20 | ext_model << 16 | 0xF << 8 | model << 4 | 1
        };
        assert_eq!(Tuning::amd(eax(0xA, 1, 1)), Tuning::Amd, "Zen 4, family 25");
        assert_eq!(Tuning::amd(eax(0xA, 0, 1)), Tuning::Amd, "Zen 3, family 25");
        assert_eq!(Tuning::amd(eax(0x8, 3, 1)), Tuning::Amd, "Zen 2, family 23");
        assert_eq!(
            Tuning::amd(eax(0xB, 0, 2)),
            Tuning::Zen5,
            "Zen 5, family 26"
        );
        assert_eq!(Tuning::amd(eax(0xC, 0, 0)), Tuning::Zen5, "family 27");
        // A base family under 15 stands alone (the extended one is not added).
        assert_eq!(Tuning::amd(0xB << 20 | 0x6 << 8), Tuning::Amd);
    }
}
