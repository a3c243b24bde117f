//! The runtime's retry pauses: the core's one backoff
//! ([`core_fsm::time::backoff`]) in `std` time, so a log stream, a
//! container's log follower and an edge's dial wait as the machines' own
//! retries do.

use std::time::Duration;

/// The pause after failed attempt `attempt` (1 for the first): `base`,
/// doubling per attempt, never more than `max`.
pub fn pause(attempt: u32, base: Duration, max: Duration) -> Duration {
    let core = core_fsm::time::backoff(attempt, core(base), core(max));
    Duration::from_millis(core.as_millis())
}

/// A `std` duration as the core's (milliseconds, saturating).
pub fn core(d: Duration) -> core_fsm::Duration {
    core_fsm::Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_the_base_to_the_ceiling() {
        let (base, max) = (Duration::from_millis(20), Duration::from_secs(1));
        let pauses: Vec<u64> = (1..=8)
            .map(|n| pause(n, base, max).as_millis() as u64)
            .collect();
        assert_eq!(pauses, vec![20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(pause(0, base, max), base, "attempt 0 counts as 1");
        assert_eq!(
            core(Duration::MAX),
            core_fsm::Duration::from_millis(u64::MAX)
        );
    }
}
