//! A stage's KV cache on the CPU, and the check that it can be had: its
//! size comes from the file (`context_length`) or the caller, and a cache
//! larger than the machine's memory is a clear error, not an abort.

use super::stage::StageError;
use std::ops::Range;
use std::path::Path;

/// The keys and values of every position so far, per block. A block's
/// cache is one run per KV head of `capacity` positions of `head_dim`
/// values: the keys one head attends to are one sequential stream, which
/// the processor fetches ahead of use (interleaved by position, each key
/// was a short run a row apart, and decode after a long prompt waited on
/// them).
pub(super) struct KvCache {
    pub(super) keys: Vec<Vec<f32>>,
    pub(super) values: Vec<Vec<f32>>,
    pub(super) len: usize,
    pub(super) capacity: usize,
}

impl KvCache {
    /// The cache of blocks `layers` of `path`: `capacity` positions of
    /// `kv` values (0: the cache is elsewhere, on a GPU). Its pages are
    /// zeroed lazily, so memory is taken as positions fill it; but a cache
    /// over the machine's memory could never be filled, and one over the
    /// address space would abort the process, so both are refused, naming
    /// the context.
    pub(super) fn new(
        path: &Path,
        layers: Range<usize>,
        capacity: usize,
        kv: usize,
    ) -> Result<KvCache, StageError> {
        let bytes = (2 * layers.len() as u128) * capacity as u128 * kv as u128 * 4;
        let memory = physical_memory();
        if bytes > memory as u128 {
            return Err(StageError::Invalid(format!(
                "{}: a context of {capacity} positions needs a key/value cache of {:.1} GiB \
                 for blocks {}..{}, more than this machine's {:.1} GiB of memory; ask for a \
                 shorter context (`ctx`)",
                path.display(),
                bytes as f64 / f64::from(1u32 << 30),
                layers.start,
                layers.end,
                memory as f64 / f64::from(1u32 << 30),
            )));
        }
        // Under the machine's memory, so the product fits a usize.
        let each = capacity * kv;
        Ok(KvCache {
            keys: layers.clone().map(|_| vec![0f32; each]).collect(),
            values: layers.map(|_| vec![0f32; each]).collect(),
            len: 0,
            capacity,
        })
    }
}

/// The machine's physical memory in bytes (`u64::MAX` when unknown).
#[allow(unsafe_code)] // two reads of system settings
fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads a system setting.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(size)) {
        (Ok(pages), Ok(size)) if pages > 0 && size > 0 => pages.saturating_mul(size),
        _ => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_over_the_machines_memory_is_refused_naming_the_context() {
        let path = Path::new("big.gguf");
        let e = match KvCache::new(path, 0..32, 1 << 40, 1024) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a cache of 2^40 positions was made"),
        };
        assert!(
            e.starts_with(
                "big.gguf: a context of 1099511627776 positions needs a key/value cache of"
            ) && e.contains("for blocks 0..32, more than this machine's"),
            "{e}"
        );
        let cache = KvCache::new(path, 2..4, 16, 8).expect("a small cache");
        assert_eq!((cache.keys.len(), cache.values[1].len()), (2, 128));
        assert_eq!((cache.len, cache.capacity), (0, 16));
    }
}
