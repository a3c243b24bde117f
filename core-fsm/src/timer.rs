//! A small table of deadlines, keyed by a machine's own timer kinds.
//!
//! Timers are data the machine owns. The effect loop reads
//! [`TimerTable::next_deadline`] and delivers a tick; the machine then takes
//! the expired kinds with [`TimerTable::take_expired`]. A tick with nothing
//! expired is a no-op, never an error.

use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Deadlines by timer kind; at most one deadline per kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerTable<K: Ord> {
    deadlines: BTreeMap<K, Instant>,
}

impl<K: Ord> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable {
            deadlines: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> TimerTable<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms (or re-arms) `kind` to fire at `at`.
    pub fn set(&mut self, kind: K, at: Instant) {
        self.deadlines.insert(kind, at);
    }

    /// Disarms `kind`; disarming an unarmed timer is a no-op.
    pub fn cancel(&mut self, kind: &K) {
        self.deadlines.remove(kind);
    }

    /// Disarms every timer.
    pub fn clear(&mut self) {
        self.deadlines.clear();
    }

    /// Whether `kind` is armed.
    pub fn is_set(&self, kind: &K) -> bool {
        self.deadlines.contains_key(kind)
    }

    /// When `kind` fires, if armed.
    pub fn deadline(&self, kind: &K) -> Option<Instant> {
        self.deadlines.get(kind).copied()
    }

    /// The earliest deadline of all armed timers.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.values().min().copied()
    }

    /// Removes and returns every kind due at or before `now`, earliest first
    /// (ties in key order).
    pub fn take_expired(&mut self, now: Instant) -> Vec<K> {
        let mut due: Vec<(Instant, K)> = self
            .deadlines
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, at)| (*at, k.clone()))
            .collect();
        due.sort_by_key(|entry| entry.0);
        for (_, k) in &due {
            self.deadlines.remove(k);
        }
        due.into_iter().map(|(_, k)| k).collect()
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum T {
        A,
        B,
    }

    #[test]
    fn expiry_in_deadline_order() {
        let mut t = TimerTable::new();
        t.set(T::A, Instant(20));
        t.set(T::B, Instant(10));
        assert_eq!(t.next_deadline(), Some(Instant(10)));
        assert!(t.take_expired(Instant(5)).is_empty());
        assert_eq!(t.take_expired(Instant(25)), vec![T::B, T::A]);
        assert!(t.is_empty());
    }

    #[test]
    fn rearm_and_cancel() {
        let mut t = TimerTable::new();
        t.set(T::A, Instant(20));
        t.set(T::A, Instant(30));
        assert_eq!(t.deadline(&T::A), Some(Instant(30)));
        t.cancel(&T::A);
        t.cancel(&T::B);
        assert_eq!(t.next_deadline(), None);
    }
}
