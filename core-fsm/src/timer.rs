//! A small table of deadlines, one place per timer kind (as quinn-proto's
//! `TimerTable` is).
//!
//! Timers are data the machine owns. The effect loop reads
//! [`TimerTable::next_deadline`] and delivers a tick; the machine then takes
//! the expired kinds with [`TimerTable::take_expired`]. A tick with nothing
//! expired is a no-op, never an error.

use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::marker::PhantomData;

/// A machine's timer kinds: a field-less enum whose variants index a
/// [`TimerTable`].
pub trait Timer: Copy + Ord + 'static {
    /// Every kind, in declaration (and so in `Ord`) order.
    const ALL: &'static [Self];
    /// The kind's place in [`Timer::ALL`].
    fn index(self) -> usize;
}

/// Implements [`Timer`] for a field-less enum, listing its variants, and
/// names its table `Timers`.
macro_rules! timer_kinds {
    ($kind:ident: $($variant:ident),+ $(,)?) => {
        impl $crate::timer::Timer for $kind {
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn index(self) -> usize {
                self as usize
            }
        }

        /// The machine's timers, one place per kind.
        pub(crate) type Timers =
            $crate::timer::TimerTable<$kind, { [$(stringify!($variant)),+].len() }>;
    };
}
pub(crate) use timer_kinds;

/// Deadlines by timer kind, `N` being `K::ALL.len()`; at most one deadline
/// per kind. Equality, `Debug` and serialization see the table as a map
/// from kind to deadline.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "BTreeMap<K, Instant>",
    into = "BTreeMap<K, Instant>",
    bound(
        serialize = "K: Timer + Serialize",
        deserialize = "K: Timer + Deserialize<'de>"
    )
)]
pub struct TimerTable<K: Timer, const N: usize> {
    deadlines: [Option<Instant>; N],
    kind: PhantomData<K>,
}

impl<K: Timer, const N: usize> Default for TimerTable<K, N> {
    fn default() -> Self {
        assert_eq!(K::ALL.len(), N, "a table has one place per timer kind");
        TimerTable {
            deadlines: [None; N],
            kind: PhantomData,
        }
    }
}

impl<K: Timer, const N: usize> From<BTreeMap<K, Instant>> for TimerTable<K, N> {
    fn from(map: BTreeMap<K, Instant>) -> Self {
        let mut table = TimerTable::default();
        for (kind, at) in map {
            table.set(kind, at);
        }
        table
    }
}

impl<K: Timer, const N: usize> From<TimerTable<K, N>> for BTreeMap<K, Instant> {
    fn from(table: TimerTable<K, N>) -> Self {
        table.armed().collect()
    }
}

impl<K: Timer + std::fmt::Debug, const N: usize> std::fmt::Debug for TimerTable<K, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.armed()).finish()
    }
}

impl<K: Timer, const N: usize> TimerTable<K, N> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every armed timer, in kind order.
    fn armed(&self) -> impl Iterator<Item = (K, Instant)> + '_ {
        K::ALL
            .iter()
            .zip(&self.deadlines)
            .filter_map(|(kind, at)| Some((*kind, (*at)?)))
    }

    /// Arms (or re-arms) `kind` to fire at `at`.
    pub fn set(&mut self, kind: K, at: Instant) {
        self.deadlines[kind.index()] = Some(at);
    }

    /// Disarms `kind`; disarming an unarmed timer is a no-op.
    pub fn cancel(&mut self, kind: &K) {
        self.deadlines[kind.index()] = None;
    }

    /// Disarms every timer.
    pub fn clear(&mut self) {
        self.deadlines = [None; N];
    }

    /// Whether `kind` is armed.
    pub fn is_set(&self, kind: &K) -> bool {
        self.deadlines[kind.index()].is_some()
    }

    /// When `kind` fires, if armed.
    pub fn deadline(&self, kind: &K) -> Option<Instant> {
        self.deadlines[kind.index()]
    }

    /// The earliest deadline of all armed timers.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }

    /// Removes and returns every kind due at or before `now`, earliest first
    /// (ties in kind order).
    pub fn take_expired(&mut self, now: Instant) -> Vec<K> {
        let mut due: Vec<(Instant, K)> = self
            .armed()
            .filter(|(_, at)| *at <= now)
            .map(|(kind, at)| (at, kind))
            .collect();
        due.sort();
        for (_, kind) in &due {
            self.cancel(kind);
        }
        due.into_iter().map(|(_, kind)| kind).collect()
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.deadlines.iter().flatten().count()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.deadlines.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    pub(crate) enum T {
        A,
        B,
    }
    timer_kinds!(T: A, B);

    type Table = Timers;

    #[test]
    fn expiry_in_deadline_order() {
        let mut t = Table::new();
        t.set(T::A, Instant(20));
        t.set(T::B, Instant(10));
        assert_eq!(t.next_deadline(), Some(Instant(10)));
        assert!(t.take_expired(Instant(5)).is_empty());
        assert_eq!(t.take_expired(Instant(25)), vec![T::B, T::A]);
        assert!(t.is_empty());
    }

    #[test]
    fn ties_expire_in_key_order() {
        let mut t = Table::new();
        t.set(T::B, Instant(10));
        t.set(T::A, Instant(10));
        assert_eq!(t.take_expired(Instant(10)), vec![T::A, T::B]);
    }

    #[test]
    fn a_map_round_trip_keeps_the_table() {
        let mut t = Table::new();
        t.set(T::B, Instant(7));
        assert_eq!(t.len(), 1);
        assert_eq!(format!("{t:?}"), "{B: Instant(7)}");
        let copy: Table = BTreeMap::from(t.clone()).into();
        assert_eq!(copy, t);
    }

    #[test]
    fn rearm_and_cancel() {
        let mut t = Table::new();
        t.set(T::A, Instant(20));
        t.set(T::A, Instant(30));
        assert_eq!(t.deadline(&T::A), Some(Instant(30)));
        t.cancel(&T::A);
        t.cancel(&T::B);
        assert_eq!(t.next_deadline(), None);
    }
}
