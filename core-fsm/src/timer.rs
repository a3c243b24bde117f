//! A small table of deadlines, keyed by a machine's own timer kinds.
//!
//! Timers are data the machine owns. The effect loop reads
//! [`TimerTable::next_deadline`] and delivers a tick; the machine then takes
//! the expired kinds with [`TimerTable::take_expired`]. A tick with nothing
//! expired is a no-op, never an error.

use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Timers kept inline; more armed at once spill to a vector.
const INLINE: usize = 3;

/// Deadlines by timer kind; at most one deadline per kind.
///
/// A machine has a handful of kinds and rarely more than two armed at
/// once, so the first [`INLINE`] armed timers live in the table itself (a
/// machine allocates nothing for its timers) and any more in a vector;
/// every operation looks at a few entries. Entries are in no order: expiry
/// sorts what is due (earliest first, ties in key order), and equality,
/// `Debug` and serialization see the table as a map from kind to deadline,
/// as it always was.
#[derive(Clone, Serialize, Deserialize)]
#[serde(
    from = "BTreeMap<K, Instant>",
    into = "BTreeMap<K, Instant>",
    bound(
        serialize = "K: Ord + Clone + Serialize",
        deserialize = "K: Ord + Deserialize<'de>"
    )
)]
pub struct TimerTable<K: Ord> {
    /// Armed timers, in any order, with free places anywhere.
    inline: [Option<(K, Instant)>; INLINE],
    /// Armed timers beyond the inline places.
    spilled: Vec<(K, Instant)>,
}

impl<K: Ord> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable {
            inline: std::array::from_fn(|_| None),
            spilled: Vec::new(),
        }
    }
}

impl<K: Ord> From<BTreeMap<K, Instant>> for TimerTable<K> {
    fn from(map: BTreeMap<K, Instant>) -> Self {
        let mut table = TimerTable::default();
        for (kind, at) in map {
            table.insert_new(kind, at);
        }
        table
    }
}

impl<K: Ord> From<TimerTable<K>> for BTreeMap<K, Instant> {
    fn from(table: TimerTable<K>) -> Self {
        let TimerTable { inline, spilled } = table;
        inline.into_iter().flatten().chain(spilled).collect()
    }
}

impl<K: Ord> PartialEq for TimerTable<K> {
    fn eq(&self, other: &Self) -> bool {
        self.entries().count() == other.entries().count()
            && self
                .entries()
                .all(|(kind, at)| other.find(kind).map(|(_, a)| a) == Some(*at))
    }
}

impl<K: Ord> Eq for TimerTable<K> {}

impl<K: Ord + std::fmt::Debug> std::fmt::Debug for TimerTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut entries: Vec<(&K, &Instant)> = self.entries().map(|(k, at)| (k, at)).collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        f.debug_map().entries(entries).finish()
    }
}

impl<K: Ord> TimerTable<K> {
    /// Every armed timer, in no particular order.
    fn entries(&self) -> impl Iterator<Item = &(K, Instant)> {
        self.inline.iter().flatten().chain(&self.spilled)
    }

    /// Where `kind` is armed, and when it fires.
    fn find(&self, kind: &K) -> Option<(Place, Instant)> {
        for (i, entry) in self.inline.iter().enumerate() {
            if let Some((k, at)) = entry
                && k == kind
            {
                return Some((Place::Inline(i), *at));
            }
        }
        let i = self.spilled.iter().position(|(k, _)| k == kind)?;
        Some((Place::Spilled(i), self.spilled[i].1))
    }

    /// Arms a kind known not to be armed.
    fn insert_new(&mut self, kind: K, at: Instant) {
        match self.inline.iter_mut().find(|entry| entry.is_none()) {
            Some(free) => *free = Some((kind, at)),
            None => self.spilled.push((kind, at)),
        }
    }
}

/// Where an armed timer is kept.
#[derive(Clone, Copy)]
enum Place {
    Inline(usize),
    Spilled(usize),
}

impl<K: Ord + Clone> TimerTable<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms (or re-arms) `kind` to fire at `at`.
    pub fn set(&mut self, kind: K, at: Instant) {
        match self.find(&kind) {
            Some((Place::Inline(i), _)) => self.inline[i] = Some((kind, at)),
            Some((Place::Spilled(i), _)) => self.spilled[i].1 = at,
            None => self.insert_new(kind, at),
        }
    }

    /// Disarms `kind`; disarming an unarmed timer is a no-op.
    pub fn cancel(&mut self, kind: &K) {
        match self.find(kind) {
            Some((Place::Inline(i), _)) => self.inline[i] = None,
            Some((Place::Spilled(i), _)) => {
                self.spilled.swap_remove(i);
            }
            None => {}
        }
    }

    /// Disarms every timer.
    pub fn clear(&mut self) {
        self.inline = std::array::from_fn(|_| None);
        self.spilled.clear();
    }

    /// Whether `kind` is armed.
    pub fn is_set(&self, kind: &K) -> bool {
        self.find(kind).is_some()
    }

    /// When `kind` fires, if armed.
    pub fn deadline(&self, kind: &K) -> Option<Instant> {
        self.find(kind).map(|(_, at)| at)
    }

    /// The earliest deadline of all armed timers.
    pub fn next_deadline(&self) -> Option<Instant> {
        // Plain loops: this runs after every step of every machine.
        let mut earliest: Option<Instant> = None;
        let mut see = |at: Instant| earliest = Some(earliest.map_or(at, |e| e.min(at)));
        for (_, at) in self.inline.iter().flatten() {
            see(*at);
        }
        for (_, at) in &self.spilled {
            see(*at);
        }
        earliest
    }

    /// Removes and returns every kind due at or before `now`, earliest first
    /// (ties in key order).
    pub fn take_expired(&mut self, now: Instant) -> Vec<K> {
        if !self.entries().any(|(_, at)| *at <= now) {
            return Vec::new();
        }
        let mut due: Vec<(Instant, K)> = Vec::new();
        for entry in &mut self.inline {
            if entry.as_ref().is_some_and(|(_, at)| *at <= now)
                && let Some((kind, at)) = entry.take()
            {
                due.push((at, kind));
            }
        }
        self.spilled.retain(|(k, at)| {
            let expired = *at <= now;
            if expired {
                due.push((*at, k.clone()));
            }
            !expired
        });
        due.sort();
        due.into_iter().map(|(_, k)| k).collect()
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.entries().count()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.inline.iter().all(Option::is_none) && self.spilled.is_empty()
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

    #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct N(u32);

    #[test]
    fn more_timers_than_inline_places_behave_the_same() {
        let mut t = TimerTable::new();
        for n in (0..10).rev() {
            t.set(N(n), Instant(100 - u64::from(n % 3)));
        }
        assert_eq!(t.len(), 10);
        t.set(N(7), Instant(5));
        t.cancel(&N(0));
        t.cancel(&N(9));
        assert_eq!(t.len(), 8);
        assert_eq!(t.next_deadline(), Some(Instant(5)));
        assert_eq!(t.deadline(&N(8)), Some(Instant(98)));
        assert!(!t.is_set(&N(9)));
        let copy: TimerTable<N> = BTreeMap::from(t.clone()).into();
        assert_eq!(copy, t, "a map round trip keeps the table");
        // Earliest first, ties in key order.
        let due = t.take_expired(Instant(99));
        assert_eq!(due, vec![N(7), N(2), N(5), N(8), N(1), N(4)]);
        assert_eq!(t.len(), 2);
        assert_eq!(t.take_expired(Instant(100)), vec![N(3), N(6)]);
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
