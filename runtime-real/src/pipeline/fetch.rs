//! Slice-only weights on a node: the GGUF header and the stage's tensors'
//! byte ranges, fetched from the orchestrator over iroh, checked against
//! the digests of the provision, written as a standalone slice GGUF, and
//! cached under (model digest, layer range, format version). A cached slice
//! is checked again before it is reused; one that fails is fetched anew.

use super::wire::{self, WEIGHTS_ALPN, WeightsRef, WeightsRequest};
use iroh::EndpointAddr;
use iroh::endpoint::Endpoint;
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt;
use workers::gguf::Header;
use workers::gguf::read::{parse_header, read_header};
use workers::gguf::slice::{SlicePlan, write_slice};

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

/// The digest and byte count of a slice's tensor data, read range by range
/// with `read(offset, len)`, in file order.
pub fn slice_digest(
    plan: &SlicePlan,
    mut read: impl FnMut(u64, u64) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<(String, u64)> {
    let mut sha = Sha256::new();
    for &(offset, len) in &plan.ranges {
        sha.update(read(offset, len)?);
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
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let label = path.display().to_string();
    let header = parse_header(&bytes, &label).map_err(|e| e.to_string())?;
    let plan = SlicePlan::new(&header, layers(w))?;
    let (digest, _) = slice_digest(&plan, |offset, len| {
        let range = usize::try_from(offset).unwrap_or(usize::MAX)
            ..usize::try_from(offset + len).unwrap_or(usize::MAX);
        bytes
            .get(range)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| std::io::Error::other("a tensor runs past the end of the file"))
    })
    .map_err(|e| e.to_string())?;
    if digest != w.slice_sha256 {
        return Err(format!(
            "its tensors' sha256 is {digest}, the provision's {}",
            w.slice_sha256
        ));
    }
    Ok(())
}

/// The slice of `w`, from the cache or from the orchestrator.
pub async fn slice(
    endpoint: &Endpoint,
    orchestrator: EndpointAddr,
    w: &WeightsRef,
    cache: &Path,
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
    let header_bytes = ranges(&conn, w, vec![(0, w.header_len)]).await?;
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
    let data = ranges(&conn, w, plan.ranges.clone()).await?;
    conn.close(0u32.into(), b"done");
    let fetched = header_bytes.len() as u64 + data.len() as u64;
    let mut at = 0usize;
    let mut offsets = std::collections::BTreeMap::new();
    for &(offset, len) in &plan.ranges {
        offsets.insert(offset, at..at + len as usize);
        at += len as usize;
    }
    let (digest, _) = slice_digest(&plan, |offset, _| {
        Ok(data[offsets[&offset].clone()].to_vec())
    })
    .map_err(|e| e.to_string())?;
    if digest != w.slice_sha256 {
        return Err(format!(
            "the fetched tensors' sha256 is {digest}, the provision's {}",
            w.slice_sha256
        ));
    }
    std::fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let out = path.clone();
    tokio::task::spawn_blocking(move || {
        write_slice(
            &header,
            &plan,
            |offset, _| Ok(data[offsets[&offset].clone()].to_vec()),
            &out,
        )
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(Fetched {
        path,
        bytes_fetched: fetched,
        refetched,
    })
}

/// Asks for `ranges` on a stream of its own and reads their bytes.
async fn ranges(
    conn: &iroh::endpoint::Connection,
    w: &WeightsRef,
    ranges: Vec<(u64, u64)>,
) -> Result<Vec<u8>, String> {
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    let (mut send, mut recv) = conn
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
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    (&mut recv)
        .take(total)
        .read_to_end(&mut out)
        .await
        .map_err(|e| format!("reading weights: {e}"))?;
    if out.len() as u64 != total {
        return Err(format!(
            "the orchestrator sent {} of {total} bytes (is it serving another model?)",
            out.len()
        ));
    }
    Ok(out)
}
