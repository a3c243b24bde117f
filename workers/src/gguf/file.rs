//! A GGUF file on disk: the header read through a buffer, tensors mapped in
//! place, only the ranges asked for.

use super::read::read_header;
use super::{Error, Header, TensorInfo};
use memmap2::{Mmap, MmapOptions};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Ranges closer than this are mapped as one, so that a stage's blocks,
/// which lie back to back in every file llama.cpp writes, cost one mapping.
const COALESCE_GAP_BYTES: u64 = 4096;

/// An open GGUF file whose header has been read.
#[derive(Debug)]
pub struct ModelFile {
    path: PathBuf,
    file: Arc<File>,
    header: Header,
    header_bytes_read: u64,
}

/// A tensor's bytes, mapped in place.
#[derive(Clone)]
pub struct TensorData {
    map: Arc<Mmap>,
    /// The file, for reads that map nothing ([`TensorData::read_at`]).
    file: Arc<File>,
    /// The file offset of the tensor's first byte.
    at: u64,
    start: usize,
    len: usize,
}

impl TensorData {
    /// The tensor's raw bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map[self.start..self.start + self.len]
    }

    /// Reads bytes `from..from + buf.len()` of the tensor with a read of
    /// the file, not through the mapping: no page of the mapping becomes
    /// resident. A first stage looks up a token's embedding row this way;
    /// through the mapping, each lookup faulted in its row's pages (where
    /// the page cache holds 2 MiB folios, a whole folio), and taking them
    /// out again after each step cost a first stage 12-21 µs a token.
    pub fn read_at(&self, from: usize, buf: &mut [u8]) -> std::io::Result<()> {
        assert!(from + buf.len() <= self.len);
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file.read_exact_at(buf, self.at + from as u64)
        }
        #[cfg(not(unix))]
        {
            buf.copy_from_slice(&self.bytes()[from..from + buf.len()]);
            Ok(())
        }
    }

    /// Takes the pages of bytes `from..from + len` of the tensor out of
    /// this process's resident memory (a copy of them is kept elsewhere):
    /// a later read maps them in again from the file. Best effort: a
    /// failure costs memory, not data.
    pub fn release(&self, from: usize, len: usize) {
        assert!(from + len <= self.len);
        #[cfg(unix)]
        // SAFETY: the mapping is of a file opened read-only and is never
        // written, so dropping its pages changes no byte a reader sees:
        // the next read faults the same bytes in from the file.
        #[allow(unsafe_code)]
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                self.start + from,
                len,
            )
        };
    }
}

/// The tensors a stage mapped, and how many bytes that took.
pub struct Mapped {
    /// Tensors by name.
    pub tensors: BTreeMap<String, (TensorInfo, TensorData)>,
    /// Bytes of the file covered by the mappings.
    pub bytes_mapped: u64,
}

impl ModelFile {
    /// Opens `path` and reads its header (and nothing after it).
    pub fn open(path: &Path) -> Result<ModelFile, Error> {
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut reader = BufReader::with_capacity(
            64 * 1024,
            Counting {
                inner: &file,
                read: 0,
            },
        );
        let header = read_header(&mut reader, len, &path.display().to_string())?;
        let header_bytes_read = reader.into_inner().read;
        Ok(ModelFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            header,
            header_bytes_read,
        })
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes read from the file to parse the header (the buffer's read-ahead
    /// included).
    pub fn header_bytes_read(&self) -> u64 {
        self.header_bytes_read
    }

    /// Maps the named tensors and nothing else. An unknown name is an error.
    pub fn map(&self, names: &[String]) -> Result<Mapped, Error> {
        let mut wanted = Vec::with_capacity(names.len());
        for name in names {
            let info = self.header.tensor(name).ok_or_else(|| Error::Format {
                path: self.path.display().to_string(),
                offset: 0,
                field: format!("tensor {name:?}"),
                reason: "not in the file".into(),
            })?;
            let start = self.header.data_offset + info.offset;
            wanted.push((start, start + info.bytes(), info.clone()));
        }
        wanted.sort_by_key(|w| w.0);
        let mut tensors = BTreeMap::new();
        let mut bytes_mapped = 0;
        while !wanted.is_empty() {
            let run_start = wanted[0].0;
            let mut run_end = wanted[0].1;
            let mut j = 1;
            while j < wanted.len() && wanted[j].0 <= run_end + COALESCE_GAP_BYTES {
                run_end = run_end.max(wanted[j].1);
                j += 1;
            }
            let map = self.map_range(run_start, run_end - run_start)?;
            bytes_mapped += run_end - run_start;
            for (start, end, info) in wanted.drain(..j).collect::<Vec<_>>() {
                let data = TensorData {
                    map: map.clone(),
                    file: self.file.clone(),
                    at: start,
                    start: (start - run_start) as usize,
                    len: (end - start) as usize,
                };
                tensors.insert(info.name.clone(), (info, data));
            }
        }
        Ok(Mapped {
            tensors,
            bytes_mapped,
        })
    }

    #[allow(unsafe_code)]
    fn map_range(&self, offset: u64, len: u64) -> Result<Arc<Mmap>, Error> {
        let len = usize::try_from(len).map_err(|_| Error::Format {
            path: self.path.display().to_string(),
            offset,
            field: "tensor data".into(),
            reason: format!("{len} bytes do not fit in memory"),
        })?;
        // SAFETY: the map is read-only. Like every mmap-based loader
        // (llama.cpp's included), it relies on the file not being truncated
        // or rewritten while the worker runs; the header check guarantees
        // the range lies inside the file as it was opened.
        let map = unsafe { MmapOptions::new().offset(offset).len(len).map(&self.file) };
        map.map(Arc::new).map_err(|source| Error::Io {
            path: self.path.display().to_string(),
            source,
        })
    }
}

struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}
