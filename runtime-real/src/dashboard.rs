//! The live dashboard (`spec/dashboard.md`): one page, embedded in the
//! binary, fed by one Server-Sent Events stream, served on loopback by
//! `drover up` (and read-only by `drover dashboard` for a run that
//! stopped). It reads only the state dir (journal, live view, pipeline
//! status, datastream), so it sees what `drover status` and `drover logs`
//! see, pushed as it happens.
//!
//! Access needs the run's token: random, drawn when `up` starts, kept in
//! `<state>/dashboard.token` (mode 0600) and carried by the URL `up`
//! prints; it is never written to a log or the datastream.

pub mod controls;
pub mod hub;
pub mod model;
pub mod server;
pub mod watch;

use crate::exit::{EXIT_CONFIG, EXIT_FAILURE, EXIT_OK};
use crate::state_dir::StateDir;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a stopping server waits for its pages to take the last events.
const DRAIN_BOUND: Duration = Duration::from_secs(2);

/// What the command line says of the dashboard of `up`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// `--dashboard ADDR`: where to listen (over the plan's `[dashboard]`).
    pub addr: Option<SocketAddr>,
    /// `--no-dashboard`.
    pub disabled: bool,
}

/// What a server is started with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The state dir it reads.
    pub state_dir: PathBuf,
    /// Where to listen (loopback).
    pub addr: SocketAddr,
    /// A stopped run: no prompt box.
    pub read_only: bool,
    /// Events the ring keeps ([`hub::RING_MAX`]).
    pub ring_max: usize,
    /// The access token.
    pub token: String,
    /// Where the page's controls reach the run (empty: none do).
    pub controls: controls::Controls,
}

/// A running server.
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The page's URL, token included.
    pub url: String,
    hub: Arc<hub::Hub>,
    stop_watcher: tokio::sync::oneshot::Sender<()>,
    watcher: tokio::task::JoinHandle<()>,
    stop_server: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

impl Served {
    /// The stream's hub (tests, `GET /api/state`).
    pub fn hub(&self) -> &Arc<hub::Hub> {
        &self.hub
    }

    /// Reads the state dir one last time, lets the pages take what is left
    /// (bounded), then stops.
    pub async fn stop(self) {
        let _ = self.stop_watcher.send(());
        let _ = self.watcher.await;
        let _ = self.stop_server.send(());
        let mut server = self.server;
        if tokio::time::timeout(DRAIN_BOUND, &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
    }
}

/// Starts a server on `config.addr`.
pub async fn serve(config: Config) -> std::io::Result<Served> {
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| {
            std::io::Error::new(e.kind(), format!("dashboard: binding {}: {e}", config.addr))
        })?;
    let addr = listener.local_addr()?;
    let hub = hub::Hub::new(model::Model::new(config.read_only), config.ring_max);
    // The first reading is in the hub before any page can connect.
    watch::Sources::new(&config.state_dir).tick(&hub, config.read_only);
    let (stop_watcher, stopped) = tokio::sync::oneshot::channel();
    let watcher = tokio::spawn(watch::run(
        config.state_dir.clone(),
        hub.clone(),
        config.read_only,
        stopped,
    ));
    let app = Arc::new(server::App {
        hub: hub.clone(),
        token: config.token.clone(),
        addr,
        state_dir: config.state_dir.clone(),
        read_only: config.read_only,
        controls: config.controls.clone(),
    });
    let (stop_server, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let router = server::router(app);
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop_rx.await;
        };
        // Each event is a small write: without TCP_NODELAY, Nagle holds
        // one back until the page acknowledges the one before (a delayed
        // ACK: up to 40 ms on Linux).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            crate::say::err!("drover: dashboard: {e}");
        }
    });
    Ok(Served {
        addr,
        url: format!("http://{addr}/?token={}", config.token),
        hub,
        stop_watcher,
        watcher,
        stop_server,
        server,
    })
}

/// A new random token (32 bytes, hex).
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut bytes)
        .map_err(|e| std::io::Error::other(format!("dashboard token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `token` to the state dir (0600, atomically).
pub fn store_token(state_dir: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = StateDir::at(state_dir).dashboard_token();
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    std::fs::create_dir_all(state_dir).map_err(named)?;
    let tmp = path.with_extension("token.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(named)?;
    file.write_all(token.as_bytes()).map_err(named)?;
    file.sync_all().map_err(named)?;
    std::fs::rename(&tmp, &path).map_err(named)
}

/// The state dir's token, if one is stored.
pub fn stored_token(state_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(StateDir::at(state_dir).dashboard_token()).ok()?;
    let text = text.trim();
    (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())).then(|| text.to_owned())
}

/// Prints the URL: `{"event":"dashboard","url":...}` with `--json`.
fn announce(url: &str, read_only: bool, json: bool) {
    let line = if json {
        serde_json::json!({ "event": "dashboard", "url": url, "read_only": read_only }).to_string()
    } else {
        format!("dashboard: {url}")
    };
    crate::up::view::println_flush(&line);
}

/// `up`'s dashboard: on unless `--no-dashboard` or `enabled = false`, at
/// `--dashboard ADDR`, else the plan's `addr`, else an ephemeral loopback
/// port. `Err` is the exit code `up` returns.
pub async fn for_up(
    state_dir: &Path,
    plan_path: &Path,
    options: Options,
    json: bool,
    controls: controls::Controls,
) -> Result<Option<Served>, i32> {
    let spec = match crate::plan_toml::dashboard::load(plan_path) {
        Ok(spec) => spec,
        Err(e) => {
            crate::say::err!("drover: {e}");
            return Err(EXIT_CONFIG);
        }
    };
    if options.disabled || (!spec.enabled && options.addr.is_none()) {
        return Ok(None);
    }
    let addr = options
        .addr
        .or(spec.addr)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let token = match new_token().and_then(|t| store_token(state_dir, &t).map(|()| t)) {
        Ok(token) => token,
        Err(e) => {
            crate::say::err!("drover: dashboard: {e}");
            return Err(EXIT_FAILURE);
        }
    };
    let config = Config {
        state_dir: state_dir.to_owned(),
        addr,
        read_only: false,
        ring_max: hub::RING_MAX,
        token,
        controls,
    };
    match serve(config).await {
        Ok(served) => {
            announce(&served.url, false, json);
            Ok(Some(served))
        }
        Err(e) => {
            crate::say::err!("drover: {e}");
            Err(EXIT_FAILURE)
        }
    }
}

/// Stops `up`'s dashboard, if it has one, after the run's last records.
pub async fn stop(served: Option<Served>) {
    if let Some(served) = served {
        served.stop().await;
    }
}

/// `drover dashboard`: the same page, read-only, for the run in
/// `state_dir` (stopped or not), until SIGINT or SIGTERM.
pub async fn command(state_dir: &Path, addr: Option<SocketAddr>, json: bool) -> i32 {
    if !StateDir::at(state_dir).journal().exists() {
        crate::say::err!(
            "drover: no run in {}: {} does not exist",
            state_dir.display(),
            StateDir::at(state_dir).journal().display()
        );
        return EXIT_FAILURE;
    }
    let token = match stored_token(state_dir) {
        Some(token) => Ok(token),
        None => new_token().and_then(|t| store_token(state_dir, &t).map(|()| t)),
    };
    let token = match token {
        Ok(token) => token,
        Err(e) => {
            crate::say::err!("drover: dashboard: {e}");
            return EXIT_FAILURE;
        }
    };
    let config = Config {
        state_dir: state_dir.to_owned(),
        addr: addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
        read_only: true,
        ring_max: hub::RING_MAX,
        token,
        controls: controls::Controls::default(),
    };
    let served = match serve(config).await {
        Ok(served) => served,
        Err(e) => {
            crate::say::err!("drover: {e}");
            return EXIT_FAILURE;
        }
    };
    announce(&served.url, true, json);
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        crate::say::err!("drover: dashboard: cannot install signal handlers");
        return EXIT_FAILURE;
    };
    tokio::select! {
        biased;
        _ = interrupt.recv() => {},
        _ = terminate.recv() => {},
    }
    served.stop().await;
    EXIT_OK
}
