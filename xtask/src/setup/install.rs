//! From the missing prerequisites to the commands that install them, and
//! the setup run itself.

use super::{Host, Install, Prerequisite};
use std::io::Write;
use std::process::{Command, Stdio};

/// One install command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The program: a name found on the host's PATH, or a path.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Whether only root may run it (apt-get).
    pub root: bool,
}

impl Step {
    fn new(program: &str, args: &[&str], root: bool) -> Step {
        Step {
            program: program.to_owned(),
            args: args.iter().map(|a| a.to_string()).collect(),
            root,
        }
    }

    /// How a shell would spell it; with `sudo ` in front when it needs root
    /// and the user is not.
    fn shell(&self, as_root: bool) -> String {
        let mut words = Vec::new();
        if self.root && !as_root {
            words.push("sudo".to_owned());
        }
        words.push(quote(&self.program));
        words.extend(self.args.iter().map(|a| quote(a)));
        words.join(" ")
    }
}

/// The commands that install `missing`, in order: `apt-get update` once and
/// one `apt-get install` for every Debian package, one `rustup component
/// add`, then each venv. A [`Install::Manual`] one adds none.
pub fn plan(missing: &[Prerequisite], host: &Host) -> Vec<Step> {
    let mut apt = vec!["install", "-y"];
    let mut rustup = vec!["component", "add"];
    let mut venvs = Vec::new();
    for p in missing {
        match p.install {
            Install::Apt(package) => apt.push(package),
            Install::Rustup(component) => rustup.push(component),
            Install::Venv(venv) => {
                let dir = venv.dir(&host.home).to_string_lossy().into_owned();
                venvs.push(Step::new(
                    "python3",
                    &["-m", "venv", "--clear", &dir],
                    false,
                ));
                let pip = format!("{dir}/bin/pip");
                let mut args = vec!["install", "--disable-pip-version-check"];
                args.extend(venv.packages);
                venvs.push(Step::new(&pip, &args, false));
            }
            Install::Manual(_) => {}
        }
    }
    let mut steps = Vec::new();
    if apt.len() > 2 {
        steps.push(Step::new("apt-get", &["update"], true));
        steps.push(Step::new("apt-get", &apt, true));
    }
    if rustup.len() > 2 {
        steps.push(Step::new("rustup", &rustup, false));
    }
    steps.extend(venvs);
    steps
}

/// The one shell command that runs `steps`, as root or through sudo.
pub fn command_line(steps: &[Step], as_root: bool) -> String {
    let words: Vec<String> = steps.iter().map(|s| s.shell(as_root)).collect();
    words.join(" && ")
}

/// Checks every prerequisite on `host` and installs what is missing where
/// this user may; reports to `out`. True when all are there at the end.
pub fn run(host: &Host, table: &[Prerequisite], out: &mut dyn Write) -> bool {
    let missing = missing(host, table, out);
    if missing.is_empty() {
        report(out, &format!("all {} prerequisites are here", table.len()));
        return true;
    }
    let steps = plan(&missing, host);
    if steps.iter().any(|s| s.root) && !host.is_root() {
        let names: Vec<&str> = missing.iter().map(|p| p.name).collect();
        report(out, &format!("missing: {}", names.join(", ")));
        report(
            out,
            "not root, so nothing was installed; this installs what is missing:",
        );
        let _ = writeln!(out, "    {}", command_line(&steps, false));
        manual_notes(&missing, out);
        report(out, "then run `cargo xtask ci` again");
        return false;
    }
    for step in &steps {
        if !execute(step, host, out) {
            report(out, &format!("`{}` failed", step.shell(true)));
            manual_notes(&missing, out);
            return false;
        }
    }
    let still: Vec<&str> = missing
        .iter()
        .filter(|p| !p.check.passes(host))
        .map(|p| p.name)
        .collect();
    if still.is_empty() {
        report(out, &format!("installed {} prerequisite(s)", missing.len()));
        return true;
    }
    report(out, &format!("still missing: {}", still.join(", ")));
    manual_notes(&missing, out);
    false
}

/// The prerequisites whose check fails, each reported with why it is needed.
fn missing(host: &Host, table: &[Prerequisite], out: &mut dyn Write) -> Vec<Prerequisite> {
    let mut missing = Vec::new();
    for p in table {
        if p.check.passes(host) {
            report(out, &format!("{}: ok", p.name));
        } else {
            report(out, &format!("{}: missing; {}", p.name, p.why));
            missing.push(*p);
        }
    }
    missing
}

/// What the user must do by hand for the missing prerequisites setup cannot
/// install.
fn manual_notes(missing: &[Prerequisite], out: &mut dyn Write) {
    for p in missing {
        if let Install::Manual(what) = p.install {
            report(out, &format!("{}: {what}", p.name));
        }
    }
}

/// Runs one step with its output shown (apt's and pip's progress).
fn execute(step: &Step, host: &Host, out: &mut dyn Write) -> bool {
    let _ = writeln!(out, "==> {}", step.shell(true));
    let _ = out.flush();
    let program = host
        .find(&step.program)
        .unwrap_or_else(|| step.program.clone().into());
    Command::new(program)
        .args(&step.args)
        .env("PATH", host.path_var())
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn report(out: &mut dyn Write, line: &str) {
    let _ = writeln!(out, "setup: {line}");
}

/// A word as a POSIX shell reads it back.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:+,@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
