//! A model's digests, kept between runs: hashing a model of tens of GB
//! takes tens of seconds, and every `up` and `plan` did it again. One
//! entry per file (its device and inode, under `~/.cache/drover/digests`,
//! or `$DROVER_DIGEST_CACHE`), good while the file's size, mtime and ctime
//! (and birth time, where kept) are what they were when it was hashed: a
//! write moves its ctime, and no tool sets a ctime back. A stale or unreadable entry is a miss; keeping
//! one is best effort. Should a file change anyway, the nodes' own checks
//! of what they fetch still refuse it, by name.

use super::wire::WeightsRef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::Metadata;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What is kept of one file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Entry {
    /// The file's path when it was hashed (for people; not part of the key).
    path: String,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    /// Its birth time, where the file system keeps one: an inode freed
    /// and taken by a new file is not the file hashed.
    btime_ns: Option<i128>,
    /// The whole file's sha256.
    digest: String,
    /// Each stage's slice digest hashed so far, by block range (`a..b`).
    slices: BTreeMap<String, String>,
}

/// The folder entries are kept in (`None`: nowhere to keep them).
pub fn dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DROVER_DIGEST_CACHE") {
        return Some(dir.into());
    }
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".cache/drover/digests"))
}

/// The whole file's digest and each stage's slice digest, in the order of
/// `stages`, if an entry for this very file (`meta`, its metadata as
/// opened) holds all of them.
pub fn lookup(
    dir: &Path,
    meta: &Metadata,
    stages: &[Range<usize>],
) -> Option<(String, Vec<String>)> {
    let entry = read(dir, meta)?;
    let slices = stages
        .iter()
        .map(|s| entry.slices.get(&key(s)).cloned())
        .collect::<Option<Vec<_>>>()?;
    Some((entry.digest, slices))
}

/// Keeps the digests of the file `meta` describes (at `path`) with its
/// stages' slice digests, beside those of other splits kept before.
pub fn store(dir: &Path, meta: &Metadata, path: &Path, digest: &str, weights: &[WeightsRef]) {
    let mut entry = match read(dir, meta) {
        Some(entry) if entry.digest == digest => entry,
        _ => Entry {
            path: path.display().to_string(),
            size: meta.size(),
            mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: nanos(meta.ctime(), meta.ctime_nsec()),
            btime_ns: born(meta),
            digest: digest.to_owned(),
            slices: BTreeMap::new(),
        },
    };
    for w in weights {
        let range = w.first_layer as usize..w.end_layer as usize;
        entry.slices.insert(key(&range), w.slice_sha256.clone());
    }
    let Ok(text) = serde_json::to_vec_pretty(&entry) else {
        return;
    };
    // Through a file of this writer's own and a rename: a reader never
    // sees half an entry, and two writers leave one whole.
    let file = dir.join(name(meta));
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!("{}.{}-{n}.tmp", name(meta), std::process::id()));
    let kept = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, text))
        .and_then(|()| std::fs::rename(&tmp, &file));
    if kept.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The entry of the file `meta` describes, if it is still that file's.
fn read(dir: &Path, meta: &Metadata) -> Option<Entry> {
    let text = std::fs::read(dir.join(name(meta))).ok()?;
    let entry: Entry = serde_json::from_slice(&text).ok()?;
    let same = entry.size == meta.size()
        && entry.mtime_ns == nanos(meta.mtime(), meta.mtime_nsec())
        && entry.ctime_ns == nanos(meta.ctime(), meta.ctime_nsec())
        && entry.btime_ns == born(meta);
    same.then_some(entry)
}

fn name(meta: &Metadata) -> String {
    format!("{:x}-{:x}.json", meta.dev(), meta.ino())
}

fn key(stage: &Range<usize>) -> String {
    format!("{}..{}", stage.start, stage.end)
}

fn born(meta: &Metadata) -> Option<i128> {
    let since = meta
        .created()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(i128::try_from(since.as_nanos()).unwrap_or(i128::MAX))
}

fn nanos(secs: i64, nsec: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nsec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::model::Model;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("drover-digests-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    /// Hashes `path` for `stages` as `prepare` does, keeping the result
    /// in `dir`: the weights, and whether they came from the entry.
    fn weights(dir: &Path, path: &Path, stages: &[Range<usize>]) -> (Vec<WeightsRef>, bool) {
        let model = Model::open(path).expect("open");
        let meta = model.file().metadata().expect("metadata");
        if let Some((digest, slices)) = lookup(dir, &meta, stages) {
            return (model.known(digest, slices, stages).expect("known").1, true);
        }
        let (model, weights) = model.hash(stages, |_, _| {}).expect("hash");
        store(dir, &meta, path, &model.digest, &weights);
        (weights, false)
    }

    #[test]
    fn a_kept_entry_gives_what_hashing_gives_until_the_file_changes() {
        let dir = scratch("kept");
        let path = dir.join("model.gguf");
        let stories =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models/stories260k.gguf");
        std::fs::copy(&stories, &path).expect("copy");
        let cache = dir.join("digests");
        let three = [0..2, 2..4, 4..5];
        let (hashed, from_cache) = weights(&cache, &path, &three);
        assert!(!from_cache);
        // The same split again: from the entry, equal in every field.
        let (kept, from_cache) = weights(&cache, &path, &three);
        assert!(from_cache);
        assert_eq!(kept, hashed);
        // Another split: hashed, and kept beside the first.
        let one = std::slice::from_ref(&(0..5));
        let (_, from_cache) = weights(&cache, &path, one);
        assert!(!from_cache);
        assert!(weights(&cache, &path, one).1);
        assert!(weights(&cache, &path, &three).1);
        // The same bytes, another mtime (as a copy that keeps times would
        // leave a changed file): the entry is stale, the file hashed again.
        let file = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        let day = std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
        file.set_modified(day).expect("mtime");
        let (again, from_cache) = weights(&cache, &path, &three);
        assert!(!from_cache);
        assert_eq!(again, hashed);
        // A garbled entry is a miss, never an error.
        for entry in std::fs::read_dir(&cache).expect("entries") {
            std::fs::write(entry.expect("entry").path(), b"{not json").expect("garble");
        }
        assert!(!weights(&cache, &path, &three).1);
        assert!(weights(&cache, &path, &three).1);
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
