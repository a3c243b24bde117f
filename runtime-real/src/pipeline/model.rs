//! The model on the orchestrator: its GGUF header (layer count, context,
//! tokenizer), its digests, each stage's slice, and the byte ranges it
//! serves to nodes over iroh ([`WEIGHTS_ALPN`](super::wire::WEIGHTS_ALPN)).

use super::wire::{self, WeightsRequest};
use iroh::endpoint::Connection;
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

mod hash;

use super::fetch::{PIECE, PIECES_IN_FLIGHT};

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

/// A model whose header is read and whose bytes are not hashed yet
/// ([`Model::open`]); [`Unhashed::hash`] reads them once.
pub struct Unhashed {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    header: Header,
    /// The model's shape.
    pub config: Config,
    tokenizer: Tokenizer,
}

impl Model {
    /// Opens `path` and reads its header (its shape, its tokenizer); every
    /// problem names the file. [`Unhashed::hash`] reads the rest.
    pub fn open(path: &Path) -> Result<Unhashed, String> {
        let label = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| format!("{label}: {e}"))?;
        let size = file.metadata().map_err(|e| format!("{label}: {e}"))?.len();
        let header =
            read_header(std::io::BufReader::new(&file), size, &label).map_err(|e| e.to_string())?;
        let config = Config::from_header(&header, &label).map_err(|e| e.to_string())?;
        let tokenizer = Tokenizer::from_gguf(&header).map_err(|e| format!("{label}: {e}"))?;
        Ok(Unhashed {
            path: path.to_owned(),
            file,
            size,
            header,
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
            // The file is read on a blocking thread, a few pieces ahead:
            // a node fetching its slice while the pipeline serves (a
            // repair) never stalls the orchestrator's loop on the disk.
            let (tx, mut rx) = mpsc::channel(PIECES_IN_FLIGHT);
            let model = self.clone();
            tokio::task::spawn_blocking(move || {
                for (offset, len) in request.ranges {
                    let mut done = 0;
                    while done < len {
                        let n = PIECE.min(len - done);
                        let piece = model.read(offset + done, n);
                        let failed = piece.is_err();
                        // A closed channel: the node went away.
                        if tx.blocking_send(piece).is_err() || failed {
                            return;
                        }
                        done += n;
                    }
                }
            });
            while let Some(piece) = rx.recv().await {
                let bytes = match piece {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        let path = self.path.display();
                        crate::say::err!("drover: weights for {}: {path}: {e}", conn.remote_id());
                        return;
                    }
                };
                if send.write_all(&bytes).await.is_err() {
                    return;
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
