//! The `drover` command line: arguments (clap derive) and the commands that
//! only read the state dir (`plan`, `status`, `logs`) or clean it up
//! (`down`). `up` lives in [`crate::up`].

mod down;
pub mod fake_vast;
mod ledger;
mod logs;

pub use ledger::{Ledger, NodeRow};

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

use crate::exit::{EXIT_CONFIG, EXIT_FAILURE, EXIT_OK};

/// drover: rent machines, bootstrap them over SSH, hand them to their agents,
/// tear down exactly what it created.
#[derive(Debug, Parser)]
#[command(name = "drover", version)]
pub struct Cli {
    /// The state dir: journal, datastream, keys, local nodes.
    #[arg(long, global = true, default_value = ".drover")]
    pub state_dir: PathBuf,
    /// Machine-readable output (one JSON document or NDJSON lines).
    #[arg(long, global = true)]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring a plan up, in the foreground, until stopped (Ctrl-C, `stop` on
    /// stdin, SIGTERM or `drover down`); then tear everything down.
    Up {
        /// The plan file (TOML).
        plan: PathBuf,
        /// Also write every datastream line, as one JSON record each, to
        /// PATH (appended; its folders created). Overrides the plan's
        /// `[observability] frame_log`.
        #[arg(long, value_name = "PATH")]
        frame_log: Option<PathBuf>,
        /// Serve the dashboard at this loopback `ip:port` (over the plan's
        /// `[dashboard] addr`; default: a free port on 127.0.0.1).
        #[arg(long, value_name = "ADDR", value_parser = crate::plan_toml::dashboard::parse_loopback)]
        dashboard: Option<std::net::SocketAddr>,
        /// Serve no dashboard.
        #[arg(long, conflicts_with = "dashboard")]
        no_dashboard: bool,
    },
    /// Dry run: what `up` would create.
    Plan {
        /// The plan file (TOML).
        plan: PathBuf,
    },
    /// The ledger, rebuilt from the journal.
    Status,
    /// A node's log lines from the datastream (bootstrap, agent, worker),
    /// or with `--run` the orchestrator's own (lifecycle, membership, stage).
    Logs {
        /// The logical node, e.g. `workers-0`.
        node: Option<String>,
        /// The orchestrator's own channels instead of a node's.
        #[arg(long)]
        run: bool,
        /// Only lines of this channel (e.g. `agent.stderr`, `worker.stderr`).
        #[arg(long, value_name = "C")]
        channel: Option<String>,
        /// Keep printing lines as they arrive.
        #[arg(long)]
        follow: bool,
        /// Only lines numbered above SEQ (the `#seq` a line shows; per
        /// stream), e.g. to continue after what was already read.
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
    },
    /// Serve the dashboard, read-only, for the run in the state dir (one
    /// that stopped, from its journal and datastream), until Ctrl-C.
    Dashboard {
        /// Where to listen, a loopback `ip:port` (default: a free port).
        #[arg(long, value_parser = crate::plan_toml::dashboard::parse_loopback)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Destroy every lease the journal knows, whether or not `up` runs.
    Down,
    /// Complete TEXT on the running pipeline, streamed to stdout (`--json`:
    /// the service's lines as they come). Exit 1 when the prompt failed.
    Prompt {
        /// The prompt.
        text: String,
        /// The most tokens to generate (default: the plan's `[prompt]
        /// default_max_tokens`, 64 unless set; 0 there: no cap but the
        /// context).
        #[arg(long)]
        max_tokens: Option<u32>,
    },
    /// Chat with the running pipeline: each line of stdin is a prompt, its
    /// answer streamed to stdout; Ctrl-D ends it.
    Chat {
        /// The most tokens to generate per answer (default: the plan's
        /// `[prompt] default_max_tokens`, 64 unless set).
        #[arg(long)]
        max_tokens: Option<u32>,
    },
    /// A fake Vast.ai server (the real API's paths and quirks) whose
    /// instances are local SSH nodes; needs `$VAST_API_KEY` (the one key it
    /// accepts). Runs until SIGINT or SIGTERM, then destroys its nodes.
    FakeVast {
        /// Where to listen, e.g. `127.0.0.1:18080` (port 0: any free port).
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// `fast`: instant lifecycles, no rate limits; `realistic`: Vast.ai's
        /// timings and documented rate limits.
        #[arg(long, value_enum, default_value = "fast")]
        profile: fake_vast::Profile,
        /// The environment variable holding the key the fake accepts.
        #[arg(long, default_value = "VAST_API_KEY")]
        api_key_env: String,
        /// The fake's own folder (its nodes); default `<state dir>/fake-vast`.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// The process that plays a rented machine for the local provider.
    #[command(hide = true)]
    LocalNode {
        /// The node's folder.
        #[arg(long)]
        dir: PathBuf,
        /// The public key allowed in.
        #[arg(long)]
        authorized_key: PathBuf,
        /// Where to write the listening port.
        #[arg(long)]
        port_file: PathBuf,
        /// The address to listen on (a container's node: `0.0.0.0:22`).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
    },
}

/// Runs a parsed command line; returns the process exit code.
///
/// On one thread, as the agent: a token's way through `up` (the token-out
/// edge, the run's machine, the prompt's connection, the token-in edge) is
/// a chain of tasks, and on a multi-threaded runtime each hand-off could
/// wake another thread on another CPU (about five sleeps a token). On a
/// 2-vCPU VM whose idle vCPUs halt, one thread served TinyStories 260K on
/// one stage at 440-490 µs a token instead of 585-610. Nothing `drover`
/// does between two awaits is long: hashing and file scans run before the
/// loop starts or in `spawn_blocking`, and a journal append's fsync is at
/// a lease's change, never per token.
pub fn main(cli: Cli) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            crate::stdout::eline!("drover: cannot start the async runtime: {e}");
            return EXIT_FAILURE;
        }
    };
    let state_dir = cli.state_dir.clone();
    let json = cli.json;
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Up {
                plan,
                frame_log,
                dashboard,
                no_dashboard,
            } => {
                let options = crate::dashboard::Options {
                    addr: dashboard,
                    disabled: no_dashboard,
                };
                crate::up::run(&state_dir, &plan, frame_log.as_deref(), json, options).await
            }
            Command::Dashboard { listen } => {
                crate::dashboard::command(&state_dir, listen, json).await
            }
            Command::Plan { plan } => plan_command(&plan, &state_dir, json).await,
            Command::Status => status_command(&state_dir, json),
            Command::Logs {
                node,
                run,
                channel,
                follow,
                since,
            } => {
                let query = logs::Query {
                    node,
                    run,
                    channel,
                    follow,
                    since,
                };
                logs::run(&state_dir, &query, json).await
            }
            Command::Down => down::run(&state_dir, json).await,
            Command::Prompt { text, max_tokens } => {
                crate::prompt::commands::prompt(&state_dir, &text, max_tokens, json).await
            }
            Command::Chat { max_tokens } => {
                crate::prompt::commands::chat(&state_dir, max_tokens, json).await
            }
            Command::FakeVast {
                listen,
                profile,
                api_key_env,
                dir,
            } => {
                let args = fake_vast::Args {
                    listen,
                    profile,
                    api_key_env,
                    dir,
                };
                fake_vast::run(&state_dir, args, json).await
            }
            Command::LocalNode {
                dir,
                authorized_key,
                port_file,
                listen,
            } => {
                let args = crate::provider::local::node::NodeArgs {
                    dir,
                    authorized_key,
                    port_file,
                    listen,
                };
                match crate::provider::local::node::serve(args).await {
                    Ok(()) => EXIT_OK,
                    Err(e) => {
                        crate::stdout::eline!("drover local-node: {e:#}");
                        EXIT_FAILURE
                    }
                }
            }
        }
    });
    // A task may still block on stdin (the stop reader); it must not keep
    // the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

async fn plan_command(path: &Path, state_dir: &Path, json: bool) -> i32 {
    let (plan, pipeline) = match crate::plan_toml::load_full(path) {
        Ok(loaded) => loaded,
        Err(e) => {
            crate::stdout::eline!("drover: {e}");
            return EXIT_CONFIG;
        }
    };
    let pipeline = match pipeline {
        None => None,
        // `plan` fetches nothing: a model by url not fetched yet has no
        // stage table.
        Some(spec) => match crate::pipeline::model_file(&spec, state_dir, false).await {
            // Said beside the plan (on stderr under `--json`, whose stdout
            // is one JSON document).
            Err(e) if json => {
                crate::stdout::eline!("drover: {e}");
                None
            }
            Err(e) => {
                crate::stdout::say(&e.to_string());
                None
            }
            Ok(model) => match crate::pipeline::prepare(&plan, spec, &model) {
                Ok(prepared) => Some(prepared),
                Err(e) => {
                    crate::stdout::eline!("drover: {}: {e}", path.display());
                    return EXIT_CONFIG;
                }
            },
        },
    };
    if let Err(e) = crate::provider::check_plan(&plan).await {
        crate::stdout::eline!("drover: {e}");
        return EXIT_CONFIG;
    }
    // Vast.ai groups: the offers `up` would rent now and the worst case.
    let vast = match crate::provider::vastai::plan::offers(&plan).await {
        Ok(vast) => vast,
        Err(e) => {
            crate::stdout::eline!("drover: {e}");
            return EXIT_FAILURE;
        }
    };
    // Static groups: the machine each node would reserve.
    let machines = match crate::provider::static_hosts::hosts::of_plan(&plan) {
        Ok(machines) => machines,
        Err(e) => {
            crate::stdout::eline!("drover: {e}");
            return EXIT_CONFIG;
        }
    };
    let nodes = core_fsm::plan::expand(&plan);
    if json {
        let rows: Vec<_> = nodes
            .iter()
            .map(|n| {
                let mut row = serde_json::json!({
                    "id": n.node_id, "group": n.group_id, "role": n.role,
                    "provider": n.provider, "image": n.shape.image,
                    "verify_commands": n.boot.verify_commands.len(),
                });
                if let Some(machine) = machines.get(&n.node_id) {
                    row["machine"] = machine.to_string().into();
                    row["key_file"] = machine.key_file.as_str().into();
                }
                row
            })
            .collect();
        let mut doc = serde_json::json!({ "run_id": plan.run_id.0, "nodes": rows, "would_create": nodes.len() });
        if let Some(vast) = &vast {
            doc["vastai"] = crate::provider::vastai::plan::to_json(vast);
        }
        if let Some(pipeline) = &pipeline {
            doc["pipeline"] = pipeline.to_json();
        }
        crate::stdout::say(&doc.to_string());
    } else {
        crate::stdout::say(&format!(
            "run {}: {} logical node(s); `drover up` would create one lease each",
            plan.run_id,
            nodes.len()
        ));
        crate::stdout::say(&format!(
            "{:<24} {:<10} {:<8} {:<24} verify",
            "node", "role", "provider", "image"
        ));
        for n in &nodes {
            let provider = serde_json::to_value(n.provider).unwrap_or_default();
            let provider = provider.as_str().unwrap_or("?");
            crate::stdout::say(&format!(
                "{:<24} {:<10} {:<8} {:<24} {}",
                n.node_id,
                n.role,
                provider,
                n.shape.image,
                n.boot.verify_commands.len()
            ));
        }
        if !machines.is_empty() {
            crate::stdout::say("static machines (reserved for the run, not rented):");
            for n in &nodes {
                if let Some(machine) = machines.get(&n.node_id) {
                    let node = &n.node_id;
                    crate::stdout::say(&format!(
                        "  {node:<22} {machine}  key {}",
                        machine.key_file
                    ));
                }
            }
        }
        if let Some(vast) = &vast {
            let _ = crate::stdout::text(&crate::provider::vastai::plan::render(vast));
        }
        if let Some(pipeline) = &pipeline {
            let _ = crate::stdout::text(&pipeline.table());
        }
    }
    EXIT_OK
}

fn status_command(state_dir: &Path, json: bool) -> i32 {
    match Ledger::from_state_dir(state_dir) {
        Ok(ledger) => {
            if json {
                crate::stdout::say(&ledger.to_json().to_string());
            } else {
                let _ = crate::stdout::text(&ledger.table());
                if let Some(tail) = &ledger.tail_note {
                    crate::stdout::eline!("drover: journal: {tail}");
                }
            }
            EXIT_OK
        }
        Err(e) => {
            crate::stdout::eline!("drover: {e}");
            EXIT_FAILURE
        }
    }
}
