//! A stock OpenSSH server for tests: Debian's `sshd`, run in the foreground
//! on 127.0.0.1 ephemeral ports with its own config, host key and
//! authorized keys file, as the user running the tests. A machine without
//! `sshd` fails the test with what to install; it never skips.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long sshd may take to listen.
const LISTEN_BOUND: Duration = Duration::from_secs(20);

/// A running sshd.
pub struct Sshd {
    child: Child,
    /// The ports it listens on (127.0.0.1).
    pub ports: Vec<u16>,
    /// The private key it accepts (`key_file` of the plan's hosts).
    pub client_key: PathBuf,
    /// The user to log in as (the one running the tests).
    pub user: String,
    log: mpsc::Receiver<String>,
}

/// Where sshd is, or a panic saying how to get it.
fn sshd_binary() -> PathBuf {
    for candidate in ["/usr/sbin/sshd", "/usr/bin/sshd", "/usr/local/sbin/sshd"] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!(
        "this test needs a stock OpenSSH server and there is no sshd here: \
         install Debian's openssh-server (`cargo xtask setup` does, as root, \
         or names the command)"
    );
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn current_user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    assert!(out.status.success(), "id -un failed");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

impl Sshd {
    /// Starts sshd in `dir` listening on `ports` fresh ports.
    pub fn start(dir: &Path, ports: usize) -> Sshd {
        let sshd = sshd_binary();
        std::fs::create_dir_all(dir).unwrap();
        // Keys: the host's, and the client's (not drover's own identity, so
        // the test proves the plan's key_file is what signs in).
        let host_dir = dir.join("host");
        let client_dir = dir.join("client");
        runtime_real::ssh::identity::load_or_create(&host_dir).unwrap();
        runtime_real::ssh::identity::load_or_create(&client_dir).unwrap();
        let host_key = runtime_real::ssh::identity::private_key_path(&host_dir);
        let client_key = runtime_real::ssh::identity::private_key_path(&client_dir);
        let authorized = dir.join("authorized_keys");
        std::fs::copy(
            runtime_real::ssh::identity::public_key_path(&client_dir),
            &authorized,
        )
        .unwrap();
        // Debian's sshd needs its privilege separation folder.
        let _ = std::fs::create_dir_all("/run/sshd");
        let ports: Vec<u16> = (0..ports).map(|_| free_port()).collect();
        let mut config = String::new();
        for port in &ports {
            config.push_str(&format!("ListenAddress 127.0.0.1:{port}\n"));
        }
        config.push_str(&format!(
            "HostKey {}\nAuthorizedKeysFile {}\nPidFile {}\n\
             StrictModes no\nUsePAM no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nLogLevel VERBOSE\n",
            host_key.display(),
            authorized.display(),
            dir.join("sshd.pid").display(),
        ));
        let config_path = dir.join("sshd_config");
        std::fs::write(&config_path, config).unwrap();
        let mut child = Command::new(&sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", sshd.display()));
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut sshd = Sshd {
            child,
            ports,
            client_key,
            user: current_user(),
            log,
        };
        sshd.wait_listening();
        sshd
    }

    /// Waits for sshd's "Server listening on ... port P" for every port.
    fn wait_listening(&mut self) {
        let deadline = Instant::now() + LISTEN_BOUND;
        let mut waiting: Vec<u16> = self.ports.clone();
        let mut seen = Vec::new();
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) => {
                    waiting.retain(|p| !line.contains(&format!("port {p}.")));
                    seen.push(line);
                }
                Err(e) => panic!(
                    "sshd did not listen on {waiting:?} ({e}); its output:\n{}",
                    seen.join("\n")
                ),
            }
        }
    }

    /// sshd's log lines so far (for a failing test's message).
    pub fn log(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
