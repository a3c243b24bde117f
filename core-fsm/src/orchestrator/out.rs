//! The effect vector of one composite step, appended to in place.
//!
//! Why: `Vec::push` takes a value that is already made, checks for room and
//! may grow the vector (a call), so the compiler makes every effect in a
//! stack temporary first and then copies all of its bytes into the vector
//! in 16-byte pieces. Those pieces read back fields stored a moment before
//! in narrower pieces, and such a read waits until the stores have left
//! the store buffer: on the lifecycle benchmark that copy was the costliest
//! single thing a step did. [`Out::push_with`] makes room first and only
//! then makes the effect, so nothing stands between making it and storing
//! it, and the compiler writes its fields straight into the vector.
//!
//! This is core-fsm's only `unsafe`: one `Vec::set_len` over an element
//! just written through `Vec::spare_capacity_mut`.

use crate::port::Effect;

/// Effects of one step, appended in order to the caller's vector.
pub(crate) struct Out<'a> {
    effects: &'a mut Vec<Effect>,
}

impl<'a> Out<'a> {
    /// Appends to `effects`, which keeps what it holds.
    pub(crate) fn new(effects: &'a mut Vec<Effect>) -> Out<'a> {
        Out { effects }
    }

    /// Appends the effect `make` makes, made where it is kept. If `make`
    /// panics, nothing is appended.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) fn push_with(&mut self, make: impl FnOnce() -> Effect) {
        self.effects.reserve(1);
        let len = self.effects.len();
        // The room is found before the effect is made: a panic after it is
        // made would have to drop it, and the compiler would keep it aside
        // for that and copy it after all.
        let slot = &mut self.effects.spare_capacity_mut()[0];
        slot.write(make());
        // SAFETY: the element at `len`, the first of the spare capacity,
        // was initialized by the write above and lies within the
        // capacity, so the first `len + 1` elements are initialized.
        unsafe { self.effects.set_len(len + 1) };
    }

    /// Effects appended so far, those before this step included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.effects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::LogicalNodeId;
    use crate::node::Stage;

    fn changed(n: usize) -> Effect {
        Effect::NodeChanged {
            node: LogicalNodeId::new(format!("workers-{n}")),
            stage: Stage::Dormant,
            ready: true,
            // Owned data, so that a lost or doubled element would show
            // (under Miri: a leak or a double free).
            failed_reason: Some(format!("reason {n}")),
        }
    }

    /// Appends after what the vector held, in order, growing it many times
    /// over, from empty and from full.
    #[test]
    fn appends_in_order_across_growth() {
        for start in [0usize, 1, 4] {
            let mut effects: Vec<Effect> = (0..start).map(changed).collect();
            effects.shrink_to_fit();
            assert_eq!(effects.capacity(), start, "starts full");
            let mut out = Out::new(&mut effects);
            for n in start..start + 100 {
                out.push_with(|| changed(n));
                assert_eq!(out.len(), n + 1);
            }
            let want: Vec<Effect> = (0..start + 100).map(changed).collect();
            assert_eq!(effects, want);
        }
    }

    /// An effect whose making panics leaves the vector as it was.
    #[test]
    fn a_panic_while_making_an_effect_changes_nothing() {
        let mut effects = vec![changed(0)];
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut out = Out::new(&mut effects);
            out.push_with(|| changed(1));
            out.push_with(|| panic!("making an effect failed"));
        }));
        assert!(caught.is_err());
        assert_eq!(effects, vec![changed(0), changed(1)]);
    }
}
