//! The state dir's SSH identity: one ed25519 key, generated once, stored
//! `0600` at `<state>/keys/id_ed25519` with its public half next to it. The
//! private key is never printed.

use crate::state_dir::StateDir;
use russh::keys::ssh_key::LineEnding;
use russh::keys::{Algorithm, PrivateKey};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The private key file of `state_dir`.
pub fn private_key_path(state_dir: &Path) -> PathBuf {
    StateDir::at(state_dir).keys().join("id_ed25519")
}

/// The public key file of `state_dir` (what local nodes authorize).
pub fn public_key_path(state_dir: &Path) -> PathBuf {
    StateDir::at(state_dir).keys().join("id_ed25519.pub")
}

/// Loads the identity of `state_dir`, generating it on first use.
pub fn load_or_create(state_dir: &Path) -> anyhow::Result<Arc<PrivateKey>> {
    let private = private_key_path(state_dir);
    let key = match std::fs::read_to_string(&private) {
        Ok(text) => {
            let mode = std::fs::metadata(&private)?.permissions().mode() & 0o777;
            anyhow::ensure!(
                mode & 0o077 == 0,
                "{} must not be readable by others (mode {mode:o})",
                private.display()
            );
            PrivateKey::from_openssh(text.as_bytes()).map_err(|e| {
                anyhow::anyhow!("{} is not an OpenSSH private key: {e}", private.display())
            })?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(state_dir)?,
        Err(e) => return Err(e.into()),
    };
    let public = public_key_path(state_dir);
    if !public.exists() {
        std::fs::write(&public, format!("{}\n", key.public_key().to_openssh()?))?;
    }
    Ok(Arc::new(key))
}

fn create(state_dir: &Path) -> anyhow::Result<PrivateKey> {
    let dir = StateDir::at(state_dir).keys();
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let key = PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519)?;
    let text = key.to_openssh(LineEnding::LF)?;
    // Created 0600 from the start: the key is never readable by others,
    // not even for a moment.
    let tmp = dir.join("id_ed25519.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, private_key_path(state_dir))?;
    std::fs::write(
        public_key_path(state_dir),
        format!("{}\n", key.public_key().to_openssh()?),
    )?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_private_and_stable() {
        let dir = std::env::temp_dir().join(format!("drover-identity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = load_or_create(&dir).unwrap();
        let mode = std::fs::metadata(private_key_path(&dir))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let again = load_or_create(&dir).unwrap();
        assert_eq!(first.public_key(), again.public_key());
        let public = std::fs::read_to_string(public_key_path(&dir)).unwrap();
        assert!(public.starts_with("ssh-ed25519 "));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
