//! A seeded generator for sampling and for the project's random fixtures.

/// SplitMix64: small, well mixed, and the same sequence for a seed on every
/// platform and in every version of this crate (fixtures depend on that).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Moves past the next `n` outputs at once (the state is a counter), so
    /// a stream can be drawn in pieces on several threads, each piece
    /// starting where the ones before it end.
    pub fn skip(&mut self, n: u64) {
        self.state = self
            .state
            .wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }

    /// Uniform in [0, 1).
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-a, a).
    pub fn symmetric(&mut self, a: f32) -> f32 {
        ((self.next_unit() * 2.0 - 1.0) as f32) * a
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn skipping_n_outputs_lands_where_drawing_them_does() {
        for n in [0u64, 1, 2, 1000, 65_537] {
            let mut drawn = SplitMix64::new(7);
            (0..n).for_each(|_| {
                drawn.next_u64();
            });
            let mut skipped = SplitMix64::new(7);
            skipped.skip(n);
            assert_eq!(skipped.next_u64(), drawn.next_u64(), "n = {n}");
        }
    }
}
