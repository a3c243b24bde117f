//! Claims: the user's record, beside every state dir, of which state dir
//! holds each machine's reservation, so that two runs never reserve one
//! machine.

use super::hosts::StaticHost;
use super::{StaticProvider, file_name, reservation_file};
use crate::provider::error;
use core_fsm::ids::LeaseId;
use core_fsm::port::{ProviderError, ProviderErrorKind::Rejected};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A claim as stored in the user's claims folder: which state dir holds
/// the reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Claim {
    pub(super) state_dir: PathBuf,
    pub(super) lease_id: LeaseId,
}

/// The user's claims folder: `$XDG_STATE_HOME/drover/static-claims`, else
/// `~/.local/state/drover/static-claims`.
pub fn default_claims_dir() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("drover").join("static-claims"))
}

/// The claim in `path`; `None` when there is none or it does not read.
fn read_claim(path: &Path) -> Option<Claim> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

impl StaticProvider {
    /// Claims `lease` for this state dir: refused while another state dir
    /// still holds its reservation; a stale claim is taken over.
    pub(super) fn claim(&self, host: &StaticHost, lease: &LeaseId) -> Result<(), ProviderError> {
        let Some(dir) = &self.claims else {
            return Ok(());
        };
        let path = dir.join(file_name(lease));
        let failed = |e: std::io::Error| {
            error(
                Rejected,
                format!("claiming {host} in {}: {e}", path.display()),
            )
        };
        std::fs::create_dir_all(dir).map_err(failed)?;
        let ours = Claim {
            state_dir: self.state_dir.clone(),
            lease_id: lease.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&ours).expect("a claim serialises");
        // The usual case: nobody claimed it; `create_new` makes two
        // claimants race fairly.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                use std::io::Write as _;
                return file.write_all(&bytes).map_err(failed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(failed(e)),
        }
        if let Some(held) = read_claim(&path)
            && held.state_dir != self.state_dir
            && reservation_file(&held.state_dir, lease).exists()
        {
            return Err(error(
                Rejected,
                format!(
                    "{host} is reserved by the run in {}; `drover --state-dir {} down` releases it",
                    held.state_dir.display(),
                    held.state_dir.display()
                ),
            ));
        }
        // Ours already, or stale (or unreadable): take it.
        crate::provider::local::write_atomic(&path, &bytes).map_err(failed)
    }

    /// Gives up this state dir's claim of `lease` (another's is left).
    pub(super) fn release_claim(&self, lease: &LeaseId) {
        let Some(dir) = &self.claims else {
            return;
        };
        let path = dir.join(file_name(lease));
        if read_claim(&path).is_some_and(|c| c.state_dir == self.state_dir) {
            // Gone already is as good as removed; a claim left behind is
            // stale once the reservation is gone, and is taken over.
            let _ = std::fs::remove_file(&path);
        }
    }
}
