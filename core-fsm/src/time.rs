//! Virtual time: milliseconds since the run epoch.
//!
//! The core never reads a clock. Every `handle` call is given `now`; the effect
//! loop maps its runtime's clock onto this type, and the simulator sets it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in time, in milliseconds since the run epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Instant(pub u64);

/// A span of time in milliseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Duration(pub u64);

impl Instant {
    /// The run epoch.
    pub const ZERO: Instant = Instant(0);

    /// Milliseconds since the epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration(0);

    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Duration {
        Duration(ms)
    }

    /// A duration of `s` seconds.
    pub const fn from_secs(s: u64) -> Duration {
        Duration(s * 1000)
    }

    /// Milliseconds in this duration.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// `self * factor`, saturating.
    pub fn saturating_mul(self, factor: u64) -> Duration {
        Duration(self.0.saturating_mul(factor))
    }
}

/// The one retry backoff: the wait after failed attempt `attempt` is
/// `min(base * 2^(attempt - 1), max)` (attempt 0 counts as 1). The node
/// manager's retries and the reconciler's replacements both wait this long.
pub fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let doublings = attempt.saturating_sub(1).min(63);
    base.saturating_mul(1u64 << doublings).min(max)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        Duration(self.0.saturating_add(rhs.0))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}ms", self.0)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Instant(5) + Duration(7), Instant(12));
        assert_eq!(Instant(5) - Instant(7), Duration::ZERO);
        assert_eq!(Instant(u64::MAX) + Duration(1), Instant(u64::MAX));
        assert_eq!(Duration::from_secs(2).saturating_mul(3), Duration(6000));
    }
}
