//! `drover fake-vast --listen 127.0.0.1:PORT`: drover's fake Vast.ai server
//! (crate `vastai`, `spec/vastai.md`) whose instances are real local
//! machines: each one is a local-provider node (`drover local-node`, an SSH
//! server on 127.0.0.1) under the fake's own folder, so `drover up` on a
//! vastai plan runs end to end through the real provider code.
//!
//! The backend is a thin adapter over [`LocalProvider`]: `start` = create a
//! local lease authorizing the instance's keys (and, since the local create
//! returns once the node printed its listening line, look it up `Ready`),
//! `stop` = destroy that lease, `add_key` = append to the node's authorized
//! keys file, `logs` = the lines the fake wrote for the machine and the
//! node's own stderr ([`machine_log`]). On SIGINT or SIGTERM every node it
//! started is destroyed.
//!
//! stdout says what happens, one line per event (`--json`: NDJSON):
//! `listening`, then per instance `starting` (the create was committed),
//! `up`, `failed`, `stopped`. The API key is never printed: the fake accepts
//! exactly the value of `$VAST_API_KEY` (or `--api-key-env NAME`).

mod events;
mod machine_log;

use crate::exit::{EXIT_CONFIG, EXIT_FAILURE, EXIT_OK};
use crate::provider::Provider;
use crate::provider::local::LocalProvider;
use core_fsm::ids::{LogicalNodeId, Nonce, RunId};
use core_fsm::plan::{DesiredShape, ProviderKind};
use core_fsm::port::{CreateLeaseRequest, EndpointStatus, LeaseFacts, ProviderErrorKind};
use events::Events;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use vastai::FakeConfig;
use vastai::client::validate_public_key;
use vastai::fake::{BackendFuture, InstanceBackend, MachineAddr, MachineSpec};
use vastai::label::LeaseLabel;

/// Which timings and limits the fake plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Instant lifecycles, no rate limits (local end-to-end runs).
    Fast,
    /// Vast.ai's measured timings (~73 s to running, SSH 12 s later) and its
    /// documented rate limits.
    Realistic,
}

/// Arguments of `drover fake-vast`.
#[derive(Clone, Debug)]
pub struct Args {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Timings and limits.
    pub profile: Profile,
    /// The environment variable holding the one valid API key.
    pub api_key_env: String,
    /// The fake's folder (its nodes); `<state dir>/fake-vast` by default.
    pub dir: Option<PathBuf>,
}

/// Runs the fake until SIGINT or SIGTERM; returns the exit code.
pub async fn run(state_dir: &Path, args: Args, json: bool) -> i32 {
    let key = match std::env::var(&args.api_key_env) {
        Ok(key) if !key.trim().is_empty() => key.trim().to_owned(),
        _ => {
            crate::stdout::eline!(
                "drover fake-vast: ${} is not set; the fake accepts exactly that key",
                args.api_key_env
            );
            return EXIT_CONFIG;
        }
    };
    let dir = args.dir.unwrap_or_else(|| state_dir.join("fake-vast"));
    let drover = match std::fs::create_dir_all(&dir).and_then(|()| std::env::current_exe()) {
        Ok(drover) => drover,
        Err(e) => {
            crate::stdout::eline!("drover fake-vast: {}: {e}", dir.display());
            return EXIT_FAILURE;
        }
    };
    let key_len = key.chars().count();
    let config = match args.profile {
        Profile::Fast => FakeConfig::fast(&key),
        Profile::Realistic => FakeConfig::realistic(&key),
    };
    let events = Events { json };
    let backend = Arc::new(LocalBackend {
        inner: Arc::new(Inner {
            dir,
            drover,
            events,
            state: Mutex::default(),
        }),
    });
    let server = match vastai::serve(args.listen, config, backend.clone()).await {
        Ok(server) => server,
        Err(e) => {
            crate::stdout::eline!("drover fake-vast: cannot listen on {}: {e}", args.listen);
            return EXIT_FAILURE;
        }
    };
    let url = server.base_url();
    let profile = format!("{:?}", args.profile).to_lowercase();
    events.say(
        json!({"event": "listening", "url": url, "profile": profile,
               "key_env": args.api_key_env, "key_chars": key_len}),
        &format!(
            "fake-vast: listening on {url} (profile {profile}); clients use the key in ${} \
             ({key_len} characters): VAST_URL={url} VAST_API_KEY=... drover up PLAN",
            args.api_key_env
        ),
    );
    wait_for_stop().await;
    server.shutdown();
    let stopped = backend.inner.close().await;
    events.say(
        json!({"event": "closed", "nodes_stopped": stopped}),
        &format!("fake-vast: stopped; {stopped} node(s) destroyed"),
    );
    EXIT_OK
}

async fn wait_for_stop() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut interrupt), Ok(mut terminate)) => {
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
        }
        _ => {
            crate::stdout::eline!(
                "drover fake-vast: cannot install signal handlers; stop with Ctrl-C"
            );
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The fake's instance backend: one local node per instance.
struct LocalBackend {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    drover: PathBuf,
    events: Events,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<u64, Node>,
    /// Instances stopped (or the fake closed) before their start finished:
    /// the node that start brings up is destroyed at once.
    stopped: BTreeSet<u64>,
    closing: bool,
    /// What each machine printed so far (the fake's part of it).
    logs: machine_log::MachineLogs,
}

struct Node {
    provider: Arc<LocalProvider>,
    lease: Arc<LeaseFacts>,
    keys: PathBuf,
}

impl Inner {
    /// One line of instance `id`'s machine log.
    fn print(&self, id: u64, line: String) {
        self.state
            .lock()
            .expect("fake backend state")
            .logs
            .push(id, line);
    }

    /// Instance `id`'s machine log as text.
    fn logs(&self, id: u64) -> String {
        let (own, dir) = {
            let state = self.state.lock().expect("fake backend state");
            let dir = state
                .nodes
                .get(&id)
                .and_then(|n| n.lease.metadata.get("dir").map(PathBuf::from));
            (state.logs.of(id), dir)
        };
        machine_log::text(&own, dir.as_deref())
    }

    fn keys_file(&self, id: u64) -> PathBuf {
        self.dir.join("keys").join(format!("{id}.pub"))
    }

    async fn start(&self, spec: MachineSpec) -> Result<MachineAddr, String> {
        let id = spec.instance_id;
        self.events.instance(
            id,
            "starting",
            json!({"label": spec.label}),
            &format!(" ({})", spec.label),
        );
        self.print(
            id,
            format!("fake-vast: machine {id} starting ({})", spec.image),
        );
        let result = self.start_node(&spec).await;
        if let Err(reason) = &result {
            self.events.instance(
                id,
                "failed",
                json!({"reason": reason}),
                &format!(": {reason}"),
            );
        }
        result
    }

    async fn start_node(&self, spec: &MachineSpec) -> Result<MachineAddr, String> {
        let id = spec.instance_id;
        let keys = self.keys_file(id);
        let lines: Vec<&str> = spec
            .authorized_keys
            .iter()
            .map(|k| k.trim())
            .filter(|k| validate_public_key(k).is_ok())
            .collect();
        if lines.is_empty() {
            return Err("no usable authorized key for the instance".to_owned());
        }
        std::fs::create_dir_all(self.dir.join("keys"))
            .and_then(|()| std::fs::write(&keys, format!("{}\n", lines.join("\n"))))
            .map_err(|e| format!("{}: {e}", keys.display()))?;
        let provider = Arc::new(LocalProvider::new(&self.dir, &self.drover, &keys));
        let label = LeaseLabel::parse(&spec.label);
        let request = CreateLeaseRequest {
            run_id: label.as_ref().map_or(RunId(0), |l| l.run_id),
            node: label.map_or_else(|| LogicalNodeId::new(format!("instance-{id}")), |l| l.node),
            // Instance ids are unique in one fake; the node's own label carries it.
            nonce: Nonce(id),
            provider: ProviderKind::Local,
            shape: DesiredShape::default().into(),
            excluded_hosts: vec![],
        };
        let granted = provider
            .create_lease(request)
            .await
            .map_err(|e| format!("local node: {}", e.message))?;
        let lease = granted.lease;
        // The local create returned once the node printed its listening line,
        // so one lookup settles it.
        let endpoint = match provider.lookup_endpoint(lease.clone()).await {
            Ok(EndpointStatus::Ready(endpoint)) => endpoint,
            other => {
                let _ = provider.destroy_lease(lease).await;
                return Err(format!("local node not ready after its start: {other:?}"));
            }
        };
        let late = {
            let mut state = self.state.lock().expect("fake backend state");
            let late = state.closing || state.stopped.contains(&id);
            if !late {
                let node = Node {
                    provider: provider.clone(),
                    lease: lease.clone(),
                    keys,
                };
                state.nodes.insert(id, node);
            }
            late
        };
        if late {
            let _ = provider.destroy_lease(lease).await;
            return Err("the instance was destroyed while its machine started".to_owned());
        }
        let addr = (endpoint.host.to_string(), endpoint.port);
        self.print(
            id,
            format!(
                "fake-vast: machine {id}: sshd listening on {}:{} ({})",
                addr.0, addr.1, lease.lease_id
            ),
        );
        self.events.instance(
            id,
            "up",
            json!({"ssh": format!("{}:{}", addr.0, addr.1), "lease": lease.lease_id}),
            &format!(": SSH on {}:{}", addr.0, addr.1),
        );
        Ok(MachineAddr {
            direct: addr.clone(),
            proxy: addr,
        })
    }

    async fn stop(&self, id: u64) -> Result<(), String> {
        let node = {
            let mut state = self.state.lock().expect("fake backend state");
            state.stopped.insert(id);
            state.logs.forget(id);
            state.nodes.remove(&id)
        };
        let Some(node) = node else { return Ok(()) };
        destroy(node).await?;
        self.events.instance(id, "stopped", json!({}), "");
        Ok(())
    }

    fn add_key(&self, id: u64, public_key: &str) -> Result<(), String> {
        let key = public_key.trim();
        if validate_public_key(key).is_err() {
            return Err("not one OpenSSH public key line".to_owned());
        }
        let state = self.state.lock().expect("fake backend state");
        let node = state
            .nodes
            .get(&id)
            .ok_or_else(|| format!("instance {id} has no running machine"))?;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&node.keys)
            .map_err(|e| format!("{}: {e}", node.keys.display()))?;
        writeln!(file, "{key}").map_err(|e| format!("{}: {e}", node.keys.display()))?;
        drop(state);
        self.print(id, format!("fake-vast: machine {id}: a key was added"));
        Ok(())
    }

    /// Refuses new machines and destroys every running one; returns how many.
    async fn close(&self) -> usize {
        let nodes: Vec<Node> = {
            let mut state = self.state.lock().expect("fake backend state");
            state.closing = true;
            std::mem::take(&mut state.nodes).into_values().collect()
        };
        let count = nodes.len();
        for node in nodes {
            if let Err(e) = destroy(node).await {
                crate::stdout::eline!("drover fake-vast: {e}");
            }
        }
        count
    }
}

async fn destroy(node: Node) -> Result<(), String> {
    match node.provider.destroy_lease(node.lease.clone()).await {
        Err(e) if e.kind != ProviderErrorKind::NotFound => {
            Err(format!("destroying {}: {}", node.lease.lease_id, e.message))
        }
        _ => {
            let _ = std::fs::remove_file(&node.keys);
            Ok(())
        }
    }
}

impl InstanceBackend for LocalBackend {
    fn start(&self, spec: MachineSpec) -> BackendFuture<MachineAddr> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.start(spec).await })
    }

    fn stop(&self, instance_id: u64) -> BackendFuture<()> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.stop(instance_id).await })
    }

    fn add_key(&self, instance_id: u64, public_key: String) -> BackendFuture<()> {
        let result = self.inner.add_key(instance_id, &public_key);
        Box::pin(async move { result })
    }

    fn logs(&self, instance_id: u64) -> BackendFuture<String> {
        let text = self.inner.logs(instance_id);
        Box::pin(async move { Ok(text) })
    }
}
