//! What the tests need from the machine, in one table: `cargo xtask setup`,
//! also the first step of `cargo xtask ci`.
//!
//! Each [`Prerequisite`] says why it is needed, how to check it and how to
//! install it. Setup checks them all; as root it installs what is missing
//! (`apt-get update` once, then one `apt-get install`, then the user-level
//! installs); as anyone else it installs the user-level ones itself when
//! nothing needs root, and otherwise prints once the one command that would
//! install everything and fails, before any long build.
//!
//! To add one, append an entry to [`prerequisites`] built with one of the
//! constructors ([`Prerequisite::apt_program`], [`Prerequisite::apt_runs`],
//! [`Prerequisite::rustup`], [`Prerequisite::venv`],
//! [`Prerequisite::service`]), naming in `why` the test that needs it, e.g.
//!
//! ```text
//! Prerequisite::apt_program("chromium-driver", "chromedriver", "the web view's browser tests (X/tests/Y.rs) drive a headless Chromium"),
//! Prerequisite::apt_program("busybox-static", "busybox", "the Docker image's init (X/tests/Y.rs)"),
//! Prerequisite::service("docker", "/var/run/docker.sock", "start a Docker engine (dockerd) and let this user reach its socket", "..."),
//! ```
//!
//! and add its check to the fake-PATH test in `xtask/tests/setup.rs` if
//! it is of a new kind. Nothing else keeps a list: `.ci/run` only runs
//! `cargo xtask ci`.

mod install;

pub use install::{Step, command_line, plan, run};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the venvs live, under the home folder: `~/.cache/drover/`.
pub const CACHE_DIR: &str = ".cache/drover";

/// The official Vast.ai CLI, whose tests run it against drover's fake
/// Vast.ai server: `~/.cache/drover/vastai-cli-1.9.1/bin/vastai`.
pub const VASTAI_CLI: Venv = Venv {
    name: "vastai-cli-1.9.1",
    packages: &["vastai==1.9.1"],
    program: "vastai",
};

/// NVRTC from NVIDIA's wheel, which `workers/tests/cuda_nvrtc.rs` compiles
/// every CUDA kernel with (no GPU needed). 12.4: the oldest CUDA an H200
/// runs, the one `workers/gpu-check.sh` carries to the GPU machine.
pub const NVRTC: Venv = Venv {
    name: "nvidia-cuda-nvrtc-12.4.127",
    packages: &["nvidia-cuda-nvrtc-cu12==12.4.127"],
    program: "python3",
};

/// Where [`NVRTC`]'s library lies inside its venv's site-packages.
pub const NVRTC_LIBRARY: &str = "nvidia/cuda_nvrtc/lib/libnvrtc.so.12";

/// A Python virtual environment under [`CACHE_DIR`], named for what it holds
/// and its version, so a new version is a new folder and never a half-upgraded
/// old one.
#[derive(Clone, Copy, Debug)]
pub struct Venv {
    /// Its folder's name, `NAME-VERSION`.
    pub name: &'static str,
    /// What pip installs into it, pinned (`vastai==1.9.1`).
    pub packages: &'static [&'static str],
    /// The command the tests run, in its `bin/`; it must answer `--version`.
    pub program: &'static str,
}

impl Venv {
    /// Its folder for the user whose home is `home`.
    pub fn dir(&self, home: &Path) -> PathBuf {
        home.join(CACHE_DIR).join(self.name)
    }

    /// The path of its program for the user whose home is `home`.
    pub fn program_path(&self, home: &Path) -> PathBuf {
        self.dir(home).join("bin").join(self.program)
    }

    /// The file at `relative` under its `lib/python3.*/site-packages/`,
    /// where one is.
    pub fn site_file(&self, home: &Path, relative: &str) -> Option<PathBuf> {
        let lib = self.dir(home).join("lib");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&lib)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        dirs.sort();
        dirs.into_iter()
            .filter(|d| {
                d.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
            })
            .map(|d| d.join("site-packages").join(relative))
            .find(|f| f.is_file())
    }
}

/// How to tell whether a prerequisite is there.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// An executable of this name on PATH or in an sbin folder.
    Program(&'static str),
    /// An executable found as for `Program` that exits 0 with these
    /// arguments (a rustup proxy without its component exits 1).
    Runs(&'static str, &'static [&'static str]),
    /// The venv's program answers `--version`.
    Venv(Venv),
    /// The venv's packages installed this file (relative to its
    /// site-packages): for packages that bring a library, not a program.
    VenvFile(Venv, &'static str),
    /// A Unix socket at this absolute path (under the host's root) accepts a
    /// connection.
    Socket(&'static str),
}

/// How to install a missing prerequisite.
#[derive(Clone, Copy, Debug)]
pub enum Install {
    /// A Debian package (as root: `apt-get install -y`).
    Apt(&'static str),
    /// A rustup component of the active toolchain (any user).
    Rustup(&'static str),
    /// A venv made with `python3 -m venv`, then `pip install` (any user).
    Venv(Venv),
    /// Nothing setup can do by itself: this sentence says what to do.
    Manual(&'static str),
}

/// One external thing the tests need.
#[derive(Clone, Copy, Debug)]
pub struct Prerequisite {
    /// Its name, as the user installs it (the package, the component).
    pub name: &'static str,
    /// The test that needs it, and what for.
    pub why: &'static str,
    /// How to tell it is there.
    pub check: Check,
    /// How to install it.
    pub install: Install,
}

impl Prerequisite {
    /// A Debian package that provides the program `program`.
    pub const fn apt_program(
        package: &'static str,
        program: &'static str,
        why: &'static str,
    ) -> Self {
        Self {
            name: package,
            why,
            check: Check::Program(program),
            install: Install::Apt(package),
        }
    }

    /// A Debian package that is there when `program args` exits 0.
    pub const fn apt_runs(
        package: &'static str,
        program: &'static str,
        args: &'static [&'static str],
        why: &'static str,
    ) -> Self {
        Self {
            name: package,
            why,
            check: Check::Runs(program, args),
            install: Install::Apt(package),
        }
    }

    /// A rustup component that is there when `program --version` exits 0.
    pub const fn rustup(component: &'static str, program: &'static str, why: &'static str) -> Self {
        Self {
            name: component,
            why,
            check: Check::Runs(program, &["--version"]),
            install: Install::Rustup(component),
        }
    }

    /// Python packages in a venv under `~/.cache/drover/` that are there
    /// when they installed `file` (relative to its site-packages).
    pub const fn venv_file(venv: Venv, file: &'static str, why: &'static str) -> Self {
        Self {
            name: venv.name,
            why,
            check: Check::VenvFile(venv, file),
            install: Install::Venv(venv),
        }
    }

    /// Python packages in a venv under `~/.cache/drover/`.
    pub const fn venv(venv: Venv, why: &'static str) -> Self {
        Self {
            name: venv.name,
            why,
            check: Check::Venv(venv),
            install: Install::Venv(venv),
        }
    }

    /// A service setup can check but not start: its socket must answer.
    pub const fn service(
        name: &'static str,
        socket: &'static str,
        what_to_do: &'static str,
        why: &'static str,
    ) -> Self {
        Self {
            name,
            why,
            check: Check::Socket(socket),
            install: Install::Manual(what_to_do),
        }
    }
}

/// Everything the tests need, in install order (a venv after the Debian
/// package that makes venvs).
pub fn prerequisites() -> Vec<Prerequisite> {
    vec![
        Prerequisite::apt_program(
            "openssh-server",
            "sshd",
            "runtime-real/tests/up_static.rs runs the static provider against a stock OpenSSH server",
        ),
        Prerequisite::rustup(
            "rustfmt",
            "cargo-fmt",
            "`cargo xtask ci` checks the formatting with `cargo fmt --check`",
        ),
        Prerequisite::rustup(
            "clippy",
            "cargo-clippy",
            "`cargo xtask ci` lints with clippy, warnings denied",
        ),
        Prerequisite::apt_runs(
            "python3-venv",
            "python3",
            &["-c", "import ensurepip, venv"],
            "makes the venvs below; Debian's python3 has no ensurepip without it",
        ),
        Prerequisite::apt_program(
            "busybox-static",
            "busybox",
            "the docker provider's node image (runtime-real/tests/docker_*.rs, up_docker.rs) takes a static busybox as its /bin/sh",
        ),
        Prerequisite::service(
            "docker",
            "/var/run/docker.sock",
            "start a Docker engine (dockerd) and let this user reach /var/run/docker.sock",
            "the docker provider's tests (runtime-real/tests/docker_*.rs, up_docker.rs) run containers on the real engine",
        ),
        Prerequisite::apt_program(
            "chromium",
            "chromium",
            "the dashboard's browser test (runtime-real/tests/dashboard_browser.rs) runs a headless Chromium",
        ),
        Prerequisite::apt_program(
            "chromium-driver",
            "chromedriver",
            "the dashboard's browser test (runtime-real/tests/dashboard_browser.rs) drives Chromium over WebDriver",
        ),
        Prerequisite::venv(
            VASTAI_CLI,
            "the official Vast.ai CLI, vastai==1.9.1, run against the fake Vast.ai server by the vastai crate's tests",
        ),
        Prerequisite::venv_file(
            NVRTC,
            NVRTC_LIBRARY,
            "workers/tests/cuda_nvrtc.rs compiles every CUDA kernel with NVRTC (no GPU needed)",
        ),
    ]
}

/// The parts of the machine a check looks at, as parameters so that tests
/// can point them at a temporary folder.
#[derive(Clone, Debug)]
pub struct Host {
    /// The folders of PATH, in order.
    pub path: Vec<PathBuf>,
    /// The sbin folders, searched after PATH (a user's PATH often lacks them).
    pub sbin: Vec<PathBuf>,
    /// The home folder, which holds [`CACHE_DIR`] (`$HOME`, else `/root`).
    pub home: PathBuf,
    /// The folder a [`Check::Socket`] path is taken under: `/`, or a fake root.
    pub root: PathBuf,
    /// The effective user id: 0 may install Debian packages.
    pub euid: u32,
}

impl Host {
    /// This machine, as this process sees it.
    pub fn current() -> Host {
        let path = std::env::var_os("PATH").unwrap_or_default();
        Host {
            path: std::env::split_paths(&path).collect(),
            sbin: ["/usr/local/sbin", "/usr/sbin", "/sbin"]
                .iter()
                .map(PathBuf::from)
                .collect(),
            home: std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/root")),
            root: PathBuf::from("/"),
            euid: current_euid(),
        }
    }

    /// Whether this user may install Debian packages.
    pub fn is_root(&self) -> bool {
        self.euid == 0
    }

    /// The first executable file named `program` on PATH, then in the sbin
    /// folders; a path with a slash is taken as it is.
    pub fn find(&self, program: &str) -> Option<PathBuf> {
        if program.contains('/') {
            let path = PathBuf::from(program);
            return is_executable(&path).then_some(path);
        }
        self.path
            .iter()
            .chain(&self.sbin)
            .map(|dir| dir.join(program))
            .find(|candidate| is_executable(candidate))
    }

    /// PATH as children of setup see it.
    pub fn path_var(&self) -> std::ffi::OsString {
        std::env::join_paths(&self.path).unwrap_or_default()
    }

    /// Runs `program args` quietly with this host's PATH; true if it exited 0.
    fn runs(&self, program: &str, args: &[&str]) -> bool {
        let Some(exe) = self.find(program) else {
            return false;
        };
        Command::new(exe)
            .args(args)
            .env("PATH", self.path_var())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Check {
    /// Whether the prerequisite is there on `host`.
    pub fn passes(&self, host: &Host) -> bool {
        match *self {
            Check::Program(name) => host.find(name).is_some(),
            Check::Runs(program, args) => host.runs(program, args),
            Check::Venv(venv) => host.runs(
                venv.program_path(&host.home).to_string_lossy().as_ref(),
                &["--version"],
            ),
            Check::VenvFile(venv, file) => venv.site_file(&host.home, file).is_some(),
            Check::Socket(path) => {
                let at = host.root.join(path.trim_start_matches('/'));
                std::os::unix::net::UnixStream::connect(at).is_ok()
            }
        }
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The effective uid from `/proc/self/status`, else `id -u`; an unknown one
/// is taken as not root, so setup asks rather than fails half-way.
fn current_euid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| effective_uid(&text))
        .or_else(|| {
            let out = Command::new("id").arg("-u").output().ok()?;
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        })
        .unwrap_or(u32::MAX)
}

/// The effective uid in the text of `/proc/<pid>/status` (its `Uid:` line
/// reads real, effective, saved, filesystem).
pub fn effective_uid(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}
