//! A plan's `[model] url` with `sha256`: fetched once by the orchestrator
//! into `<state>/models/<sha256>.gguf`, resumed from where an interrupted
//! fetch stopped (`Range`), checked against the digest before it is used.
//! Nodes never see the url: they fetch their slices from the orchestrator.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often progress is printed while a fetch runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The model file for `url`, fetched unless the state dir has it already.
pub async fn model(
    state_dir: &Path,
    url: &str,
    sha256: &str,
) -> Result<PathBuf, super::PrepareError> {
    use super::PrepareError::{Fetch, Plan};
    let dir = crate::state_dir::StateDir::at(state_dir).models();
    let path = dir.join(format!("{sha256}.gguf"));
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(|e| Fetch(format!("{}: {e}", dir.display())))?;
    let part = dir.join(format!("{sha256}.gguf.part"));
    fetch(url, &part).await.map_err(Fetch)?;
    let digest = {
        let part = part.clone();
        tokio::task::spawn_blocking(move || file_sha256(&part))
            .await
            .map_err(|e| Fetch(e.to_string()))?
            .map_err(Fetch)?
    };
    if digest != sha256 {
        let _ = std::fs::remove_file(&part);
        return Err(Plan(format!(
            "model url {url}: the fetched file's sha256 is {digest}, the plan says {sha256}"
        )));
    }
    std::fs::rename(&part, &path).map_err(|e| Fetch(format!("{}: {e}", path.display())))?;
    Ok(path)
}

fn file_sha256(path: &Path) -> Result<String, String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
    }
    Ok(super::fetch::hex(&sha.finalize()))
}

/// Appends the rest of `url` to `part` (from its current length).
async fn fetch(url: &str, part: &Path) -> Result<(), String> {
    vastai::client::install_crypto_provider();
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("model url {url}: {}", e.without_url()))?;
    let have = std::fs::metadata(part).map_or(0, |m| m.len());
    let mut request = client.get(url);
    if have > 0 {
        request = request.header(reqwest::header::RANGE, format!("bytes={have}-"));
    }
    let mut response = request
        .send()
        .await
        .map_err(|e| format!("model url {url}: {}", e.without_url()))?;
    let status = response.status();
    let resumed = status == reqwest::StatusCode::PARTIAL_CONTENT;
    if !status.is_success() {
        return Err(format!("model url {url}: the server answered {status}"));
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(resumed)
        .write(true)
        .truncate(!resumed)
        .open(part)
        .map_err(|e| format!("{}: {e}", part.display()))?;
    let mut done = if resumed { have } else { 0 };
    let total = response.content_length().map(|n| n + done);
    if resumed {
        crate::say::err!("drover: model url {url}: resuming at byte {have}");
    }
    let mut shown = super::every::Every::new(PROGRESS_EVERY);
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                let _ = file.flush();
                return Err(format!(
                    "model url {url}: the transfer stopped at byte {done} ({}); run again to resume",
                    e.without_url()
                ));
            }
        };
        file.write_all(&chunk)
            .map_err(|e| format!("{}: {e}", part.display()))?;
        done += chunk.len() as u64;
        if shown.due() {
            match total {
                Some(total) => crate::say::err!("drover: model: {done} of {total} bytes"),
                None => crate::say::err!("drover: model: {done} bytes"),
            }
        }
    }
    file.flush()
        .map_err(|e| format!("{}: {e}", part.display()))?;
    if let Some(total) = total
        && done != total
    {
        return Err(format!(
            "model url {url}: the connection ended at byte {done} of {total}; run again to resume"
        ));
    }
    Ok(())
}
