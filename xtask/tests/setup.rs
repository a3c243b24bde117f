//! `cargo xtask setup` (the first step of `cargo xtask ci`) against a fake
//! machine: a temporary folder with its own PATH, sbin, home and root, whose
//! `apt-get`, `rustup`, `python3` and `pip` are shell scripts that log what
//! they were asked and make what the real ones would.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use xtask::setup::{self, Check, Host, Prerequisite};

/// A temporary folder, removed at the end of the test.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A machine with nothing on it: empty PATH and sbin folders, an empty home.
/// One at a time: a script written while another test's thread forks stays
/// open in that child until it execs, and running it then fails with
/// "text file busy".
struct Fake {
    scratch: Scratch,
    host: Host,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Fake {
    fn new(euid: u32) -> Fake {
        static ONE: Mutex<()> = Mutex::new(());
        let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xtask-setup-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["bin", "sbin", "home", "root"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let host = Host {
            path: vec![dir.join("bin")],
            sbin: vec![dir.join("sbin")],
            home: dir.join("home"),
            root: dir.join("root"),
            euid,
        };
        Fake {
            scratch: Scratch(dir),
            host,
            _one_at_a_time: guard,
        }
    }

    fn dir(&self, sub: &str) -> PathBuf {
        self.scratch.0.join(sub)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir("log")).unwrap_or_default()
    }

    /// Makes what `check` looks for; a socket lives as long as its listener.
    fn provide(&self, check: &Check) -> Option<std::os::unix::net::UnixListener> {
        match *check {
            Check::Program(name) | Check::Runs(name, _) => {
                script(&self.dir("bin").join(name), "exit 0");
            }
            Check::Venv(venv) => script(&venv.program_path(&self.host.home), "exit 0"),
            Check::VenvFile(venv, file) => {
                let at = venv
                    .dir(&self.host.home)
                    .join("lib/python3.11/site-packages")
                    .join(file);
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::fs::write(at, "").unwrap();
            }
            Check::Socket(path) => {
                let at = self.host.root.join(path.trim_start_matches('/'));
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                return Some(std::os::unix::net::UnixListener::bind(at).unwrap());
            }
        }
        None
    }

    /// Provides every prerequisite of the table except `but`.
    /// The sockets' listeners are returned: a socket answers while its
    /// listener lives.
    fn provide_all_but(&self, but: &[&str]) -> Vec<std::os::unix::net::UnixListener> {
        setup::prerequisites()
            .iter()
            .filter(|p| !but.contains(&p.name))
            .filter_map(|p| self.provide(&p.check))
            .collect()
    }

    /// A fake `apt-get` that logs its arguments and, on `install`, makes
    /// `sshd` in sbin when `makes_sshd`.
    fn apt_get(&self, makes_sshd: bool) {
        let sshd = self.dir("sbin/sshd");
        let make = if makes_sshd {
            format!(
                "if [ \"$1\" = install ]; then printf '#!/bin/sh\\n' > {0}; /bin/chmod +x {0}; fi",
                sshd.display()
            )
        } else {
            String::new()
        };
        let body = format!(
            "echo \"$DEBIAN_FRONTEND apt-get $*\" >> {}\n{make}",
            self.dir("log").display()
        );
        script(&self.dir("bin/apt-get"), &body);
    }

    fn run(&self) -> (bool, String) {
        let mut out = Vec::new();
        let ok = setup::run(&self.host, &setup::prerequisites(), &mut out);
        (ok, String::from_utf8(out).unwrap())
    }
}

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn docker() -> Prerequisite {
    Prerequisite::service(
        "docker",
        "/var/run/docker.sock",
        "start a Docker engine",
        "a test",
    )
}

#[test]
fn every_check_fails_on_a_bare_machine_and_passes_once_it_is_there() {
    let table = setup::prerequisites();
    let names: Vec<&str> = table.iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "openssh-server",
            "rustfmt",
            "clippy",
            "python3-venv",
            "busybox-static",
            "docker",
            "chromium",
            "chromium-driver",
            "vastai-cli-1.9.1",
            "nvidia-cuda-nvrtc-12.4.127",
        ]
    );
    for p in &table {
        let fake = Fake::new(0);
        assert!(
            !p.check.passes(&fake.host),
            "{} found on a bare machine",
            p.name
        );
        let _listener = fake.provide(&p.check);
        assert!(
            p.check.passes(&fake.host),
            "{} not found once there",
            p.name
        );
    }
}

#[test]
fn a_program_in_sbin_is_found_but_not_one_that_cannot_run() {
    let fake = Fake::new(0);
    let sshd = Check::Program("sshd");
    std::fs::write(fake.dir("bin/sshd"), "not executable").unwrap();
    assert!(!sshd.passes(&fake.host));
    script(&fake.dir("sbin/sshd"), "exit 0");
    assert!(sshd.passes(&fake.host));
}

#[test]
fn a_rustup_proxy_without_its_component_is_missing() {
    let fake = Fake::new(0);
    // What rustup's proxy does for a component that is not installed.
    script(
        &fake.dir("bin/cargo-fmt"),
        "echo \"error: 'cargo-fmt' is not installed\" >&2; exit 1",
    );
    let rustfmt = &setup::prerequisites()[1];
    assert_eq!(rustfmt.name, "rustfmt");
    assert!(!rustfmt.check.passes(&fake.host));
}

#[test]
fn root_installs_a_missing_sshd_with_apt_get() {
    let fake = Fake::new(0);
    let _sockets = fake.provide_all_but(&["openssh-server"]);
    fake.apt_get(true);
    let (ok, out) = fake.run();
    assert!(ok, "{out}");
    assert_eq!(
        fake.log(),
        "noninteractive apt-get update\nnoninteractive apt-get install -y openssh-server\n"
    );
    assert!(out.contains("setup: openssh-server: missing; runtime-real/tests/up_static.rs"));
    assert!(
        out.contains("==> apt-get install -y openssh-server\n"),
        "{out}"
    );
    assert!(
        out.ends_with("setup: installed 1 prerequisite(s)\n"),
        "{out}"
    );
    assert!(Check::Program("sshd").passes(&fake.host));
}

#[test]
fn not_root_names_the_command_once_and_installs_nothing() {
    let fake = Fake::new(1000);
    let _sockets = fake.provide_all_but(&["openssh-server"]);
    fake.apt_get(true);
    let (ok, out) = fake.run();
    assert!(!ok);
    let command = "    sudo apt-get update && sudo apt-get install -y openssh-server";
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("apt-get")).collect();
    assert_eq!(lines, [command], "{out}");
    assert_eq!(fake.log(), "");
    assert!(!Check::Program("sshd").passes(&fake.host));
}

#[test]
fn not_root_on_a_bare_machine_gets_one_command_for_everything() {
    let fake = Fake::new(1000);
    let (ok, out) = fake.run();
    assert!(!ok);
    let venv = fake.host.home.join(".cache/drover/vastai-cli-1.9.1");
    let venv = venv.display();
    let nvrtc = fake
        .host
        .home
        .join(".cache/drover/nvidia-cuda-nvrtc-12.4.127");
    let nvrtc = nvrtc.display();
    let command = format!(
        "    sudo apt-get update && sudo apt-get install -y openssh-server python3-venv busybox-static chromium chromium-driver \
         && rustup component add rustfmt clippy && python3 -m venv --clear {venv} \
         && {venv}/bin/pip install --disable-pip-version-check vastai==1.9.1 \
         && python3 -m venv --clear {nvrtc} \
         && {nvrtc}/bin/pip install --disable-pip-version-check nvidia-cuda-nvrtc-cu12==12.4.127"
    );
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("    ")).collect();
    assert_eq!(lines, [command.as_str()], "{out}");
    assert!(out.contains(
        "setup: missing: openssh-server, rustfmt, clippy, python3-venv, busybox-static, docker, chromium, chromium-driver, vastai-cli-1.9.1, nvidia-cuda-nvrtc-12.4.127\n"
    ));
}

#[test]
fn user_level_installs_run_without_root() {
    let fake = Fake::new(1000);
    let _sockets = fake.provide_all_but(&["rustfmt", "vastai-cli-1.9.1"]);
    let log = fake.dir("log");
    let log = log.display();
    let bin = fake.dir("bin");
    script(
        &fake.dir("bin/rustup"),
        &format!(
            "echo \"rustup $*\" >> {log}; printf '#!/bin/sh\\n' > {0}/cargo-fmt; /bin/chmod +x {0}/cargo-fmt",
            bin.display()
        ),
    );
    // pip makes the venv's program next to itself.
    let pip = fake.dir("pip-template");
    script(
        &pip,
        &format!(
            "echo \"pip $*\" >> {log}; printf '#!/bin/sh\\n' > \"${{0%/*}}/vastai\"; /bin/chmod +x \"${{0%/*}}/vastai\""
        ),
    );
    script(
        &fake.dir("bin/python3"),
        &format!(
            "echo \"python3 $*\" >> {log}; if [ \"$1\" = -m ]; then /bin/mkdir -p \"$4/bin\"; /bin/cp {} \"$4/bin/pip\"; fi",
            pip.display()
        ),
    );
    let (ok, out) = fake.run();
    assert!(ok, "{out}");
    let venv = fake.host.home.join(".cache/drover/vastai-cli-1.9.1");
    let installs: Vec<String> = fake
        .log()
        .lines()
        .filter(|l| !l.starts_with("python3 -c"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        installs,
        [
            "rustup component add rustfmt".to_owned(),
            format!("python3 -m venv --clear {}", venv.display()),
            "pip install --disable-pip-version-check vastai==1.9.1".to_owned(),
        ]
    );
    assert!(
        setup::VASTAI_CLI
            .program_path(&fake.host.home)
            .ends_with(".cache/drover/vastai-cli-1.9.1/bin/vastai")
    );
}

#[test]
fn a_failed_install_or_one_that_did_not_help_fails_setup() {
    let fake = Fake::new(0);
    let _sockets = fake.provide_all_but(&["openssh-server"]);
    script(&fake.dir("bin/apt-get"), "exit 100");
    let (ok, out) = fake.run();
    assert!(!ok);
    assert!(out.contains("setup: `apt-get update` failed\n"), "{out}");

    fake.apt_get(false);
    let (ok, out) = fake.run();
    assert!(!ok);
    assert!(
        out.ends_with("setup: still missing: openssh-server\n"),
        "{out}"
    );
}

#[test]
fn a_service_is_checked_and_named_never_installed() {
    let fake = Fake::new(0);
    let _sockets = fake.provide_all_but(&["docker"]);
    let table = setup::prerequisites();
    let mut out = Vec::new();
    assert!(!setup::run(&fake.host, &table, &mut out));
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.ends_with(
            "setup: still missing: docker\nsetup: docker: start a Docker engine (dockerd) and let this user reach /var/run/docker.sock\n"
        ),
        "{out}"
    );

    let _listener = fake.provide(&docker().check);
    assert!(setup::run(&fake.host, &table, &mut Vec::new()));
}

#[test]
fn an_odd_home_is_quoted_for_the_shell() {
    let fake = Fake::new(1000);
    let mut host = fake.host.clone();
    host.home = PathBuf::from("/home/o'neil x");
    let steps = setup::plan(&[Prerequisite::venv(setup::VASTAI_CLI, "a test")], &host);
    assert_eq!(
        setup::command_line(&steps, false),
        "python3 -m venv --clear '/home/o'\\''neil x/.cache/drover/vastai-cli-1.9.1' \
         && '/home/o'\\''neil x/.cache/drover/vastai-cli-1.9.1/bin/pip' install \
         --disable-pip-version-check vastai==1.9.1"
    );
}

#[test]
fn the_effective_uid_is_the_second_of_the_uid_line() {
    let status = "Name:\tcat\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
    assert_eq!(setup::effective_uid(status), Some(0));
    assert_eq!(setup::effective_uid("Name:\tcat\n"), None);
}
