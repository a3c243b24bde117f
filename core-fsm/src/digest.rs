//! A stable 64-bit digest to fold transitions into, so two runs of a seed
//! can be compared step by step without keeping both transcripts: FNV-1a
//! a byte at a time for short keys (a node's generator is derived from its
//! id's), and eight bytes a step for the long inputs every simulated step
//! folds (its input and effects, serialized or formatted).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A running digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest(pub u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

impl Digest {
    /// Folds `bytes` into the digest.
    pub fn update(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Folds a value's `Debug` text into the digest, as the formatter
    /// writes it (a value's text is always written in the same pieces).
    pub fn update_debug<T: fmt::Debug>(&mut self, value: &T) {
        let _ = fmt::write(&mut Stream(self), format_args!("{value:?}"));
        self.update(b"\n");
    }

    /// Folds `bytes` eight at a time, the last word padded with zeros and
    /// marked with its length: for long inputs (formatted or serialized
    /// values), where a byte at a time is the cost.
    pub fn update_words(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.mix(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            // Shifted in, not copied to a buffer and loaded: a load of
            // bytes just stored one by one waits for them.
            let word =
                (rest.iter().enumerate()).fold(0u64, |w, (i, &b)| w | u64::from(b) << (8 * i));
            self.mix(word ^ ((rest.len() as u64) << 56));
        }
    }

    /// One word into the digest: a rotation, an exclusive or and an odd
    /// multiplier, each a bijection of the state.
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// Folds text into a digest as it is formatted.
struct Stream<'a>(&'a mut Digest);

impl fmt::Write for Stream<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.update_words(s.as_bytes());
        Ok(())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_order_sensitive() {
        let mut a = Digest::default();
        a.update(b"ab");
        let mut b = Digest::default();
        b.update(b"ba");
        assert_ne!(a, b);
        let mut c = Digest::default();
        c.update(b"ab");
        assert_eq!(a, c);
    }

    #[test]
    fn formatted_values_differ_in_any_byte_and_in_length() {
        let of = |v: &dyn fmt::Debug| {
            let mut d = Digest::default();
            d.update_debug(&v);
            d
        };
        assert_eq!(of(&("abcdefghij", 7)), of(&("abcdefghij", 7)));
        assert_ne!(of(&"abcdefghij"), of(&"abcdefghik"));
        assert_ne!(of(&(1, 2)), of(&(2, 1)));
        // A short last word is marked with its length: trailing zero bytes
        // are not padding.
        let words = |b: &[u8]| {
            let mut d = Digest::default();
            d.update_words(b);
            d
        };
        assert_ne!(words(b"abc"), words(b"abc\0"));
        assert_ne!(words(b"abcdefgh"), words(b"abcdefgh\0"));
    }
}
