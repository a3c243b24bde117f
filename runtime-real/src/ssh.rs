//! The SSH port: a russh client with one ed25519 identity per state dir,
//! host keys pinned per lease on first connect, one connection per bootstrap
//! session, every command's output streamed line by line.
//!
//! The start command's placeholders are substituted here, the join token
//! among them; the token never leaves this module except inside the command
//! sent to the node, and any output line that echoes it is redacted.

pub mod identity;
mod text;

pub use text::{Placeholders, REDACTED, redact, substitute};

use core_fsm::ids::{LeaseId, OpId};
use core_fsm::port::{Input, LogStream, SshEndpoint, SshError, SshErrorKind};
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, Disconnect};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use text::LineSplitter;
use tokio::sync::mpsc;

/// The port's own bound on one connect attempt (TCP, handshake and auth).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// An open, authenticated connection to one node.
pub struct Connection {
    handle: russh::client::Handle<Client>,
}

/// The client side's handler: pins the host key of the lease.
struct Client {
    pin_file: PathBuf,
    mismatch: Arc<AtomicBool>,
}

impl russh::client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            return Ok(false);
        };
        let offered = key.to_openssh().map_err(|e| russh::Error::Keys(e.into()))?;
        match std::fs::read_to_string(&self.pin_file) {
            Ok(pinned) if pinned.trim() == offered.trim() => Ok(true),
            Ok(_) => {
                self.mismatch.store(true, Ordering::SeqCst);
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // First connect to this lease: pin what it shows.
                if let Some(dir) = self.pin_file.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                crate::provider::local::write_atomic(
                    &self.pin_file,
                    format!("{offered}\n").as_bytes(),
                )?;
                Ok(true)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A lease id as a file name: letters, digits, `-` and `.` kept, anything
/// else (`:`, `/`) as `_`.
pub fn lease_file_stem(lease: &LeaseId) -> String {
    lease
        .as_str()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The file pinning the host key of `lease` under `state_dir`.
pub fn pin_file(state_dir: &Path, lease: &LeaseId) -> PathBuf {
    crate::state_dir::StateDir::at(state_dir)
        .known_hosts()
        .join(lease_file_stem(lease))
}

/// Forgets the pinned host key of a destroyed lease.
pub fn forget_host(state_dir: &Path, lease: &LeaseId) {
    let _ = std::fs::remove_file(pin_file(state_dir, lease));
}

/// Connects and authenticates with `key`; the host key must match the one
/// pinned for `lease` (pinned now if this is the first connect).
pub async fn connect(
    state_dir: &Path,
    endpoint: &SshEndpoint,
    lease: &LeaseId,
    key: Arc<PrivateKey>,
) -> Result<Connection, SshError> {
    let mismatch = Arc::new(AtomicBool::new(false));
    let client = Client {
        pin_file: pin_file(state_dir, lease),
        mismatch: mismatch.clone(),
    };
    let config = Arc::new(russh::client::Config {
        inactivity_timeout: None,
        nodelay: true,
        ..Default::default()
    });
    let address = (endpoint.host.to_string(), endpoint.port);
    let attempt = async {
        let mut handle = russh::client::connect(config, address, client).await?;
        // An RSA key signs with SHA-2 where the server says it can (OpenSSH
        // refuses SHA-1 `ssh-rsa` since 8.8); other keys have one algorithm.
        let hash = if matches!(key.algorithm(), russh::keys::Algorithm::Rsa { .. }) {
            handle
                .best_supported_rsa_hash()
                .await?
                .unwrap_or(Some(russh::keys::HashAlg::Sha256))
        } else {
            None
        };
        let auth = handle
            .authenticate_publickey(
                endpoint.user.as_str(),
                PrivateKeyWithHashAlg::new(key, hash),
            )
            .await?;
        Ok::<_, russh::Error>((handle, auth.success()))
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        Err(_) => Err(ssh_error(SshErrorKind::Timeout, "connect timed out")),
        Ok(Err(e)) => Err(classify(&e, mismatch.load(Ordering::SeqCst))),
        Ok(Ok((_, false))) => Err(ssh_error(SshErrorKind::AuthDenied, "public key refused")),
        Ok(Ok((handle, true))) => Ok(Connection { handle }),
    }
}

/// Reads a private key file (OpenSSH or PEM format, unencrypted): the key
/// of a `static` host. A key that cannot be used is `AuthDenied`: retrying
/// would not change it. The message names the file, never its content.
pub fn load_key(path: &Path) -> Result<Arc<PrivateKey>, SshError> {
    match russh::keys::load_secret_key(path, None) {
        Ok(key) => Ok(Arc::new(key)),
        Err(e) => {
            let why = match e {
                russh::keys::Error::IO(e) => e.to_string(),
                russh::keys::Error::KeyIsEncrypted => {
                    "the key is passphrase-protected (drover needs an unencrypted key)".to_owned()
                }
                _ => "not a private key drover can read".to_owned(),
            };
            Err(ssh_error(
                SshErrorKind::AuthDenied,
                format!("key file {}: {why}", path.display()),
            ))
        }
    }
}

impl Connection {
    /// Runs `command`, forwarding each output line as `Input::SshOutput`
    /// for `op` (with `secret` redacted), and answers the exit code.
    pub async fn exec(
        &self,
        op: OpId,
        command: &str,
        secret: Option<&str>,
        lines: &mpsc::Sender<Input>,
    ) -> Result<i32, SshError> {
        let mut running = self.start(command).await?;
        while let Some((stream, line)) = running.next_line().await {
            forward(op, stream, line, secret, lines).await;
        }
        running.exit_code()
    }

    /// Runs `command` and answers its exit code with its output (stdout and
    /// stderr lines interleaved as they came; the first `max_lines` kept).
    pub async fn exec_collect(
        &self,
        command: &str,
        max_lines: usize,
    ) -> Result<(i32, Vec<String>), SshError> {
        let mut running = self.start(command).await?;
        let mut kept = Vec::new();
        while let Some((_, line)) = running.next_line().await {
            if kept.len() < max_lines {
                kept.push(line);
            }
        }
        Ok((running.exit_code()?, kept))
    }

    async fn start(&self, command: &str) -> Result<Running, SshError> {
        let channel = self
            .handle
            .channel_open_session()
            .await
            .map_err(|e| classify(&e, false))?;
        channel
            .exec(true, command.as_bytes())
            .await
            .map_err(|e| classify(&e, false))?;
        Ok(Running {
            channel,
            stdout: LineSplitter::default(),
            stderr: LineSplitter::default(),
            ready: std::collections::VecDeque::new(),
            code: None,
            ended: false,
        })
    }

    /// Disconnects politely; commands still running on the connection (a
    /// tail of the node's logs) end with it.
    pub async fn close(&self) {
        let _ = self
            .handle
            .disconnect(Disconnect::ByApplication, "", "en")
            .await;
    }
}

/// A command running on a channel: its output as lines, then its exit code.
struct Running {
    channel: russh::Channel<russh::client::Msg>,
    stdout: LineSplitter,
    stderr: LineSplitter,
    /// Lines split off but not handed out yet.
    ready: std::collections::VecDeque<(LogStream, String)>,
    code: Option<i32>,
    ended: bool,
}

impl Running {
    /// The next output line; `None` once the channel closed and every line
    /// (a last one without a newline included) was handed out.
    async fn next_line(&mut self) -> Option<(LogStream, String)> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Some(line);
            }
            if self.ended {
                return None;
            }
            let Some(message) = self.channel.wait().await else {
                self.ended = true;
                for (splitter, stream) in [
                    (&mut self.stdout, LogStream::Stdout),
                    (&mut self.stderr, LogStream::Stderr),
                ] {
                    if let Some(text) = splitter.finish() {
                        self.ready.push_back((stream, text));
                    }
                }
                continue;
            };
            let (splitter, stream, data) = match message {
                ChannelMsg::Data { data } => (&mut self.stdout, LogStream::Stdout, data),
                ChannelMsg::ExtendedData { data, ext: 1 } => {
                    (&mut self.stderr, LogStream::Stderr, data)
                }
                ChannelMsg::ExitStatus { exit_status } => {
                    self.code = Some(exit_status as i32);
                    continue;
                }
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    self.code = Some(128 + signal_number(&signal_name));
                    continue;
                }
                _ => continue,
            };
            for text in splitter.push(&data) {
                self.ready.push_back((stream, text));
            }
        }
    }

    /// The exit code (after `next_line` returned `None`).
    fn exit_code(&self) -> Result<i32, SshError> {
        self.code
            .ok_or_else(|| ssh_error(SshErrorKind::Reset, "channel closed without an exit status"))
    }
}

async fn forward(
    op: OpId,
    stream: LogStream,
    line: String,
    secret: Option<&str>,
    lines: &mpsc::Sender<Input>,
) {
    let line = redact(line, secret);
    // The loop may be gone at shutdown; the line is then nobody's.
    let _ = lines.send(Input::SshOutput { op, stream, line }).await;
}

fn signal_number(name: &russh::Sig) -> i32 {
    match name {
        russh::Sig::KILL => 9,
        russh::Sig::TERM => 15,
        russh::Sig::INT => 2,
        russh::Sig::HUP => 1,
        _ => 0,
    }
}

fn ssh_error(kind: SshErrorKind, message: impl Into<String>) -> SshError {
    SshError {
        kind,
        message: message.into(),
    }
}

/// Maps a russh error onto the kinds the machines act on.
pub fn classify(error: &russh::Error, host_key_mismatch: bool) -> SshError {
    use std::io::ErrorKind as Io;
    let kind = match error {
        russh::Error::UnknownKey if host_key_mismatch => SshErrorKind::HostKeyMismatch,
        russh::Error::IO(e) => match e.kind() {
            Io::ConnectionRefused => SshErrorKind::Refused,
            Io::TimedOut => SshErrorKind::Timeout,
            Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe | Io::UnexpectedEof => {
                SshErrorKind::Reset
            }
            _ => SshErrorKind::Other,
        },
        russh::Error::ConnectionTimeout
        | russh::Error::Elapsed(_)
        | russh::Error::KeepaliveTimeout => SshErrorKind::Timeout,
        russh::Error::NotAuthenticated | russh::Error::NoAuthMethod => SshErrorKind::AuthDenied,
        russh::Error::HUP | russh::Error::Disconnect | russh::Error::SendError => {
            SshErrorKind::Reset
        }
        _ => SshErrorKind::Other,
    };
    let message = if kind == SshErrorKind::HostKeyMismatch {
        "host key differs from the one pinned for this lease".to_owned()
    } else {
        error.to_string()
    };
    ssh_error(kind, message)
}

#[cfg(test)]
mod tests {
    use super::text::LINE_MAX_BYTES;
    use super::*;

    #[test]
    fn lines_are_split_across_chunks_and_bounded() {
        let mut s = LineSplitter::default();
        assert_eq!(s.push(b"ab"), Vec::<String>::new());
        assert_eq!(s.push(b"c\r\nd\n\ne"), vec!["abc", "d", ""]);
        assert_eq!(s.finish().as_deref(), Some("e"));
        assert_eq!(s.finish(), None);
        let long = vec![b'x'; LINE_MAX_BYTES + 10];
        let lines = s.push(&[&long[..], b"\n"].concat());
        assert_eq!(lines[0].len(), LINE_MAX_BYTES);
    }

    #[test]
    fn placeholders_are_substituted_and_the_token_redacted() {
        let values = Placeholders {
            orch_addr: "ADDR",
            node: "w-1",
            run_id: "7",
            lease_id: "local:3",
            join_token: Some("s3cr3t"),
        };
        let cmd = substitute(
            "a --join ${ORCH_ADDR} --node ${LOGICAL_NODE_ID} ${RUN_ID} ${LEASE_ID} ${JOIN_TOKEN}",
            &values,
        );
        assert_eq!(cmd, "a --join ADDR --node w-1 7 local:3 s3cr3t");
        assert_eq!(
            redact("token=s3cr3t!".into(), Some("s3cr3t")),
            "token=[redacted]!"
        );
        assert_eq!(redact("nothing".into(), Some("s3cr3t")), "nothing");
        let no_token = Placeholders {
            join_token: None,
            ..values
        };
        assert_eq!(substitute("${JOIN_TOKEN}", &no_token), "${JOIN_TOKEN}");
    }
}
