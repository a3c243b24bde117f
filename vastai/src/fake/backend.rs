//! What stands behind a fake instance: a machine that can be started,
//! stopped and reached over SSH.
//!
//! The fake decides *what Vast.ai says* about an instance; the backend makes
//! *the machine* exist. [`MemoryBackend`] has no machine (fixed endpoints, for
//! client tests). A backend over drover's local provider starts one local
//! SSH node per instance and reports its `127.0.0.1:port` as both the direct
//! and the proxy endpoint: a thin adapter (see `spec/vastai.md`).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// A backend's answer, later.
pub type BackendFuture<T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send>>;

/// What a new instance asks of its machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSpec {
    /// The instance (contract) id.
    pub instance_id: u64,
    /// The instance's label.
    pub label: String,
    /// The image asked for.
    pub image: String,
    /// The `onstart` script (Vast.ai runs it after its own entrypoint).
    pub onstart: String,
    /// The environment asked for (port mappings excluded).
    pub env: BTreeMap<String, String>,
    /// Public keys the machine must accept: the account's keys at create
    /// time and every key the `onstart` script appends to `authorized_keys`.
    pub authorized_keys: Vec<String>,
    /// Disk in GB.
    pub disk_gb: u64,
}

/// Where a started machine's SSH server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineAddr {
    /// Direct route: published as `public_ipaddr` + `ports["22/tcp"]`.
    pub direct: (String, u16),
    /// Proxy route: published as `ssh_host:ssh_port`.
    pub proxy: (String, u16),
}

/// Starts and stops the machines behind fake instances.
pub trait InstanceBackend: Send + Sync + 'static {
    /// Starts the machine for a new instance; resolves once its SSH server
    /// is listening (the fake shows `running` only after that).
    fn start(&self, spec: MachineSpec) -> BackendFuture<MachineAddr>;
    /// Stops the machine (destroy, exit, offline, outbid, expiry). Called at
    /// most once per instance.
    fn stop(&self, instance_id: u64) -> BackendFuture<()>;
    /// Adds an authorized key to a running machine (attach-ssh, or an account
    /// key when the fake lets account keys reach existing instances).
    fn add_key(&self, instance_id: u64, public_key: String) -> BackendFuture<()>;
    /// The machine's log as text, oldest line first: what Vast.ai's
    /// `request_logs` hands out (the container's output). By default the
    /// machine printed nothing.
    fn logs(&self, _instance_id: u64) -> BackendFuture<String> {
        Box::pin(async { Ok(String::new()) })
    }
}

/// No machines: every instance "listens" on the same fixed endpoints.
/// Records what it was asked, for tests.
#[derive(Debug)]
pub struct MemoryBackend {
    addr: MachineAddr,
    log: Mutex<MemoryLog>,
}

/// What a [`MemoryBackend`] was asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryLog {
    /// Every start, in order.
    pub started: Vec<MachineSpec>,
    /// Every stop, in order.
    pub stopped: Vec<u64>,
    /// Every added key, in order.
    pub keys_added: Vec<(u64, String)>,
    /// What each machine "printed" (its log), line by line.
    pub lines: BTreeMap<u64, Vec<String>>,
}

impl MemoryBackend {
    /// A backend whose machines all answer on these endpoints.
    pub fn new(direct: (&str, u16), proxy: (&str, u16)) -> MemoryBackend {
        MemoryBackend {
            addr: MachineAddr {
                direct: (direct.0.to_owned(), direct.1),
                proxy: (proxy.0.to_owned(), proxy.1),
            },
            log: Mutex::new(MemoryLog::default()),
        }
    }

    /// What it was asked so far.
    pub fn log(&self) -> MemoryLog {
        self.log.lock().expect("memory backend lock").clone()
    }

    /// Adds a line to machine `instance_id`'s log, as if it printed it.
    pub fn print(&self, instance_id: u64, line: impl Into<String>) {
        let mut log = self.log.lock().expect("memory backend lock");
        log.lines.entry(instance_id).or_default().push(line.into());
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        MemoryBackend::new(("203.0.113.42", 40022), ("ssh5.vast.ai", 10882))
    }
}

impl InstanceBackend for MemoryBackend {
    fn start(&self, spec: MachineSpec) -> BackendFuture<MachineAddr> {
        self.print(
            spec.instance_id,
            format!("machine {} started ({})", spec.instance_id, spec.image),
        );
        self.log
            .lock()
            .expect("memory backend lock")
            .started
            .push(spec);
        let addr = self.addr.clone();
        Box::pin(async move { Ok(addr) })
    }

    fn stop(&self, instance_id: u64) -> BackendFuture<()> {
        self.log
            .lock()
            .expect("memory backend lock")
            .stopped
            .push(instance_id);
        Box::pin(async { Ok(()) })
    }

    fn add_key(&self, instance_id: u64, public_key: String) -> BackendFuture<()> {
        self.log
            .lock()
            .expect("memory backend lock")
            .keys_added
            .push((instance_id, public_key));
        Box::pin(async { Ok(()) })
    }

    fn logs(&self, instance_id: u64) -> BackendFuture<String> {
        let log = self.log.lock().expect("memory backend lock");
        let lines = log.lines.get(&instance_id).cloned().unwrap_or_default();
        Box::pin(async move { Ok(lines.iter().map(|l| format!("{l}\n")).collect()) })
    }
}

/// The keys an `onstart` script appends to `authorized_keys`
/// (`echo '<key>' >> ~/.ssh/authorized_keys`), as drover's client and
/// SkyPilot write it.
pub fn keys_in_onstart(onstart: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = onstart;
    while let Some(at) = rest.find("echo '") {
        let after = &rest[at + "echo '".len()..];
        let Some(end) = after.find('\'') else { break };
        let tail = after[end + 1..].trim_start();
        if tail.starts_with(">>") && tail[2..].trim_start().starts_with("~/.ssh/authorized_keys") {
            let key = after[..end].trim().to_owned();
            if !key.is_empty() && !keys.contains(&key) {
                keys.push(key);
            }
        }
        rest = &after[end + 1..];
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_appended_by_onstart() {
        let script = crate::client::onstart_script("ssh-ed25519 AAAAC3Nz drover");
        assert_eq!(
            keys_in_onstart(&script),
            vec!["ssh-ed25519 AAAAC3Nz drover".to_owned()]
        );
        assert!(keys_in_onstart("echo 'x' > /tmp/y").is_empty());
    }
}
