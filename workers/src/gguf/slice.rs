//! A stage's slice of a model as a GGUF of its own: the whole metadata,
//! and only the tensors the stage runs. A node that fetched the header and
//! its tensors' byte ranges writes one, and `drover-worker stage` opens it
//! as it would open the whole file.

use super::write::GgufOut;
use super::{Header, TensorInfo, Value};
use crate::model::Config;
use crate::model::weights::names_for;
use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What to fetch for a stage: the tensors and their byte ranges in the
/// whole file.
#[derive(Clone, Debug)]
pub struct SlicePlan {
    /// The stage's blocks.
    pub layers: Range<usize>,
    /// The tensors, in file order.
    pub tensors: Vec<TensorInfo>,
    /// `(absolute offset, length)` of each tensor's data, in file order.
    pub ranges: Vec<(u64, u64)>,
}

impl SlicePlan {
    /// The plan for blocks `layers` of the model `header` describes.
    pub fn new(header: &Header, layers: Range<usize>) -> Result<SlicePlan, String> {
        let config = Config::from_header(header, "model").map_err(|e| e.to_string())?;
        if layers.start >= layers.end || layers.end > config.blocks {
            return Err(format!(
                "layers {layers:?} are not a range of the {} blocks",
                config.blocks
            ));
        }
        let tied = header.tensor("output.weight").is_none();
        let names = names_for(&config, &layers, tied);
        let mut tensors: Vec<TensorInfo> = names
            .iter()
            .map(|n| {
                header
                    .tensor(n)
                    .cloned()
                    .ok_or_else(|| format!("tensor {n:?} is not in the model"))
            })
            .collect::<Result<_, _>>()?;
        tensors.sort_by_key(|t| t.offset);
        let ranges = tensors
            .iter()
            .map(|t| (header.data_offset + t.offset, t.bytes()))
            .collect();
        Ok(SlicePlan {
            layers,
            tensors,
            ranges,
        })
    }

    /// Bytes of tensor data the slice holds.
    pub fn data_bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }
}

/// The bytes of the slice of `plan` before its tensor data, as
/// [`SliceWriter`] writes them (the whole model's metadata, plus
/// `drover.slice.first_layer` / `end_layer`, and the slice's tensor infos,
/// padded): what a cached slice's head is checked against.
pub fn slice_head(header: &Header, plan: &SlicePlan) -> Vec<u8> {
    let mut file = GgufOut::new();
    file.metadata = header
        .metadata
        .iter()
        .filter(|(k, _)| !k.starts_with("drover.slice."))
        .cloned()
        .collect();
    file.meta(
        "drover.slice.first_layer",
        Value::U32(plan.layers.start as u32),
    )
    .meta("drover.slice.end_layer", Value::U32(plan.layers.end as u32));
    let tensors = plan.tensors.iter();
    file.head(tensors.map(|t| (t.name.as_str(), t.dims.as_slice(), t.ty)))
}

/// A stage's slice written as its tensors' bytes arrive: the plan's
/// ranges back to back, in file order, in pieces of any size. The head
/// (the whole model's metadata, plus `drover.slice.first_layer` /
/// `end_layer`, and the slice's tensor infos) goes first, each tensor is
/// padded to the alignment, and all of it into a partial file of its own
/// (`<out>.<pid>-<n>-<t>.partial`, held locked while the writer lives);
/// [`SliceWriter::finish`] renames that to `out` once every byte came. A
/// writer dropped before then removes it, so `out` is never half a slice,
/// and memory holds no more than the pieces given.
pub struct SliceWriter {
    file: Option<io::BufWriter<File>>,
    partial: PathBuf,
    out: PathBuf,
    /// Each tensor's length, in order.
    lens: Vec<u64>,
    /// The tensor being written, and its bytes still to come.
    at: usize,
    left: u64,
    alignment: u64,
}

impl SliceWriter {
    /// Starts the slice of `plan` (blocks of the model `header`
    /// describes) at `out`.
    pub fn create(header: &Header, plan: &SlicePlan, out: &Path) -> io::Result<SliceWriter> {
        let head = slice_head(header, plan);
        // A name of its own: two writers of one slice (nodes sharing a
        // cache) never write into each other's file; the last to finish
        // puts a whole one in place.
        static WRITERS: AtomicU64 = AtomicU64::new(0);
        let n = WRITERS.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut name = out.as_os_str().to_owned();
        name.push(format!(".{}-{n}-{nanos:x}.partial", std::process::id()));
        let partial = PathBuf::from(name);
        let lens: Vec<u64> = plan.tensors.iter().map(TensorInfo::bytes).collect();
        let file_out = File::options()
            .write(true)
            .create_new(true)
            .open(&partial)?;
        // Held while the writer lives: a file no one holds is a dead
        // writer's ([`remove_stale_partials`]). A file system without
        // locks leaves it unlocked, and such files are never removed.
        if let Err(std::fs::TryLockError::WouldBlock) = file_out.try_lock() {
            return Err(io::Error::other(format!(
                "{} is held by another writer",
                partial.display()
            )));
        }
        // From here on a failure drops the writer, which removes the file.
        let mut writer = SliceWriter {
            file: Some(io::BufWriter::with_capacity(1 << 20, file_out)),
            partial,
            out: out.to_owned(),
            left: lens.first().copied().unwrap_or(0),
            lens,
            at: 0,
            // The metadata's, which the head keeps.
            alignment: header.alignment,
        };
        writer.file().write_all(&head)?;
        writer.next_tensor(0)?;
        Ok(writer)
    }

    /// The next piece of the tensors' bytes.
    pub fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.at == self.lens.len() {
                return Err(io::Error::other(format!(
                    "{} bytes past the slice's {} tensors",
                    bytes.len(),
                    self.lens.len()
                )));
            }
            let n = usize::try_from(self.left).map_or(bytes.len(), |left| left.min(bytes.len()));
            self.file().write_all(&bytes[..n])?;
            bytes = &bytes[n..];
            self.left -= n as u64;
            let at = self.at;
            self.next_tensor(at)?;
        }
        Ok(())
    }

    /// While tensor `at` is complete: its padding, then the next one.
    fn next_tensor(&mut self, mut at: usize) -> io::Result<()> {
        while self.left == 0 && at < self.lens.len() {
            let len = self.lens[at];
            let pad = super::write::padded(len, self.alignment) - len;
            self.file().write_all(&vec![0u8; pad as usize])?;
            at += 1;
            self.left = self.lens.get(at).copied().unwrap_or(0);
        }
        self.at = at;
        Ok(())
    }

    fn file(&mut self) -> &mut io::BufWriter<File> {
        self.file.as_mut().expect("open until finished")
    }

    /// Bytes of tensor data still to come.
    pub fn missing(&self) -> u64 {
        self.left + self.lens.iter().skip(self.at + 1).sum::<u64>()
    }

    /// Syncs the slice and renames it to its place, once every byte came.
    pub fn finish(mut self) -> io::Result<()> {
        let missing = self.missing();
        if missing > 0 {
            return Err(io::Error::other(format!(
                "the slice misses {missing} bytes of its tensors"
            )));
        }
        let file = self.file.take().expect("open until finished");
        // The file stays open, and so locked, until it has its name: no
        // cleanup takes it for a dead writer's before.
        let done = file.into_inner().map_err(|e| e.into_error()).and_then(|f| {
            f.sync_all()?;
            std::fs::rename(&self.partial, &self.out)?;
            Ok(f)
        });
        match done {
            Ok(_) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&self.partial);
                Err(e)
            }
        }
    }
}

impl Drop for SliceWriter {
    fn drop(&mut self) {
        // Removed while still open (and locked), then closed.
        if let Some(file) = self.file.take() {
            let _ = std::fs::remove_file(&self.partial);
            drop(file);
        }
    }
}

/// Removes the partial files of the slice at `out` that writers left
/// when their process died (an agent killed during a fetch): each is as
/// large as what it had fetched, and a node's disk sized for its slices
/// may not hold another. A live writer holds a lock on its file (in this
/// process or another, in any pid namespace), so a file whose lock can be
/// taken is a dead writer's; one whose lock cannot be asked about (a file
/// system without locks) is kept. Each file tried, and whether its removal
/// failed; a cache that does not exist has none.
pub fn remove_stale_partials(out: &Path) -> Vec<(PathBuf, io::Result<()>)> {
    let mut tried = Vec::new();
    let (Some(dir), Some(name)) = (out.parent(), out.file_name().and_then(|n| n.to_str())) else {
        return tried;
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return tried,
        Err(e) => return vec![(dir.to_owned(), Err(e))],
    };
    let prefix = format!("{name}.");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let partial = file
            .to_str()
            .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".partial"));
        if !partial {
            continue;
        }
        let path = entry.path();
        let Ok(held) = File::open(&path) else {
            continue;
        };
        if held.try_lock().is_ok() {
            let removed = std::fs::remove_file(&path);
            tried.push((path, removed));
        }
    }
    tried
}
