//! How often long work (a model's download or hash, a slice's fetch) says
//! how far it got.

use std::time::{Duration, Instant};

/// Due at most once a period, the first time a period after it was made.
pub struct Every {
    period: Duration,
    last: Instant,
}

impl Every {
    /// Due first one `period` from now.
    pub fn new(period: Duration) -> Every {
        Every {
            period,
            last: Instant::now(),
        }
    }

    /// Whether a period has passed since it was made or was last due.
    pub fn due(&mut self) -> bool {
        let due = self.last.elapsed() >= self.period;
        if due {
            self.last = Instant::now();
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_once_a_period_and_never_before_the_first() {
        let mut always = Every::new(Duration::ZERO);
        assert!(always.due() && always.due());
        let mut hourly = Every::new(Duration::from_secs(3600));
        assert!(!hourly.due());
    }
}
