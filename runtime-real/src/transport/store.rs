//! What the control plane keeps on disk under the state dir, so a restarted
//! orchestrator is the same peer to its agents:
//!
//! - `keys/iroh.key`: the endpoint's secret key (hex, mode 0600). Same key,
//!   same endpoint id: agents that dial the old address reach the new process.
//! - `control/port`: the UDP port last bound, tried first on the next bind.
//! - `control/admitted.json`: the agents admitted so far, by node, so a known
//!   agent can rejoin without a token (no secrets in it).

use anyhow::{Context, Result, bail};
use core_fsm::ids::{AgentId, LogicalNodeId};
use core_fsm::port::JoinBinding;
use iroh::SecretKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::state_dir::StateDir;

/// Where one state dir keeps the control plane's files.
#[derive(Clone, Debug)]
pub(crate) struct Store {
    root: PathBuf,
}

/// An agent admitted for a node: the binding its token was minted for and
/// its authenticated endpoint id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Admission {
    pub binding: JoinBinding,
    pub agent: AgentId,
}

impl Store {
    pub fn new(state_dir: &Path) -> Store {
        Store {
            root: state_dir.to_path_buf(),
        }
    }

    /// Loads the endpoint key, creating it (0600, in a 0700 dir) on first use.
    /// A key file others may read is refused, as ssh refuses one.
    pub fn load_or_create_key(&self) -> Result<SecretKey> {
        let dir = StateDir::at(&self.root).keys();
        create_private_dir(&dir)?;
        let path = dir.join("iroh.key");
        if path.exists() {
            let mode = fs::metadata(&path)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!("{} has mode {mode:o}; it must be 0600", path.display());
            }
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let key: SecretKey = text
                .trim()
                .parse()
                .with_context(|| format!("{} does not hold an iroh key", path.display()))?;
            return Ok(key);
        }
        let mut bytes = [0u8; 32];
        rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut bytes)
            .context("the OS random source failed")?;
        let key = SecretKey::from_bytes(&bytes);
        let hex: String = key.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        writeln!(file, "{hex}")?;
        file.sync_all()?;
        Ok(key)
    }

    /// The port bound last time, if any.
    pub fn last_port(&self) -> Option<u16> {
        let text = fs::read_to_string(StateDir::at(&self.root).control().join("port")).ok()?;
        text.trim().parse().ok()
    }

    /// Remembers the bound port.
    pub fn save_port(&self, port: u16) -> Result<()> {
        write_atomic(
            &self.control_dir()?.join("port"),
            format!("{port}\n").as_bytes(),
        )
    }

    /// The admitted agents, by node (empty when none were saved).
    pub fn load_admissions(&self) -> Result<BTreeMap<LogicalNodeId, Admission>> {
        let path = StateDir::at(&self.root).control().join("admitted.json");
        let Ok(text) = fs::read_to_string(&path) else {
            return Ok(BTreeMap::new());
        };
        let list: Vec<Admission> =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Ok(list
            .into_iter()
            .map(|a| (a.binding.node.clone(), a))
            .collect())
    }

    /// Saves the admitted agents (atomically: a crash leaves the old list or
    /// the new one).
    pub fn save_admissions(&self, admissions: &BTreeMap<LogicalNodeId, Admission>) -> Result<()> {
        let list: Vec<&Admission> = admissions.values().collect();
        let text = serde_json::to_string_pretty(&list)?;
        write_atomic(&self.control_dir()?.join("admitted.json"), text.as_bytes())
    }

    fn control_dir(&self) -> Result<PathBuf> {
        let dir = StateDir::at(&self.root).control();
        create_private_dir(&dir)?;
        Ok(dir)
    }
}

fn create_private_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("restricting {}", dir.display()))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("renaming onto {}", path.display()))?;
    if let Some(parent) = path.parent() {
        fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("drover-store-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_key_persists_with_mode_0600() {
        let dir = temp_dir("key");
        let store = Store::new(&dir);
        let first = store.load_or_create_key().unwrap();
        let second = store.load_or_create_key().unwrap();
        assert_eq!(first.public(), second.public());
        let mode = fs::metadata(dir.join("keys/iroh.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        fs::set_permissions(dir.join("keys/iroh.key"), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(store.load_or_create_key().is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
