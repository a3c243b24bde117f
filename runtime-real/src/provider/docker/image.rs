//! The node image: `FROM scratch`, built by the engine from a tar context
//! assembled here out of what this machine already has, so no base image is
//! pulled and no registry is needed:
//!
//! ```text
//! Dockerfile                      FROM scratch, COPY rootfs/ /, PATH, WORKDIR
//! rootfs/opt/drover/bin/drover    drover, drover-agent (and drover-worker
//!                                 when it is built), from next to `drover`
//! rootfs/lib/.../libc.so.6 ...    the shared libraries they link, at the
//!                                 paths the loader resolves (`ldd`)
//! rootfs/bin/busybox              a static busybox, `/bin/sh` and its
//!                                 applets as links to it
//! rootfs/node/, rootfs/tmp/       the node's folder, a scratch folder
//! ```
//!
//! The tag is the context's content hash (`drover-node:<16 hex>`): a tag the
//! engine already has is used as it is, and new binaries make a new tag.
//! The tar is deterministic (fixed times, owners, order), so equal inputs
//! hash equal.

use super::engine::Engine;
use crate::provider::error;
use core_fsm::port::{ProviderError, ProviderErrorKind::Rejected};
use futures_util::StreamExt;
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The image repository; the tag is the content hash.
pub const REPOSITORY: &str = "drover-node";
/// Where drover's binaries are inside the image.
pub const BIN_DIR: &str = "/opt/drover/bin";
/// The node's folder inside the image (commands run there).
pub const NODE_DIR: &str = "/node";
/// The binaries that must be next to `drover`.
const REQUIRED: &[&str] = &["drover", "drover-agent"];
/// Binaries taken when they are built (the workers crate's).
const OPTIONAL: &[&str] = &["drover-worker"];
/// Where a static busybox is looked for (Debian's `busybox-static`).
const BUSYBOX: &[&str] = &["/bin/busybox", "/usr/bin/busybox"];

const DOCKERFILE: &str =
    "FROM scratch\nCOPY rootfs/ /\nENV PATH=/opt/drover/bin:/bin\nWORKDIR /node\n";

/// One entry of the image's root file system.
enum Entry {
    Dir,
    File { source: PathBuf, mode: u32 },
    Link { target: String },
    Text { text: &'static str, mode: u32 },
}

/// `nohup` for a busybox built without it (Debian's `busybox-static`):
/// start commands background the agent with it.
const NOHUP: &str =
    "#!/bin/sh\n# nohup: run a command immune to hangups.\ntrap '' HUP\nexec \"$@\"\n";

/// The build context, before it is packed.
pub struct Context {
    /// Image path (absolute) to entry; a BTreeMap, so the order is fixed.
    entries: BTreeMap<String, Entry>,
}

/// A packed context: the tar bytes and the tag of the context.
pub struct Packed {
    /// The tar stream the engine builds from.
    pub tar: Vec<u8>,
    /// `drover-node:<hash>`.
    pub tag: String,
}

/// Reads a file of the context.
fn read(source: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(source).map_err(|e| format!("docker image: reading {}: {e}", source.display()))
}

impl Context {
    /// The context for the binaries in `bin_dir` (the folder of `drover`).
    pub fn for_binaries(bin_dir: &Path) -> Result<Context, String> {
        let mut context = Context {
            entries: BTreeMap::new(),
        };
        for dir in ["/bin", "/opt", "/opt/drover", BIN_DIR, NODE_DIR, "/tmp"] {
            context.entries.insert(dir.to_owned(), Entry::Dir);
        }
        let mut binaries = Vec::new();
        for name in REQUIRED.iter().chain(OPTIONAL) {
            let path = bin_dir.join(name);
            if path.is_file() {
                binaries.push(path);
            } else if REQUIRED.contains(name) {
                return Err(format!(
                    "docker image: {} is missing (build it: cargo build -p runtime-real)",
                    path.display()
                ));
            }
        }
        for binary in &binaries {
            let name = binary.file_name().unwrap_or_default().to_string_lossy();
            context.file(&format!("{BIN_DIR}/{name}"), binary, 0o755);
            for library in linked_libraries(binary)? {
                let at = library.display().to_string();
                context.file(&at, &library, 0o755);
            }
        }
        context.busybox()?;
        Ok(context)
    }

    fn file(&mut self, at: &str, source: &Path, mode: u32) {
        let mut parent = Path::new(at).parent();
        while let Some(dir) = parent.filter(|p| *p != Path::new("/")) {
            self.entries
                .entry(dir.display().to_string())
                .or_insert(Entry::Dir);
            parent = dir.parent();
        }
        let source = source.to_owned();
        self.entries
            .insert(at.to_owned(), Entry::File { source, mode });
    }

    /// A static busybox as `/bin/busybox`, with `/bin/sh` and every applet
    /// it lists as a link to it.
    fn busybox(&mut self) -> Result<(), String> {
        let Some(busybox) = BUSYBOX.iter().map(Path::new).find(|p| p.is_file()) else {
            return Err(format!(
                "docker image: no static busybox at {} (Debian: apt-get install busybox-static)",
                BUSYBOX.join(" or ")
            ));
        };
        if !linked_libraries(busybox)?.is_empty() {
            return Err(format!(
                "docker image: {} is not statically linked (Debian: apt-get install busybox-static)",
                busybox.display()
            ));
        }
        self.file("/bin/busybox", busybox, 0o755);
        let listed = std::process::Command::new(busybox)
            .arg("--list")
            .output()
            .map_err(|e| format!("docker image: {} --list: {e}", busybox.display()))?;
        let applets = String::from_utf8_lossy(&listed.stdout).into_owned();
        for applet in applets.lines().map(str::trim).chain(["sh"]) {
            let plain = !applet.is_empty() && !applet.contains('/') && applet != "busybox";
            if plain {
                let target = "busybox".to_owned();
                self.entries
                    .insert(format!("/bin/{applet}"), Entry::Link { target });
            }
        }
        let nohup = Entry::Text {
            text: NOHUP,
            mode: 0o755,
        };
        self.entries.entry("/bin/nohup".to_owned()).or_insert(nohup);
        Ok(())
    }

    /// The context's tag: a SHA-256 of the Dockerfile and of every entry's
    /// path, kind, mode and bytes, in order (the tar is not built for it:
    /// an image the engine has needs none).
    pub fn tag(&self) -> Result<String, String> {
        let mut hash = sha2::Sha256::new();
        hash.update(DOCKERFILE.as_bytes());
        for (at, entry) in &self.entries {
            hash.update([0u8]);
            hash.update(at.as_bytes());
            match entry {
                Entry::Dir => hash.update(b"\0dir"),
                Entry::Text { text, mode } => {
                    hash.update(format!("\0text\0{mode:o}\0").as_bytes());
                    hash.update(text.as_bytes());
                }
                Entry::Link { target } => {
                    hash.update(b"\0link\0");
                    hash.update(target.as_bytes());
                }
                Entry::File { source, mode } => {
                    let data = read(source)?;
                    hash.update(format!("\0file\0{mode:o}\0{}\0", data.len()).as_bytes());
                    hash.update(&data);
                }
            }
        }
        let digest = hash.finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Ok(format!("{REPOSITORY}:{hex}"))
    }

    /// Packs the context into a tar (fixed times and owners) for `tag`.
    pub fn pack(&self, tag: String) -> Result<Packed, String> {
        let mut builder = tar::Builder::new(Vec::new());
        let append = |builder: &mut tar::Builder<Vec<u8>>, path: &str, kind, mode, data: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_mode(mode);
            header.set_mtime(0);
            header.set_uid(0);
            header.set_gid(0);
            header.set_size(data.len() as u64);
            builder.append_data(&mut header, path, data)
        };
        let io = |e: std::io::Error| format!("docker image: packing the build context: {e}");
        append(
            &mut builder,
            "Dockerfile",
            tar::EntryType::Regular,
            0o644,
            DOCKERFILE.as_bytes(),
        )
        .map_err(io)?;
        for (at, entry) in &self.entries {
            let path = format!("rootfs{at}");
            match entry {
                Entry::Dir => append(&mut builder, &path, tar::EntryType::Directory, 0o755, &[]),
                Entry::Text { text, mode } => append(
                    &mut builder,
                    &path,
                    tar::EntryType::Regular,
                    *mode,
                    text.as_bytes(),
                ),
                Entry::File { source, mode } => {
                    let data = read(source)?;
                    append(&mut builder, &path, tar::EntryType::Regular, *mode, &data)
                }
                Entry::Link { target } => {
                    let mut header = tar::Header::new_gnu();
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(0o777);
                    header.set_mtime(0);
                    header.set_size(0);
                    builder.append_link(&mut header, &path, target)
                }
            }
            .map_err(io)?;
        }
        let tar = builder.into_inner().map_err(io)?;
        Ok(Packed { tar, tag })
    }
}

/// The shared libraries `binary` links, as the loader resolves them (`ldd`,
/// which runs the ELF interpreter's `--list`), the interpreter included;
/// none for a static binary.
pub fn linked_libraries(binary: &Path) -> Result<Vec<PathBuf>, String> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| format!("docker image: running ldd on {}: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    if text.contains("not a dynamic executable") || errors.contains("not a dynamic executable") {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        return Err(format!(
            "docker image: ldd {} failed: {}",
            binary.display(),
            errors.trim()
        ));
    }
    let mut libraries = Vec::new();
    for line in text.lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or
        // `/lib64/ld-linux-x86-64.so.2 (0x...)`; the vDSO has no file.
        let resolved = line.split("=>").nth(1).unwrap_or(line).trim();
        if resolved.starts_with("not found") {
            return Err(format!(
                "docker image: {} links a library the loader cannot find: {}",
                binary.display(),
                line.trim()
            ));
        }
        let path = resolved.split_whitespace().next().unwrap_or("");
        if path.starts_with('/') {
            libraries.push(PathBuf::from(path));
        }
    }
    Ok(libraries)
}

/// Builds the image of `bin_dir`'s binaries unless the engine has its tag;
/// returns the tag. A failed build names the step that failed.
pub async fn ensure(engine: &Engine, bin_dir: &Path) -> Result<String, ProviderError> {
    // Reading and hashing the binaries (tens of MB), then packing them,
    // would hold `drover`'s one thread for a fraction of a second.
    let bin_dir = bin_dir.to_owned();
    let (context, tag) = blocking(move || {
        let context = Context::for_binaries(&bin_dir)?;
        let tag = context.tag()?;
        Ok((context, tag))
    })
    .await?;
    let docker = engine.client().await?;
    match docker.inspect_image(&tag).await {
        Ok(_) => return Ok(tag),
        Err(e) if super::engine::status_of(&e) == Some(404) => {}
        Err(e) => return Err(engine.failed("inspecting the node image", &e, Rejected)),
    }
    let packed = blocking(move || context.pack(tag)).await?;
    build(engine, packed).await
}

/// `work` on the blocking pool; its error, or its loss, is a rejection.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, ProviderError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|e| error(Rejected, e)),
        Err(e) => Err(error(Rejected, format!("preparing the node image: {e}"))),
    }
}

/// Builds `packed` as its tag (the classic builder: no BuildKit session).
pub async fn build(engine: &Engine, packed: Packed) -> Result<String, ProviderError> {
    let docker = engine.client().await?;
    let options = bollard::query_parameters::BuildImageOptions {
        dockerfile: "Dockerfile".to_owned(),
        t: Some(packed.tag.clone()),
        rm: true,
        forcerm: true,
        ..Default::default()
    };
    let body = bollard::body_full(packed.tar.into());
    let mut progress = docker.build_image(options, None, Some(body));
    let mut step = String::from("sending the build context");
    while let Some(item) = progress.next().await {
        let info = item.map_err(|e| {
            engine.failed(
                &format!("building {} at `{step}`", packed.tag),
                &e,
                Rejected,
            )
        })?;
        if let Some(line) = info.stream.as_deref().map(str::trim)
            && line.starts_with("Step ")
        {
            step = line.to_owned();
        }
        if let Some(detail) = info.error_detail {
            let message = detail.message.unwrap_or_default();
            return Err(error(
                Rejected,
                format!(
                    "docker ({}): building {} failed at `{step}`: {message}",
                    engine.socket(),
                    packed.tag
                ),
            ));
        }
    }
    Ok(packed.tag)
}
