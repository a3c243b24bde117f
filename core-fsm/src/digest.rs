//! A stable 64-bit digest (FNV-1a) to fold transitions into, so two runs of a
//! seed can be compared step by step without keeping both transcripts.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A running FNV-1a digest.
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

    /// Folds a value's `Debug` text into the digest.
    pub fn update_debug<T: fmt::Debug>(&mut self, value: &T) {
        // Streamed: the same bytes as the formatted text, without it.
        let _ = fmt::write(&mut Stream(self), format_args!("{value:?}"));
        self.update(b"\n");
    }
}

/// Folds text into a digest as it is formatted.
struct Stream<'a>(&'a mut Digest);

impl fmt::Write for Stream<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.update(s.as_bytes());
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
}
