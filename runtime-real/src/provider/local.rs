//! The local provider: each lease is a child process that plays the rented
//! machine, `drover local-node`, an SSH server on 127.0.0.1 that runs every
//! command with `/bin/sh -c` in the node's own folder.
//!
//! Layout under the state dir:
//!
//! ```text
//! nodes/next            the next lease number (never reused, so a host key
//!                       pinned for `local:3` never meets another `local:3`)
//! nodes/<n>/label       drover:run-<run>:<node>:nonce-<nonce>   (before the spawn)
//! nodes/<n>/pid         written by the node itself, first thing
//! nodes/<n>/port        written by the node once it listens
//! nodes/<n>/server.log  the node server's own stderr
//! ```
//!
//! The node runs in its own process group, so a Ctrl-C of `drover up` does
//! not kill it (teardown does), and destroying the lease kills everything it
//! started. Listing by label reads `nodes/*/label` of live nodes, which is
//! how a restarted `drover up` adopts a create whose answer it lost.

pub mod node;
pub mod process;

use super::{BoxFuture, Provider, error};
use core_fsm::ids::LeaseLabel;
use core_fsm::ids::{LeaseId, RunId};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError,
    ProviderErrorKind::{NotFound, Rejected, Transient},
    SshEndpoint,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long a new node may take to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a node's leader gets between SIGTERM and SIGKILL of its group
/// (the node server exits on SIGTERM at once; the agent was told to shut
/// down over the control plane before).
const STOP_GRACE: Duration = Duration::from_millis(500);
/// The user name the local SSH server reports (it accepts any name with the
/// right key).
pub const SSH_USER: &str = "drover";

/// The local provider of one state dir.
pub struct LocalProvider {
    state_dir: PathBuf,
    drover_binary: PathBuf,
    authorized_key: PathBuf,
    /// Children this process spawned, kept so they are reaped on destroy.
    children: Mutex<BTreeMap<u32, tokio::process::Child>>,
    /// Serialises lease-number allocation within this process.
    allocate: Mutex<()>,
}

impl LocalProvider {
    /// A provider whose nodes live under `<state_dir>/nodes`, run by
    /// `drover_binary local-node`, and accept the key in `authorized_key`.
    /// Commands on a node find the binaries next to `drover_binary` on PATH.
    /// Relative paths are made absolute first: a node runs in its own folder.
    pub fn new(state_dir: &Path, drover_binary: &Path, authorized_key: &Path) -> LocalProvider {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
        LocalProvider {
            state_dir: absolute(state_dir),
            drover_binary: absolute(drover_binary),
            authorized_key: absolute(authorized_key),
            children: Mutex::new(BTreeMap::new()),
            allocate: Mutex::new(()),
        }
    }

    fn nodes_dir(&self) -> PathBuf {
        crate::state_dir::StateDir::at(&self.state_dir).nodes()
    }

    /// The folder of lease `local:<n>`.
    pub fn lease_dir(&self, lease_id: &LeaseId) -> Option<PathBuf> {
        let n: u64 = lease_id.as_str().strip_prefix("local:")?.parse().ok()?;
        Some(self.nodes_dir().join(n.to_string()))
    }

    /// Takes the next lease number and creates its folder.
    fn allocate_dir(&self) -> std::io::Result<(u64, PathBuf)> {
        let _guard = self.allocate.lock().expect("allocation lock");
        std::fs::create_dir_all(self.nodes_dir())?;
        let counter = self.nodes_dir().join("next");
        let mut n: u64 = match std::fs::read_to_string(&counter) {
            Ok(text) => text.trim().parse().unwrap_or(0),
            Err(_) => 0,
        };
        loop {
            let dir = self.nodes_dir().join(n.to_string());
            n += 1;
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    write_atomic(&counter, n.to_string().as_bytes())?;
                    return Ok((n - 1, dir));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    async fn create(&self, request: CreateLeaseRequest) -> Result<LeaseGranted, ProviderError> {
        let transient = |e: std::io::Error| error(Transient, format!("local node: {e}"));
        let (n, dir) = self.allocate_dir().map_err(transient)?;
        // The label goes first: a crash after the spawn still leaves a node
        // that a restarted orchestrator finds by label.
        write_atomic(
            &dir.join("label"),
            LeaseLabel {
                run_id: request.run_id,
                node: request.node.clone(),
                nonce: request.nonce,
            }
            .render()
            .as_bytes(),
        )
        .map_err(transient)?;
        let (pid, port) = self.spawn_node(&dir).await?;
        let mut metadata = BTreeMap::new();
        metadata.insert("dir".to_owned(), dir.display().to_string());
        let lease = LeaseFacts {
            provider: ProviderKind::Local,
            lease_id: LeaseId::new(format!("local:{n}")),
            contract_id: pid.to_string(),
            offer_id: None,
            host_id: Some("localhost".to_owned()),
            nonce: request.nonce,
            metadata,
        };
        Ok(LeaseGranted {
            lease: Arc::new(lease),
            endpoint: Some(endpoint(port)),
        })
    }

    /// Spawns `drover local-node` in its own process group and waits (with
    /// a bound) for the line that says it listens.
    async fn spawn_node(&self, dir: &Path) -> Result<(u32, u16), ProviderError> {
        let log = std::fs::File::create(dir.join("server.log"))
            .map_err(|e| error(Transient, format!("local node log: {e}")))?;
        let mut command = tokio::process::Command::new(&self.drover_binary);
        command
            .arg("local-node")
            .arg("--dir")
            .arg(dir)
            .arg("--authorized-key")
            .arg(&self.authorized_key)
            .arg("--port-file")
            .arg(dir.join("port"))
            .current_dir(dir)
            // A rented machine does not have the user's environment (API
            // keys, tokens): the node starts with a machine's own.
            .env_clear()
            .envs(machine_env(dir))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0);
        let mut child = command.spawn().map_err(|e| {
            error(
                Rejected,
                format!("cannot start {}: {e}", self.drover_binary.display()),
            )
        })?;
        let pid = child.id().expect("a just-spawned child has a pid");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let listening = tokio::time::timeout(LISTEN_TIMEOUT, lines.next_line()).await;
        let port = match listening {
            Ok(Ok(Some(line))) => line
                .strip_prefix("listening ")
                .and_then(|p| p.trim().parse().ok()),
            _ => None,
        };
        self.children
            .lock()
            .expect("children lock")
            .insert(pid, child);
        match port {
            Some(port) => Ok((pid, port)),
            None => {
                let _ = process::stop_group(pid, STOP_GRACE).await;
                self.reap(pid).await;
                let reason = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                let reason = reason.lines().last().unwrap_or("no output").to_owned();
                Err(error(
                    Transient,
                    format!("local node did not listen: {reason}"),
                ))
            }
        }
    }

    async fn reap(&self, pid: u32) {
        let child = self.children.lock().expect("children lock").remove(&pid);
        if let Some(mut child) = child {
            let _ = child.wait().await;
        }
    }

    async fn lookup(&self, lease: Arc<LeaseFacts>) -> Result<EndpointStatus, ProviderError> {
        let Some(dir) = self.lease_dir(&lease.lease_id).filter(|d| d.is_dir()) else {
            return Ok(EndpointStatus::Gone);
        };
        let pid: u32 = lease
            .contract_id
            .parse()
            .map_err(|_| error(Rejected, "bad local contract id"))?;
        if !process::is_our_node(pid, &dir) {
            return Ok(EndpointStatus::Failed {
                reason: "local node process exited".into(),
            });
        }
        match std::fs::read_to_string(dir.join("port"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            Some(port) => Ok(EndpointStatus::Ready(endpoint(port))),
            None => Ok(EndpointStatus::Pending {
                detail: "not listening yet".into(),
            }),
        }
    }

    /// Destroys a lease: stops its process group and removes its folder.
    async fn destroy(&self, lease: Arc<LeaseFacts>) -> Result<(), ProviderError> {
        let dir = self
            .lease_dir(&lease.lease_id)
            .ok_or_else(|| error(Rejected, "not a local lease id"))?;
        let pid: Option<u32> = lease.contract_id.parse().ok();
        let mut found = dir.is_dir();
        if let Some(pid) = pid {
            if process::is_our_node(pid, &dir) {
                found = true;
                process::stop_group(pid, STOP_GRACE)
                    .await
                    .map_err(|e| error(Transient, format!("stopping local node {pid}: {e}")))?;
            }
            if found {
                // Members that outlived their leader (or whose leader was
                // killed by someone else) still run in the node's folder.
                process::sweep_group(pid, &dir)
                    .await
                    .map_err(|e| error(Transient, format!("sweep: {e}")))?;
            }
            self.reap(pid).await;
        }
        if !found {
            return Err(error(
                NotFound,
                format!("{} does not exist", lease.lease_id),
            ));
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(error(Transient, format!("removing {}: {e}", dir.display()))),
        }
    }

    /// Every live node labelled with `run_id`.
    fn list(&self, run_id: RunId) -> Result<Vec<LeaseFacts>, ProviderError> {
        let entries = match std::fs::read_dir(self.nodes_dir()) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(error(Transient, format!("listing local nodes: {e}"))),
        };
        let mut leases = Vec::new();
        for entry in entries.flatten() {
            let dir = entry.path();
            let Some(n) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
            let Some(label) = read("label").and_then(|text| LeaseLabel::parse(text.trim())) else {
                continue;
            };
            let (run, nonce) = (label.run_id, label.nonce);
            let Some(pid) = read("pid").and_then(|p| p.trim().parse::<u32>().ok()) else {
                continue;
            };
            if run != run_id || !process::is_our_node(pid, &dir) {
                continue;
            }
            let mut metadata = BTreeMap::new();
            metadata.insert("dir".to_owned(), dir.display().to_string());
            leases.push(LeaseFacts {
                provider: ProviderKind::Local,
                lease_id: LeaseId::new(format!("local:{n}")),
                contract_id: pid.to_string(),
                offer_id: None,
                host_id: Some("localhost".to_owned()),
                nonce,
                metadata,
            });
        }
        leases.sort();
        Ok(leases)
    }
}

impl Provider for LocalProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Local
    }

    fn create_lease(
        &self,
        request: CreateLeaseRequest,
    ) -> BoxFuture<'_, Result<LeaseGranted, ProviderError>> {
        Box::pin(self.create(request))
    }

    fn lookup_endpoint(
        &self,
        lease: Arc<LeaseFacts>,
    ) -> BoxFuture<'_, Result<EndpointStatus, ProviderError>> {
        Box::pin(self.lookup(lease))
    }

    fn destroy_lease(&self, lease: Arc<LeaseFacts>) -> BoxFuture<'_, Result<(), ProviderError>> {
        Box::pin(self.destroy(lease))
    }

    fn list_leases(
        &self,
        run_id: RunId,
    ) -> BoxFuture<'_, Result<Vec<Arc<LeaseFacts>>, ProviderError>> {
        Box::pin(async move { Ok(self.list(run_id)?.into_iter().map(Arc::new).collect()) })
    }
}

/// The environment a local node (and every command it runs) starts with:
/// what a freshly rented machine has, not what `drover` was started with.
/// Only `PATH` is carried over (so the node finds the shell tools and the
/// drover binaries as the user's shell does); `HOME` is the node's folder.
/// Everything else, an API key above all, stays behind.
pub fn machine_env(dir: &Path) -> [(&'static str, std::ffi::OsString); 3] {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    [
        ("PATH", path),
        (
            "HOME",
            std::path::absolute(dir)
                .unwrap_or_else(|_| dir.to_owned())
                .into(),
        ),
        ("LANG", "C.UTF-8".into()),
    ]
}

fn endpoint(port: u16) -> SshEndpoint {
    SshEndpoint {
        host: "127.0.0.1".into(),
        port,
        user: SSH_USER.into(),
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// reader never sees half of it. The temporary name is unique per process
/// and call: two writers of one path (two providers over one nodes folder,
/// as the fake Vast.ai server has) must not rename each other's file away.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{n}", std::process::id()));
    let tmp = path.with_file_name(name);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
