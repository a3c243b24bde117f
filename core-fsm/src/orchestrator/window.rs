//! A map keyed by ids that only ever grow (operation ids), for the route
//! table: most entries are answered soon after they are issued, so the live
//! ids lie in a short window above the oldest unanswered one.
//!
//! Ids in the window are found by offset, in constant time. An entry that
//! stays unanswered while [`WINDOW_MAX`] later ids are issued (an
//! abandoned operation whose answer may still come, late) moves to a tree,
//! so the window's memory stays bounded however long the run.

use std::collections::{BTreeMap, VecDeque};

/// Ids the window spans at most before its oldest entry moves to the tree.
pub(crate) const WINDOW_MAX: usize = 4096;

/// Values by increasing `u64` id.
#[derive(Clone, Debug)]
pub(crate) struct IdWindow<T> {
    /// The id of `window[0]`.
    base: u64,
    window: VecDeque<Option<T>>,
    /// Entries older than the window.
    old: BTreeMap<u64, T>,
    len: usize,
}

impl<T> Default for IdWindow<T> {
    fn default() -> Self {
        IdWindow {
            base: 0,
            window: VecDeque::new(),
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

    /// Inserts `value` under `id`, replacing any value there. Ids are
    /// expected to grow; an id below the window goes to the tree.
    pub(crate) fn insert(&mut self, id: u64, value: T) {
        if self.window.is_empty() {
            self.base = id;
        }
        if id < self.base {
            if self.old.insert(id, value).is_none() {
                self.len += 1;
            }
            return;
        }
        let at = usize::try_from(id - self.base).unwrap_or(usize::MAX);
        if at >= WINDOW_MAX {
            // Far ahead of the oldest entry: move old entries out until
            // the id fits (or the window is empty).
            self.spill_until(id);
            if self.window.is_empty() {
                self.base = id;
            }
        }
        let at = (id - self.base) as usize;
        if at == self.window.len() {
            // The usual case: the next id.
            self.window.push_back(Some(value));
            self.len += 1;
            return;
        }
        if at > self.window.len() {
            self.window.resize_with(at + 1, || None);
        }
        if self.window[at].replace(value).is_none() {
            self.len += 1;
        }
    }

    /// The value under `id`.
    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        if id < self.base {
            return self.old.get(&id);
        }
        let at = usize::try_from(id - self.base).ok()?;
        self.window.get(at).and_then(Option::as_ref)
    }

    /// Takes the value under `id` out.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let value = if id < self.base {
            self.old.remove(&id)
        } else {
            let at = usize::try_from(id - self.base).ok()?;
            let value = self.window.get_mut(at).and_then(Option::take);
            if at == 0 {
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
        let window = (self.base..)
            .zip(&self.window)
            .filter_map(|(id, v)| v.as_ref().map(|v| (id, v)));
        old.chain(window)
    }

    /// Drops empty slots at the front, advancing the base.
    fn trim(&mut self) {
        while let Some(None) = self.window.front() {
            self.window.pop_front();
            self.base += 1;
        }
    }

    /// Moves entries from the front of the window to the tree until `id`
    /// is within [`WINDOW_MAX`] of the base.
    fn spill_until(&mut self, id: u64) {
        while !self.window.is_empty() && id - self.base >= WINDOW_MAX as u64 {
            if let Some(Some(value)) = self.window.pop_front() {
                self.old.insert(self.base, value);
            }
            self.base += 1;
            self.trim();
        }
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
        assert!(w.window.len() <= WINDOW_MAX, "the window stays bounded");
        let all: Vec<(u64, u64)> = w.iter().map(|(id, v)| (id, *v)).collect();
        assert_eq!(all, vec![(2, 20), (far, 1)], "iteration is in id order");
        assert_eq!(w.remove(2), Some(20));
        assert_eq!(w.len(), 1);
        assert_eq!(w.get(far - 1), None);
        assert_eq!(w.get(far + 1), None);
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
            assert!(w.window.len() <= WINDOW_MAX);
        }
        assert_eq!(w.len(), (WINDOW_MAX * 5).div_ceil(3));
        assert_eq!(w.iter().count(), w.len());
        assert!(w.iter().all(|(id, _)| id % 3 == 0));
    }
}
