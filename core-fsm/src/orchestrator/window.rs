//! A map keyed by ids that only ever grow (operation ids), for the route
//! table: most entries are answered soon after they are issued, so the live
//! ids lie in a short window above the oldest unanswered one.
//!
//! Ids in the window are found by offset, in constant time. An entry that
//! stays unanswered while [`WINDOW_MAX`] later ids are issued (an
//! abandoned operation whose answer may still come, late) moves to a tree,
//! so the window's memory stays bounded however long the run.

use std::collections::BTreeMap;

/// Ids the window spans at most before its oldest entry moves to the tree
/// (a power of two: the window is a ring indexed by `id % WINDOW_MAX`).
pub(crate) const WINDOW_MAX: usize = 4096;

/// Values by increasing `u64` id.
#[derive(Clone, Debug)]
pub(crate) struct IdWindow<T> {
    /// The oldest id the window may hold: every id below it is in `old`.
    base: u64,
    /// One past the highest id the window holds (`base` when empty).
    end: u64,
    /// Slot `id % ring.len()` holds id `id` for `base <= id < end`; the
    /// ring grows by doubling up to [`WINDOW_MAX`].
    ring: Vec<Option<T>>,
    /// Entries older than the window.
    old: BTreeMap<u64, T>,
    len: usize,
}

impl<T> Default for IdWindow<T> {
    fn default() -> Self {
        IdWindow {
            base: 0,
            end: 0,
            ring: Vec::new(),
            old: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<T> IdWindow<T> {
    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn at(&self, id: u64) -> usize {
        // The ring's length is a power of two.
        (id as usize) & (self.ring.len() - 1)
    }

    /// Inserts `value` under `id`, replacing any value there. Ids are
    /// expected to grow; an id below the window goes to the tree.
    pub(crate) fn insert(&mut self, id: u64, value: T) {
        if id == self.end && id - self.base < self.ring.len() as u64 {
            // The usual case: the next id, with room for it.
            let at = self.at(id);
            self.ring[at] = Some(value);
            self.end += 1;
            self.len += 1;
            return;
        }
        if self.base == self.end && id >= self.base {
            // Empty: the window starts at this id.
            self.base = id;
            self.end = id;
        }
        if id < self.base {
            if self.old.insert(id, value).is_none() {
                self.len += 1;
            }
            return;
        }
        let span = id - self.base + 1;
        if span > self.ring.len() as u64 {
            self.make_room(span);
        }
        while self.end <= id {
            // Ids skipped over (issued elsewhere) hold nothing.
            let at = self.at(self.end);
            self.ring[at] = None;
            self.end += 1;
        }
        let at = self.at(id);
        if self.ring[at].replace(value).is_none() {
            self.len += 1;
        }
    }

    /// The value under `id`.
    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        if id < self.base {
            return self.old.get(&id);
        }
        if id >= self.end {
            return None;
        }
        self.ring[self.at(id)].as_ref()
    }

    /// Takes the value under `id` out.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let value = if id < self.base {
            self.old.remove(&id)
        } else if id >= self.end {
            None
        } else {
            let at = self.at(id);
            let value = self.ring[at].take();
            if id == self.base {
                self.trim();
            }
            value
        };
        self.len -= usize::from(value.is_some());
        value
    }

    /// Every entry in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        let old = self.old.iter().map(|(id, v)| (*id, v));
        let window =
            (self.base..self.end).filter_map(|id| self.ring[self.at(id)].as_ref().map(|v| (id, v)));
        old.chain(window)
    }

    /// Advances the base past empty slots.
    fn trim(&mut self) {
        while self.base < self.end && self.ring[self.at(self.base)].is_none() {
            self.base += 1;
        }
    }

    /// Makes the window span `span` ids: grows the ring up to
    /// [`WINDOW_MAX`], then moves the oldest entries to the tree.
    fn make_room(&mut self, span: u64) {
        let want = usize::try_from(span).unwrap_or(usize::MAX).min(WINDOW_MAX);
        if want > self.ring.len() {
            let size = want.next_power_of_two().max(16);
            let mut ring: Vec<Option<T>> = (0..size).map(|_| None).collect();
            for id in self.base..self.end {
                let at = self.at(id);
                ring[(id as usize) & (size - 1)] = self.ring[at].take();
            }
            self.ring = ring;
        }
        let keep_from = (self.base + span).saturating_sub(self.ring.len() as u64);
        while self.base < keep_from.min(self.end) {
            let at = self.at(self.base);
            if let Some(value) = self.ring[at].take() {
                self.old.insert(self.base, value);
            }
            self.base += 1;
        }
        if self.base < keep_from {
            // Nothing left in the window: it restarts at the oldest id
            // that must fit.
            self.base = keep_from;
            self.end = keep_from;
        }
        self.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_removes_in_and_out_of_the_window() {
        let mut w = IdWindow::default();
        for id in 1..=10u64 {
            w.insert(id, id * 10);
        }
        assert_eq!(w.len(), 10);
        assert_eq!(w.get(3), Some(&30));
        assert_eq!(w.remove(1), Some(10));
        assert_eq!(w.remove(1), None, "a second remove finds nothing");
        assert_eq!(w.get(1), None);
        assert_eq!(w.len(), 9);
        // Id 2 stays unanswered while the window moves far ahead.
        for id in 3..=10u64 {
            w.remove(id);
        }
        let far = 2 + WINDOW_MAX as u64 + 7;
        w.insert(far, 1);
        assert_eq!(w.get(2), Some(&20), "the old entry is still found");
        assert_eq!(w.get(far), Some(&1));
        assert!(w.ring.len() <= WINDOW_MAX, "the window stays bounded");
        assert!(w.end - w.base <= WINDOW_MAX as u64);
        let all: Vec<(u64, u64)> = w.iter().map(|(id, v)| (id, *v)).collect();
        assert_eq!(all, vec![(2, 20), (far, 1)], "iteration is in id order");
        assert_eq!(w.remove(2), Some(20));
        assert_eq!(w.len(), 1);
        assert_eq!(w.get(far - 1), None);
        assert_eq!(w.get(far + 1), None);
    }

    #[test]
    fn agrees_with_a_map_under_random_use() {
        let mut rng = crate::rng::DetRng::new(7);
        let mut w = IdWindow::default();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut next = 1u64;
        for _ in 0..200_000 {
            match rng.next_u64() % 10 {
                // Mostly fresh ids, sometimes far ahead (a gap).
                0..=4 => {
                    next += 1 + rng.next_u64() % 3;
                    if rng.next_u64().is_multiple_of(500) {
                        next += rng.next_u64() % (3 * WINDOW_MAX as u64);
                    }
                    w.insert(next, next);
                    model.insert(next, next);
                }
                // Answers, mostly of recent ids, some of old ones.
                _ => {
                    let reach = if rng.next_u64().is_multiple_of(4) {
                        3 * WINDOW_MAX
                    } else {
                        32
                    };
                    let id = next.saturating_sub(rng.next_u64() % reach as u64);
                    assert_eq!(w.remove(id), model.remove(&id), "remove {id}");
                }
            }
            let probe = next.saturating_sub(rng.next_u64() % (2 * WINDOW_MAX as u64));
            assert_eq!(w.get(probe), model.get(&probe), "get {probe}");
            assert_eq!(w.len(), model.len());
            assert!(w.end - w.base <= WINDOW_MAX as u64);
        }
        assert!(!w.old.is_empty(), "some entries moved to the tree");
        let all: Vec<(u64, u64)> = w.iter().map(|(id, v)| (id, *v)).collect();
        let want: Vec<(u64, u64)> = model.into_iter().collect();
        assert_eq!(all, want);
    }

    #[test]
    fn the_window_never_spans_more_than_its_bound() {
        let mut w = IdWindow::default();
        // Every third id is never answered.
        for id in 0..(WINDOW_MAX as u64 * 5) {
            w.insert(id, ());
            if id % 3 != 0 {
                w.remove(id);
            }
            assert!(w.ring.len() <= WINDOW_MAX && w.end - w.base <= WINDOW_MAX as u64);
        }
        assert_eq!(w.len(), (WINDOW_MAX * 5).div_ceil(3));
        assert_eq!(w.iter().count(), w.len());
        assert!(w.iter().all(|(id, _)| id % 3 == 0));
    }
}
