//! Slice-only weights on a node: the GGUF header and the stage's tensors'
//! byte ranges, fetched from the orchestrator over iroh, checked against
//! the digests of the provision, written as a standalone slice GGUF, and
//! cached under (model digest, layer range, format version). A cached slice
//! is checked again before it is reused; one that fails is fetched anew.

use super::wire::{self, WEIGHTS_ALPN, WeightsRef, WeightsRequest};
use iroh::EndpointAddr;
use iroh::endpoint::{Endpoint, RecvStream};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use workers::gguf::Header;
use workers::gguf::read::read_header;
use workers::gguf::slice::{SlicePlan, SliceWriter, remove_stale_partials, slice_head};

/// The cache's format version (part of every key).
pub const CACHE_VERSION: u32 = 1;

/// A stage's slice on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The slice GGUF.
    pub path: PathBuf,
    /// Bytes that crossed the network for it (0 when the cache held it).
    pub bytes_fetched: u64,
    /// Whether a cached slice was refused and fetched again.
    pub refetched: bool,
}

/// Hex sha256.
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes read at a time, wherever weights are read: from a file to hash
/// it or serve it, from the weights stream to hand to the slice's writer.
pub(super) const PIECE: u64 = 1 << 20;

/// Pieces read ahead of what takes them (a hasher, a stream, a writer).
pub(super) const PIECES_IN_FLIGHT: usize = 4;

/// How often a fetch in progress says how far it got.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The digest and byte count of a slice's tensor data in `file` (the
/// whole model, or a slice written from it), its ranges read in file
/// order, a piece at a time.
pub fn slice_digest(plan: &SlicePlan, file: &File) -> std::io::Result<(String, u64)> {
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; PIECE as usize];
    for &(offset, len) in &plan.ranges {
        let mut at = 0;
        while at < len {
            let n = PIECE.min(len - at) as usize;
            file.read_exact_at(&mut buf[..n], offset + at)?;
            sha.update(&buf[..n]);
            at += n as u64;
        }
    }
    Ok((hex(&sha.finalize()), plan.data_bytes()))
}

/// Where the slice of `w` is cached.
pub fn cache_path(cache: &Path, w: &WeightsRef) -> PathBuf {
    let model = w.model_digest.get(..16).unwrap_or(&w.model_digest);
    cache.join(format!(
        "{model}-{}-{}-v{CACHE_VERSION}.gguf",
        w.first_layer, w.end_layer
    ))
}

fn layers(w: &WeightsRef) -> Range<usize> {
    w.first_layer as usize..w.end_layer as usize
}

/// Whether the cached slice at `path` holds exactly the tensors of `w`.
fn cached_ok(path: &Path, w: &WeightsRef) -> Result<(), String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let label = path.display().to_string();
    let header =
        read_header(std::io::BufReader::new(&file), len, &label).map_err(|e| e.to_string())?;
    let plan = SlicePlan::new(&header, layers(w))?;
    let mut head = vec![0u8; usize::try_from(header.data_offset).map_err(|e| e.to_string())?];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| e.to_string())?;
    let digest = hex(&Sha256::digest(&head));
    if digest != w.slice_head_sha256 {
        return Err(format!(
            "its head's sha256 is {digest}, the provision's {}",
            w.slice_head_sha256
        ));
    }
    let (digest, _) = slice_digest(&plan, &file).map_err(|e| e.to_string())?;
    if digest != w.slice_sha256 {
        return Err(format!(
            "its tensors' sha256 is {digest}, the provision's {}",
            w.slice_sha256
        ));
    }
    Ok(())
}

/// The slice of `w`, from the cache or from the orchestrator; a fetch
/// calls `progress(bytes so far, of the tensors' bytes)` every
/// [`PROGRESS_EVERY`].
pub async fn slice(
    endpoint: &Endpoint,
    orchestrator: EndpointAddr,
    w: &WeightsRef,
    cache: &Path,
    progress: impl FnMut(u64, u64),
) -> Result<Fetched, String> {
    let path = cache_path(cache, w);
    let mut refetched = false;
    if path.exists() {
        let check = {
            let (path, w) = (path.clone(), w.clone());
            tokio::task::spawn_blocking(move || cached_ok(&path, &w))
                .await
                .map_err(|e| e.to_string())?
        };
        match check {
            Ok(()) => {
                return Ok(Fetched {
                    path,
                    bytes_fetched: 0,
                    refetched: false,
                });
            }
            Err(why) => {
                crate::say::err!(
                    "drover-agent: cached slice {} is refused ({why}); fetching it again",
                    path.display()
                );
                refetched = true;
            }
        }
    }
    let conn = endpoint
        .connect(orchestrator, WEIGHTS_ALPN)
        .await
        .map_err(|e| format!("dialing the orchestrator for weights: {e}"))?;
    let mut header_bytes = Vec::new();
    let recv = request(&conn, w, vec![(0, w.header_len)]).await?;
    read_all(recv, w.header_len, &mut header_bytes).await?;
    if header_bytes.len() as u64 != w.header_len {
        return Err(format!(
            "the orchestrator sent {} of the header's {} bytes (is it serving another model?)",
            header_bytes.len(),
            w.header_len
        ));
    }
    let header_sha = hex(&Sha256::digest(&header_bytes));
    if header_sha != w.header_sha256 {
        return Err(format!(
            "the fetched header's sha256 is {header_sha}, the provision's {}",
            w.header_sha256
        ));
    }
    let header: Header = read_header(header_bytes.as_slice(), w.model_size, "the fetched header")
        .map_err(|e| e.to_string())?;
    let plan = SlicePlan::new(&header, layers(w))?;
    let head = hex(&Sha256::digest(slice_head(&header, &plan)));
    if head != w.slice_head_sha256 {
        return Err(format!(
            "the slice's head would have sha256 {head}, the provision's {} \
             (are the orchestrator and this agent of one build?)",
            w.slice_head_sha256
        ));
    }
    std::fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let recv = request(&conn, w, plan.ranges.clone()).await?;
    let to = Destination {
        path: &path,
        sha256: &w.slice_sha256,
        every: PROGRESS_EVERY,
        piece: PIECE,
    };
    let tensors = stream_slice(recv, header, plan, to, progress).await;
    conn.close(0u32.into(), b"done");
    Ok(Fetched {
        path,
        bytes_fetched: header_bytes.len() as u64 + tensors?,
        refetched,
    })
}

/// Where [`stream_slice`] writes a slice, and what it checks.
struct Destination<'a> {
    /// The slice's place in the cache.
    path: &'a Path,
    /// Its tensors' digest, as the provision gives it.
    sha256: &'a str,
    /// How often progress is reported.
    every: Duration,
    /// Bytes read from the stream at a time.
    piece: u64,
}

/// Writes the slice at `to.path` as its tensors' bytes arrive on `recv`.
/// A blocking thread writes and hashes each piece, and once the stream
/// ends checks the length and the digest and puts the slice in place, or
/// drops it, which removes it: memory holds a few pieces, never the
/// slice, and the runtime's thread does no file I/O. The bytes read.
async fn stream_slice(
    mut recv: impl tokio::io::AsyncRead + Unpin,
    header: Header,
    plan: SlicePlan,
    to: Destination<'_>,
    mut progress: impl FnMut(u64, u64),
) -> Result<u64, String> {
    let total = plan.data_bytes();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(PIECES_IN_FLIGHT);
    let (out, sha256) = (to.path.to_owned(), to.sha256.to_owned());
    let writer = tokio::task::spawn_blocking(move || {
        let failed = |e: std::io::Error| format!("writing {}: {e}", out.display());
        // Best effort: a file that cannot be removed is said, and the
        // fetch goes on.
        for (stale, removed) in remove_stale_partials(&out) {
            match removed {
                Ok(()) => crate::say::err!(
                    "drover-agent: removed {}, left by a fetch whose process died",
                    stale.display()
                ),
                Err(e) => crate::say::err!(
                    "drover-agent: could not remove {}, left by a fetch whose process died: {e}",
                    stale.display()
                ),
            }
        }
        let mut slice = SliceWriter::create(&header, &plan, &out).map_err(failed)?;
        let mut sha = Sha256::new();
        let mut done = 0u64;
        while let Some(piece) = rx.blocking_recv() {
            sha.update(&piece);
            slice.write(&piece).map_err(failed)?;
            done += piece.len() as u64;
        }
        if done != total {
            return Err(format!(
                "the orchestrator sent {done} of {total} bytes (is it serving another model?)"
            ));
        }
        let digest = hex(&sha.finalize());
        if digest != sha256 {
            return Err(format!(
                "the fetched tensors' sha256 is {digest}, the provision's {sha256}"
            ));
        }
        slice.finish().map_err(failed)
    });
    let mut done = 0u64;
    let mut shown = super::every::Every::new(to.every);
    let read = loop {
        if done == total {
            break Ok(());
        }
        let mut piece = Vec::new();
        if let Err(e) = read_all(&mut recv, to.piece.min(total - done), &mut piece).await {
            break Err(e);
        }
        if piece.is_empty() {
            break Ok(());
        }
        done += piece.len() as u64;
        // A closed channel is a failed writer: its error follows.
        if tx.send(piece).await.is_err() {
            break Ok(());
        }
        if shown.due() {
            progress(done, total);
        }
    };
    drop(tx);
    let written = writer
        .await
        .map_err(|e| format!("writing {}: {e}", to.path.display()));
    // A stream that failed is why the writer saw it end short.
    read?;
    written??;
    Ok(done)
}

/// Asks for `ranges` on a stream of its own: the stream their bytes come
/// on, in order.
async fn request(
    conn: &iroh::endpoint::Connection,
    w: &WeightsRef,
    ranges: Vec<(u64, u64)>,
) -> Result<RecvStream, String> {
    let (mut send, recv) = conn
        .open_bi()
        .await
        .map_err(|e| format!("opening a weights stream: {e}"))?;
    let request = WeightsRequest {
        model_digest: w.model_digest.clone(),
        ranges,
    };
    wire::write(&mut send, &request)
        .await
        .map_err(|e| format!("asking for weights: {e}"))?;
    let _ = send.finish();
    Ok(recv)
}

/// Appends up to `len` bytes of `recv` to `out` (fewer where it ends).
async fn read_all(
    recv: impl tokio::io::AsyncRead + Unpin,
    len: u64,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    out.reserve(usize::try_from(len).unwrap_or(0));
    recv.take(len)
        .read_to_end(out)
        .await
        .map_err(|e| format!("reading weights: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::model::Model;

    /// The trained model's slice of blocks 1..3: (model, plan, the
    /// tensors' bytes, their digest).
    fn stories_slice() -> (Model, SlicePlan, Vec<u8>, String) {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models/stories260k.gguf");
        let (model, _) = Model::open(&path)
            .and_then(|m| m.hash(&[], |_, _| {}))
            .expect("the trained model");
        let plan = model.slice(1..3).expect("plan");
        let file = File::open(&path).expect("open");
        let mut data = Vec::new();
        for &(offset, len) in &plan.ranges {
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, offset).expect("read");
            data.extend_from_slice(&buf);
        }
        let (sha, bytes) = slice_digest(&plan, &file).expect("digest");
        assert_eq!(bytes, data.len() as u64);
        (model, plan, data, sha)
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("drover-fetch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    #[tokio::test]
    async fn a_streamed_slice_is_written_once_whole_and_checked() {
        let (model, plan, data, sha) = stories_slice();
        let dir = scratch("whole");
        let path = dir.join("slice.gguf");
        let mut seen = Vec::new();
        // Pieces of 4093 bytes, each reported.
        let to = Destination {
            path: &path,
            sha256: &sha,
            every: Duration::ZERO,
            piece: 4093,
        };
        let header = model.header.clone();
        let n = stream_slice(data.as_slice(), header, plan.clone(), to, |done, total| {
            seen.push((done, total))
        })
        .await
        .expect("streamed");
        let total = data.len() as u64;
        assert_eq!(n, total);
        assert_eq!(seen.len() as u64, total.div_ceil(4093), "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
        assert!(seen.iter().all(|&(done, of)| of == total && done <= total));
        assert_eq!(seen.last(), Some(&(total, total)), "{seen:?}");
        // In place and whole: its tensors are the model's, as the cache
        // checks them.
        let file = File::open(&path).expect("the slice");
        let len = file.metadata().expect("len").len();
        let written = read_header(std::io::BufReader::new(&file), len, "slice").expect("header");
        let again = SlicePlan::new(&written, 1..3).expect("plan");
        assert_eq!(slice_digest(&again, &file).expect("digest").0, sha);
        assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 1);
        std::fs::remove_dir_all(&dir).expect("clean");
    }

    #[tokio::test]
    async fn a_short_or_wrong_stream_or_a_failed_write_leaves_no_slice() {
        let (model, plan, data, sha) = stories_slice();
        let dir = scratch("bad");
        let path = dir.join("slice.gguf");
        let to = |path, sha256| Destination {
            path,
            sha256,
            every: PROGRESS_EVERY,
            piece: 1000,
        };
        let short = &data[..data.len() - 10];
        let header = model.header.clone();
        let e = stream_slice(short, header, plan.clone(), to(&path, &sha), |_, _| {})
            .await
            .expect_err("short");
        let (have, total) = (data.len() - 10, data.len());
        let want =
            format!("the orchestrator sent {have} of {total} bytes (is it serving another model?)");
        assert_eq!(e, want);
        let mut flipped = data.clone();
        flipped[100] ^= 1;
        let header = model.header.clone();
        let e = stream_slice(
            flipped.as_slice(),
            header,
            plan.clone(),
            to(&path, &sha),
            |_, _| {},
        )
        .await
        .expect_err("a flipped bit");
        assert!(e.starts_with("the fetched tensors' sha256 is "), "{e}");
        assert!(e.ends_with(&format!("the provision's {sha}")), "{e}");
        assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 0);
        // A cache the slice cannot be written to: the write's error, with
        // its path, not the stream's.
        let nowhere = dir.join("missing").join("slice.gguf");
        let header = model.header.clone();
        let e = stream_slice(data.as_slice(), header, plan, to(&nowhere, &sha), |_, _| {})
            .await
            .expect_err("no such folder");
        let want = format!("writing {}: ", nowhere.display());
        assert!(e.starts_with(&want), "{e}");
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
