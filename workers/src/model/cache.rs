//! A stage's KV cache on the CPU. Its size comes from the file
//! (`context_length`) or the caller, so it is asked for in a way that can
//! fail with a clear error: a mapping of its own per block, whose pages
//! the kernel zeroes as positions first touch them (a long context costs
//! memory only as it fills, as a zeroed heap allocation would), and whose
//! refusal (a size past the address space or the kernel's overcommit
//! limit) names the context instead of aborting the process.

use super::stage::StageError;
use std::ops::{Deref, DerefMut, Range};
use std::path::Path;

/// The keys and values of every position so far, per block. A block's
/// cache is one run per KV head of `capacity` positions of `head_dim`
/// values: the keys one head attends to are one sequential stream, which
/// the processor fetches ahead of use (interleaved by position, each key
/// was a short run a row apart, and decode after a long prompt waited on
/// them).
pub(super) struct KvCache {
    pub(super) keys: Vec<Floats>,
    pub(super) values: Vec<Floats>,
    pub(super) len: usize,
    pub(super) capacity: usize,
}

impl KvCache {
    /// The cache of blocks `layers` of `path`: `capacity` positions of
    /// `kv` values a block (0: the cache is elsewhere, on a GPU).
    pub(super) fn new(
        path: &Path,
        layers: Range<usize>,
        capacity: usize,
        kv: usize,
    ) -> Result<KvCache, StageError> {
        let refused = |why: String| {
            StageError::Invalid(format!(
                "{}: a context of {capacity} positions ({kv} key and as many value floats \
                 each, blocks {}..{}): {why}; ask for a shorter one (`--ctx`, or the plan's \
                 `[pipeline] ctx`)",
                path.display(),
                layers.start,
                layers.end,
            ))
        };
        let each = capacity
            .checked_mul(kv)
            .filter(|n| n.checked_mul(4).is_some())
            .ok_or_else(|| refused("more bytes than this machine can address".to_owned()))?;
        let mut keys = Vec::with_capacity(layers.len());
        let mut values = Vec::with_capacity(layers.len());
        for _ in layers.clone() {
            keys.push(Floats::zeroed(each).map_err(&refused)?);
            values.push(Floats::zeroed(each).map_err(&refused)?);
        }
        Ok(KvCache {
            keys,
            values,
            len: 0,
            capacity,
        })
    }
}

/// `len` zeroed f32s in an anonymous mapping of their own (memmap2 maps a
/// page for 0 and shows none of it).
pub(super) struct Floats(memmap2::MmapMut);

impl Floats {
    fn zeroed(len: usize) -> Result<Floats, String> {
        memmap2::MmapMut::map_anon(len * 4)
            .map(Floats)
            .map_err(|e| format!("{} bytes a block could not be mapped ({e})", len * 4))
    }
}

impl Deref for Floats {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // A mapping starts on a page, so its bytes are aligned for f32s.
        bytemuck::cast_slice(&self.0)
    }
}

impl DerefMut for Floats {
    fn deref_mut(&mut self) -> &mut [f32] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_that_cannot_be_had_is_refused_naming_the_context() {
        let path = Path::new("big.gguf");
        // 2^40 positions of 1024 floats: 4 PiB a block, past any address
        // space.
        let e = match KvCache::new(path, 0..32, 1 << 40, 1024) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a cache of 2^40 positions was made"),
        };
        assert!(
            e.starts_with("big.gguf: a context of 1099511627776 positions (1024 key and as many")
                && e.contains("blocks 0..32): 4503599627370496 bytes a block could not be mapped")
                && e.ends_with("ask for a shorter one (`--ctx`, or the plan's `[pipeline] ctx`)"),
            "{e}"
        );
        let e = match KvCache::new(path, 0..1, usize::MAX / 2, 3) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("an unaddressable cache was made"),
        };
        assert!(
            e.contains("more bytes than this machine can address"),
            "{e}"
        );
        let mut cache = KvCache::new(path, 2..4, 16, 8).expect("a small cache");
        assert_eq!((cache.keys.len(), cache.values[1].len()), (2, 128));
        assert_eq!((cache.len, cache.capacity), (0, 16));
        assert!(cache.keys[0].iter().all(|&v| v == 0.0));
        cache.values[1][127] = 2.5;
        assert_eq!(cache.values[1][127], 2.5);
        // A GPU stage keeps none here.
        let none = KvCache::new(path, 0..3, 1 << 20, 0).expect("no cache");
        assert!(none.keys.iter().all(|k| k.is_empty()));
    }
}
