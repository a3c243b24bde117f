//! The model on the orchestrator: its GGUF header (layer count, context,
//! tokenizer), its digests, each stage's slice, and the byte ranges it
//! serves to nodes over iroh ([`WEIGHTS_ALPN`](super::wire::WEIGHTS_ALPN)).

use super::fetch::{hex, slice_digest};
use super::wire::{self, WeightsRef, WeightsRequest};
use iroh::endpoint::Connection;
use sha2::{Digest, Sha256};
use std::io::{Read, Seek};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;
use workers::gguf::Header;
use workers::gguf::read::read_header;
use workers::gguf::slice::SlicePlan;
use workers::model::Config;
use workers::tokenizer::Tokenizer;

/// Bytes served per write on a weights stream.
const CHUNK: u64 = 1 << 20;

/// An opened model.
pub struct Model {
    /// Where it is.
    pub path: PathBuf,
    file: std::fs::File,
    /// Its size in bytes.
    pub size: u64,
    /// sha256 (hex) of the whole file.
    pub digest: String,
    /// Its header.
    pub header: Header,
    /// Bytes of the header (the data section starts there).
    pub header_len: u64,
    header_sha256: String,
    /// The model's shape.
    pub config: Config,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
}

impl Model {
    /// Opens and hashes `path`; every problem names the file.
    pub fn open(path: &Path) -> Result<Model, String> {
        let label = path.display().to_string();
        let mut file = std::fs::File::open(path).map_err(|e| format!("{label}: {e}"))?;
        let size = file.metadata().map_err(|e| format!("{label}: {e}"))?.len();
        let header =
            read_header(std::io::BufReader::new(&file), size, &label).map_err(|e| e.to_string())?;
        let config = Config::from_header(&header, &label).map_err(|e| e.to_string())?;
        let tokenizer = Tokenizer::from_gguf(&header).map_err(|e| format!("{label}: {e}"))?;
        let header_len = header.data_offset;
        file.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| format!("{label}: {e}"))?;
        let mut sha = Sha256::new();
        let mut header_sha = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(|e| format!("{label}: {e}"))?;
            if n == 0 {
                break;
            }
            sha.update(&buf[..n]);
            let head = header_len.saturating_sub(at).min(n as u64) as usize;
            header_sha.update(&buf[..head]);
            at += n as u64;
        }
        Ok(Model {
            path: path.to_owned(),
            file,
            size,
            digest: hex(&sha.finalize()),
            header,
            header_len,
            header_sha256: hex(&header_sha.finalize()),
            config,
            tokenizer,
        })
    }

    /// The model's blocks.
    pub fn layers(&self) -> u32 {
        self.config.blocks as u32
    }

    /// The model's context in positions.
    pub fn context(&self) -> u32 {
        u32::try_from(self.config.context).unwrap_or(u32::MAX)
    }

    /// The slice plan of blocks `layers`.
    pub fn slice(&self, layers: Range<usize>) -> Result<SlicePlan, String> {
        SlicePlan::new(&self.header, layers)
    }

    /// What a stage of blocks `layers` fetches and checks.
    pub fn weights_for(&self, layers: Range<usize>) -> Result<WeightsRef, String> {
        let plan = self.slice(layers.clone())?;
        let (slice_sha256, slice_bytes) =
            slice_digest(&plan, &self.file).map_err(|e| e.to_string())?;
        Ok(WeightsRef {
            model_digest: self.digest.clone(),
            model_size: self.size,
            header_len: self.header_len,
            header_sha256: self.header_sha256.clone(),
            first_layer: layers.start as u32,
            end_layer: layers.end as u32,
            slice_sha256,
            slice_bytes,
        })
    }

    fn read(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let mut out = vec![0u8; usize::try_from(len).map_err(std::io::Error::other)?];
        self.file.read_exact_at(&mut out, offset)?;
        Ok(out)
    }

    /// Serves byte ranges on every connection `conns` yields, until it ends.
    pub async fn serve(self: Arc<Self>, mut conns: mpsc::Receiver<Connection>) {
        while let Some(conn) = conns.recv().await {
            tokio::spawn(self.clone().serve_connection(conn));
        }
    }

    async fn serve_connection(self: Arc<Self>, conn: Connection) {
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            let request: WeightsRequest = match wire::read(&mut recv).await {
                Ok(request) => request,
                Err(e) => {
                    crate::say::err!("drover: weights request from {}: {e}", conn.remote_id());
                    conn.close(2u32.into(), b"bad weights request");
                    return;
                }
            };
            if let Err(why) = self.check(&request) {
                crate::say::err!("drover: weights request from {}: {why}", conn.remote_id());
                // The node reads fewer bytes than it asked for and says so.
                let _ = send.finish();
                continue;
            }
            for (offset, len) in request.ranges {
                let mut done = 0;
                while done < len {
                    let n = CHUNK.min(len - done);
                    let Ok(bytes) = self.read(offset + done, n) else {
                        return;
                    };
                    if send.write_all(&bytes).await.is_err() {
                        return;
                    }
                    done += n;
                }
            }
            let _ = send.finish();
        }
    }

    fn check(&self, request: &WeightsRequest) -> Result<(), String> {
        if request.model_digest != self.digest {
            return Err(format!(
                "asks for model {}, this orchestrator serves {}",
                request.model_digest, self.digest
            ));
        }
        let mut total = 0u64;
        for &(offset, len) in &request.ranges {
            if offset.checked_add(len).is_none_or(|end| end > self.size) {
                return Err(format!(
                    "range {offset}+{len} is outside the {}-byte model",
                    self.size
                ));
            }
            total += len;
        }
        if total > self.size {
            return Err(format!(
                "asks for {total} bytes of a {}-byte model",
                self.size
            ));
        }
        Ok(())
    }
}
