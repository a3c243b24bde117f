//! `drover local-node`: the process that plays a rented machine. An SSH
//! server on 127.0.0.1 (russh), public-key auth against the keys of an
//! `authorized_keys`-style file (read at each attempt, so a key appended
//! later is accepted, as sshd does),
//! a fresh host key per node, and every exec run by `/bin/sh -c` in the
//! node's folder with its stdout/stderr streamed back as they come.

use russh::keys::{Algorithm, PrivateKey, PublicKey};
use russh::server::{Auth, Handle, Msg, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, MethodKind, MethodSet};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// How long output may keep arriving after the command's shell exited (a
/// background job that kept the pipe open is abandoned after this).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// Arguments of `drover local-node`.
#[derive(Clone, Debug)]
pub struct NodeArgs {
    /// The node's folder: commands run here.
    pub dir: PathBuf,
    /// The public keys allowed in: OpenSSH public key lines (usually one).
    pub authorized_key: PathBuf,
    /// Where the listening port is written.
    pub port_file: PathBuf,
    /// The address to listen on: `127.0.0.1:0` for a local node (any free
    /// port), `0.0.0.0:22` inside a container (published by the engine).
    pub listen: std::net::SocketAddr,
}

/// Serves until killed. Writes `pid` into the node folder first, then binds
/// the listen address, writes the port file, and prints `listening <port>` on
/// stdout (the provider waits for that line).
pub async fn serve(args: NodeArgs) -> anyhow::Result<()> {
    super::write_atomic(
        &args.dir.join("pid"),
        std::process::id().to_string().as_bytes(),
    )?;
    // Fail fast on a file without a single key; later reads re-check it.
    anyhow::ensure!(
        !authorized_keys(&args.authorized_key).is_empty(),
        "{} holds no OpenSSH public key",
        args.authorized_key.display()
    );
    let host_key = PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519)?;
    let config = Arc::new(russh::server::Config {
        keys: vec![host_key],
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        auth_rejection_time: Duration::from_millis(50),
        auth_rejection_time_initial: Some(Duration::ZERO),
        inactivity_timeout: None,
        nodelay: true,
        ..Default::default()
    });
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let port = listener.local_addr()?.port();
    super::write_atomic(&args.port_file, port.to_string().as_bytes())?;
    println!("listening {port}");
    let path = path_with_binaries()?;
    loop {
        let (socket, peer) = listener.accept().await?;
        let handler = Node {
            authorized: args.authorized_key.clone(),
            dir: args.dir.clone(),
            path: path.clone(),
            running: Arc::default(),
        };
        let config = config.clone();
        tokio::spawn(async move {
            match russh::server::run_stream(config, socket, handler).await {
                Ok(session) => {
                    if let Err(e) = session.await {
                        crate::stdout::eline!("local-node: session from {peer} ended: {e}");
                    }
                }
                Err(e) => crate::stdout::eline!("local-node: handshake from {peer} failed: {e}"),
            }
        });
    }
}

/// PATH with the folder of this binary first, so `drover-agent` (built next
/// to `drover`) resolves in commands.
fn path_with_binaries() -> anyhow::Result<String> {
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().map(Path::to_owned).unwrap_or_default();
    let rest = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    Ok(format!("{}:{rest}", bin_dir.display()))
}

/// One client connection.
struct Node {
    /// The authorized keys file.
    authorized: PathBuf,
    dir: PathBuf,
    path: String,
    /// Shells of this connection's commands that still run.
    running: Arc<Mutex<BTreeSet<u32>>>,
}

impl Drop for Node {
    /// The connection is gone: its commands still running (a `tail -F` of
    /// the node's logs) go with it, as they would with sshd. Jobs a command
    /// put in the background (the agent) are not its children any more
    /// and stay.
    fn drop(&mut self) {
        let running = std::mem::take(&mut *self.running.lock().expect("running lock"));
        for pid in running {
            for child in children_of(pid) {
                kill(child);
            }
            kill(pid);
        }
    }
}

fn kill(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let mut children = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) {
            children.push(pid);
        }
    }
    children
}

/// The public keys in an `authorized_keys`-style file; unreadable lines
/// (comments, options, garbage) are skipped.
fn authorized_keys(path: &Path) -> Vec<PublicKey> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| PublicKey::from_openssh(line).ok())
        .collect()
}

impl Node {
    fn accepts(&self, key: &PublicKey) -> bool {
        authorized_keys(&self.authorized)
            .iter()
            .any(|k| k.key_data() == key.key_data())
    }
}

impl russh::server::Handler for Node {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        _user: &str,
        offer: russh::server::PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.accepts(offer.public_key) {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn auth_publickey(
        &mut self,
        _user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.accepts(key.public_key) {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        reply.accept().await;
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)?;
        let command = String::from_utf8_lossy(data).into_owned();
        let handle = session.handle();
        let (dir, path, running) = (self.dir.clone(), self.path.clone(), self.running.clone());
        // Never block the session loop: the command runs in its own task.
        tokio::spawn(
            async move { run_command(handle, channel, command, dir, path, running).await },
        );
        Ok(())
    }
}

/// Runs one command and streams its output, then its exit status.
async fn run_command(
    handle: Handle,
    channel: ChannelId,
    command: String,
    dir: PathBuf,
    path: String,
    running: Arc<Mutex<BTreeSet<u32>>>,
) {
    let spawned = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&command)
        .current_dir(&dir)
        // A machine's environment, not the one this server was started
        // with (see `machine_env`).
        .env_clear()
        .envs(super::machine_env(&dir))
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = handle
                .extended_data(
                    channel,
                    1,
                    format!("local-node: cannot run /bin/sh: {e}\n").into_bytes(),
                )
                .await;
            finish(&handle, channel, 127).await;
            return;
        }
    };
    let pid = child.id().expect("a just-spawned child has a pid");
    running.lock().expect("running lock").insert(pid);
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let mut out = tokio::spawn(pump(stdout, handle.clone(), channel, None));
    let mut err = tokio::spawn(pump(stderr, handle.clone(), channel, Some(1)));
    let code = match child.wait().await {
        Ok(status) => status.code().unwrap_or(128 + status_signal(&status)),
        Err(_) => 255,
    };
    running.lock().expect("running lock").remove(&pid);
    // The shell is gone; its output usually ends with it. A background job
    // that kept a pipe open is not waited for beyond a bound.
    let drained = async {
        let _ = (&mut out).await;
        let _ = (&mut err).await;
    };
    let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, drained).await;
    out.abort();
    err.abort();
    finish(&handle, channel, code).await;
}

fn status_signal(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().unwrap_or(0)
}

async fn finish(handle: &Handle, channel: ChannelId, code: i32) {
    let _ = handle.exit_status_request(channel, code as u32).await;
    let _ = handle.eof(channel).await;
    let _ = handle.close(channel).await;
}

/// Copies a pipe to the channel as data arrives (stderr as extended data 1).
async fn pump(
    mut pipe: impl tokio::io::AsyncRead + Unpin,
    handle: Handle,
    channel: ChannelId,
    ext: Option<u32>,
) {
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = buf[..n].to_vec();
        let sent = match ext {
            None => handle.data(channel, chunk).await.is_ok(),
            Some(ext) => handle.extended_data(channel, ext, chunk).await.is_ok(),
        };
        if !sent {
            return;
        }
    }
}
