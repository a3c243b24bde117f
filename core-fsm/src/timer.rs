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
///
/// A machine has a handful of kinds and rarely more than two armed at
/// once, so the table is a small vector kept in key order: a search of a
/// few entries beats a tree, and `clear` keeps the capacity, so a machine
/// allocates for its timers about once in its life.
///
/// Serialized as a map from kind to deadline, as it always was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "BTreeMap<K, Instant>",
    into = "BTreeMap<K, Instant>",
    bound(
        serialize = "K: Ord + Clone + Serialize",
        deserialize = "K: Ord + Deserialize<'de>"
    )
)]
pub struct TimerTable<K: Ord> {
    /// Armed kinds in ascending key order, each once.
    deadlines: Vec<(K, Instant)>,
}

impl<K: Ord> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable {
            deadlines: Vec::new(),
        }
    }
}

impl<K: Ord> From<BTreeMap<K, Instant>> for TimerTable<K> {
    fn from(map: BTreeMap<K, Instant>) -> Self {
        // A map iterates in key order: the table's own order.
        TimerTable {
            deadlines: map.into_iter().collect(),
        }
    }
}

impl<K: Ord> From<TimerTable<K>> for BTreeMap<K, Instant> {
    fn from(table: TimerTable<K>) -> Self {
        table.deadlines.into_iter().collect()
    }
}

impl<K: Ord + Clone> TimerTable<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where `kind` is, or where it would go.
    fn position(&self, kind: &K) -> Result<usize, usize> {
        self.deadlines.binary_search_by(|(k, _)| k.cmp(kind))
    }

    /// Arms (or re-arms) `kind` to fire at `at`.
    pub fn set(&mut self, kind: K, at: Instant) {
        match self.position(&kind) {
            Ok(i) => self.deadlines[i].1 = at,
            Err(i) => self.deadlines.insert(i, (kind, at)),
        }
    }

    /// Disarms `kind`; disarming an unarmed timer is a no-op.
    pub fn cancel(&mut self, kind: &K) {
        if let Ok(i) = self.position(kind) {
            self.deadlines.remove(i);
        }
    }

    /// Disarms every timer.
    pub fn clear(&mut self) {
        self.deadlines.clear();
    }

    /// Whether `kind` is armed.
    pub fn is_set(&self, kind: &K) -> bool {
        self.position(kind).is_ok()
    }

    /// When `kind` fires, if armed.
    pub fn deadline(&self, kind: &K) -> Option<Instant> {
        self.position(kind).ok().map(|i| self.deadlines[i].1)
    }

    /// The earliest deadline of all armed timers.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.iter().map(|(_, at)| *at).min()
    }

    /// Removes and returns every kind due at or before `now`, earliest first
    /// (ties in key order).
    pub fn take_expired(&mut self, now: Instant) -> Vec<K> {
        if !self.deadlines.iter().any(|(_, at)| *at <= now) {
            return Vec::new();
        }
        let mut due: Vec<(Instant, K)> = Vec::new();
        self.deadlines.retain(|(k, at)| {
            let expired = *at <= now;
            if expired {
                due.push((*at, k.clone()));
            }
            !expired
        });
        // Stable: equal deadlines keep key order.
        due.sort_by_key(|entry| entry.0);
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
    fn ties_expire_in_key_order() {
        let mut t = TimerTable::new();
        t.set(T::B, Instant(10));
        t.set(T::A, Instant(10));
        assert_eq!(t.take_expired(Instant(10)), vec![T::A, T::B]);
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
