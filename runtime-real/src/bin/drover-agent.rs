//! The `drover-agent` node agent: joins the orchestrator's control plane with
//! a one-time token, heartbeats, and exits 0 when told to shut down.
//!
//! `drover-agent --join ADDR --node NODE [--token TOKEN] [--heartbeat-ms N]
//! [--pid-file PATH]`
//!
//! The token may instead come in the environment, as `DROVER_JOIN_TOKEN`
//! (`DROVER_JOIN_TOKEN='${JOIN_TOKEN}' nohup drover-agent ...` in a start
//! command): a process's arguments are readable by every user of the host
//! for as long as it runs, its environment only by its owner.
//!
//! With `--pid-file` the agent writes its pid there first (creating the
//! folder) and removes the file when it exits; a `static` host's destroy
//! finds the agent to stop by it.
//!
//! Exit codes: 0 shut down by the orchestrator, 1 could not start, 2 bad
//! arguments, 3 rejected, 4 orchestrator unreachable for too long. The token
//! is never printed, not even by `Debug`.

use clap::Parser;
use core_fsm::ids::{LeaseId, LogicalNodeId, RunId};
use runtime_real::transport::agent::{Agent, AgentConfig};
use runtime_real::transport::parse_addr;
use runtime_real::transport::wire::JoinToken;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// drover's node agent.
#[derive(Debug, Parser)]
#[command(name = "drover-agent", version, about = "drover's node agent")]
struct Args {
    /// The orchestrator's address: `<endpoint id>@<ip:port>[,<ip:port>...]`.
    #[arg(long, value_name = "ADDR")]
    join: String,
    /// The logical node this agent runs as.
    #[arg(long, value_name = "NODE")]
    node: String,
    /// The one-time join token (else from `DROVER_JOIN_TOKEN`, which keeps
    /// it out of the process list).
    #[arg(
        long,
        value_name = "TOKEN",
        env = TOKEN_ENV,
        hide_env_values = true,
        value_parser = parse_token
    )]
    token: JoinToken,
    /// The run id, checked against the token's binding when given.
    #[arg(long, value_name = "RUN", value_parser = parse_run)]
    run: Option<u64>,
    /// The lease id, checked against the token's binding when given.
    #[arg(long, value_name = "LEASE")]
    lease: Option<String>,
    /// Milliseconds between heartbeats.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    heartbeat_ms: u64,
    /// How long to keep redialling a lost orchestrator, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 300_000)]
    reconnect_ms: u64,
    /// Local socket to bind (default: loopback for a loopback orchestrator).
    #[arg(long, value_name = "IP:PORT")]
    bind: Option<std::net::SocketAddr>,
    /// Write the agent's pid here (removed at exit).
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
}

/// The environment variable a start command may pass the token in.
const TOKEN_ENV: &str = "DROVER_JOIN_TOKEN";

/// Writes our pid to `path`, creating its folder.
fn write_pid_file(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, format!("{}\n", std::process::id()))
}

/// Removes the pid file if it still names this process (a newer agent of
/// the same node may have taken it over).
fn remove_pid_file(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .is_ok_and(|text| text.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

fn parse_token(text: &str) -> Result<JoinToken, String> {
    if text.trim().is_empty() {
        return Err("the join token is empty".to_owned());
    }
    Ok(JoinToken::new(text.trim()))
}

/// `42` or `run-42` (the run id's display form).
fn parse_run(text: &str) -> Result<u64, String> {
    let digits = text.trim().strip_prefix("run-").unwrap_or(text.trim());
    digits
        .parse()
        .map_err(|_| format!("`{text}` is not a run id"))
}

fn main() {
    let args = Args::parse();
    let orchestrator = match parse_addr(&args.join) {
        Ok(addr) => addr,
        Err(err) => {
            runtime_real::stdout::err_line(&format!("drover-agent: {err:#}"));
            std::process::exit(2);
        }
    };
    // This thread runs the agent: it keeps to one processor, shared with
    // its worker's serving thread; the runtime's other threads do not.
    if let Err(err) = runtime_real::pipeline::pin::hold(&args.node) {
        runtime_real::stdout::err_line(&format!(
            "drover-agent: not kept to one processor ({err}); running on any"
        ));
    }
    let mut config = AgentConfig::new(orchestrator, LogicalNodeId::new(args.node), args.token);
    config.run = args.run.map(RunId);
    config.lease = args.lease.map(LeaseId::new);
    config.heartbeat = Duration::from_millis(args.heartbeat_ms);
    config.reconnect_for = Duration::from_millis(args.reconnect_ms);
    config.bind = args.bind;
    if let Some(path) = &args.pid_file
        && let Err(err) = write_pid_file(path)
    {
        runtime_real::stdout::err_line(&format!(
            "drover-agent: pid file {}: {err}",
            path.display()
        ));
        std::process::exit(1);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(runtime_real::pipeline::pin::release_current)
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            runtime_real::stdout::err_line(&format!(
                "drover-agent: cannot start the runtime: {err}"
            ));
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async move {
        match Agent::bind(config).await {
            Ok(agent) => agent.run().await.code(),
            Err(err) => {
                runtime_real::stdout::err_line(&format!("drover-agent: {err:#}"));
                1
            }
        }
    });
    if let Some(path) = &args.pid_file {
        remove_pid_file(path);
    }
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let args = Args::try_parse_from([
            "drover-agent",
            "--join",
            "x@127.0.0.1:1",
            "--node",
            "w-0",
            "--token",
            "supersecret",
        ])
        .unwrap();
        assert!(!format!("{args:?}").contains("supersecret"));
    }

    #[test]
    fn run_ids_in_either_form() {
        assert_eq!(parse_run("42"), Ok(42));
        assert_eq!(parse_run("run-42"), Ok(42));
        assert!(parse_run("run-x").is_err());
    }
}
