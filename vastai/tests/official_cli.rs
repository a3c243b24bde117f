//! The official Vast.ai CLI (`vastai` 1.9.1 from PyPI) against the fake, as
//! a new user would point it (`--url http://127.0.0.1:PORT`, the key in
//! `VAST_API_KEY`): search with a numeric and a boolean filter, create, show,
//! list, label, destroy. What the CLI sends, the fake takes.
//!
//! The CLI lives in a virtual environment under
//! `~/.cache/drover/vastai-cli-1.9.1/`, which `cargo xtask setup` makes
//! (`python3 -m venv`, `pip install vastai==1.9.1`).

mod common;

use common::KEY;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;
use vastai::fake::{FakeConfig, MemoryBackend};

const CLI_VERSION: &str = "1.9.1";
/// Bound on one CLI command.
const COMMAND_BOUND: Duration = Duration::from_secs(60);

/// `~/.cache/drover/`, where `cargo xtask setup` keeps its venvs.
fn cache_root() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/drover")
}

async fn run_bounded(command: &mut Command, bound: Duration, what: &str) -> Output {
    let child = command.kill_on_drop(true).output();
    match tokio::time::timeout(bound, child).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => panic!("{what}: cannot run: {e}"),
        Err(_) => panic!("{what}: no answer in {bound:?}"),
    }
}

fn shown(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The cached environment's interpreter. `cargo xtask setup` (the first
/// step of `cargo xtask ci`) is the one place that makes it; without it the
/// test fails naming that command.
async fn cli_python() -> PathBuf {
    let venv = cache_root().join(format!("vastai-cli-{CLI_VERSION}"));
    let python = venv.join("bin").join("python3");
    let mut check = Command::new(&python);
    check.args(["-c", "import vastai"]);
    let ok = python.exists()
        && run_bounded(&mut check, COMMAND_BOUND, "import vastai")
            .await
            .status
            .success();
    assert!(
        ok,
        "the official vastai CLI {CLI_VERSION} is not installed in {}: run `cargo xtask setup`",
        venv.display()
    );
    python
}

/// One `vastai ...` run against the fake, in a home of its own.
struct Cli {
    python: PathBuf,
    home: PathBuf,
    url: String,
}

impl Cli {
    async fn run(&self, args: &[&str]) -> Output {
        let mut command = Command::new(&self.python);
        command
            .arg("-c")
            .arg("import sys; from vastai.cli.main import main; sys.argv[0] = 'vastai'; main()")
            .args(["--url", &self.url])
            .args(args)
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env("VAST_API_KEY", KEY)
            // What the CLI reads at start (GPU names) comes from the fake too.
            .env("VAST_URL", &self.url)
            .env("VASTAI_NO_UPDATE_CHECK", "1")
            .stdin(std::process::Stdio::null());
        run_bounded(&mut command, COMMAND_BOUND, &format!("vastai {args:?}")).await
    }

    /// Runs with `--raw`; the command must succeed and print JSON.
    async fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--raw");
        let output = self.run(&args).await;
        assert!(
            output.status.success(),
            "vastai {args:?}: {}",
            shown(&output)
        );
        assert!(
            !shown(&output).contains(KEY),
            "the API key was printed: {args:?}"
        );
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("vastai {args:?}: not JSON ({e}): {}", shown(&output)))
    }
}

fn ids(offers: &Value) -> Vec<u64> {
    let mut ids: Vec<u64> = offers
        .as_array()
        .unwrap_or_else(|| panic!("a list: {offers}"))
        .iter()
        .map(|o| o["id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_cli_searches_creates_shows_lists_labels_and_destroys() {
    let python = cli_python().await;
    let backend = Arc::new(MemoryBackend::default());
    let fake = vastai::serve(
        "127.0.0.1:0".parse().unwrap(),
        FakeConfig::fast(KEY),
        backend.clone(),
    )
    .await
    .expect("fake binds");
    let home = std::env::temp_dir().join(format!("drover-vastai-cli-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let cli = Cli {
        python,
        home: home.clone(),
        url: fake.base_url(),
    };

    // A numeric filter: the CLI sends `{"num_gpus": {"gte": "1"}}`, strings.
    let found = cli
        .json(&[
            "search",
            "offers",
            "num_gpus>=1 gpu_ram>=24 reliability>0.99",
        ])
        .await;
    assert_eq!(
        ids(&found),
        vec![18_422_311, 18_422_314, 18_422_320, 18_422_330, 18_422_340],
        "{found}"
    );
    // A boolean filter, over the CLI's default `verified=true`.
    let unverified = cli
        .json(&["search", "offers", "verified=false num_gpus>=1"])
        .await;
    assert_eq!(ids(&unverified), vec![18_422_313], "{unverified}");
    // No query: the catalogue, minus the unverified offer.
    assert_eq!(ids(&cli.json(&["search", "offers"]).await).len(), 7);
    // A filter the fake cannot read is a 400 the CLI shows, not an empty list.
    let refused = cli.run(&["search", "offers", "num_gpus>=two"]).await;
    let text = shown(&refused);
    // (The CLI exits 0 after it, so the words are what say it.)
    assert!(
        text.contains("error 400") && text.contains("num_gpus") && text.contains("\"two\""),
        "{text}"
    );

    let created = cli
        .json(&[
            "create",
            "instance",
            "18422314",
            "--image",
            "ubuntu:22.04",
            "--disk",
            "20",
            "--label",
            "cli-test",
            "--ssh",
            "--direct",
            "--onstart-cmd",
            "echo hi",
            "--env",
            "-e A=B -p 8080:8080",
        ])
        .await;
    assert_eq!(created["success"], true, "{created}");
    let id = created["new_contract"].as_u64().expect("new_contract");
    let id_text = id.to_string();

    let shown_one = cli.json(&["show", "instance", &id_text]).await;
    assert_eq!(shown_one["id"].as_u64(), Some(id), "{shown_one}");
    assert_eq!(shown_one["label"], "cli-test", "{shown_one}");
    assert_eq!(shown_one["actual_status"], "running", "{shown_one}");
    assert_eq!(shown_one["extra_env"]["A"], "B", "{shown_one}");
    assert_eq!(shown_one["extra_env"]["-p 8080:8080"], "1", "{shown_one}");
    let log = backend.log();
    let started = &log.started;
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].onstart, "echo hi");
    assert_eq!(started[0].disk_gb, 20);

    let listed = cli.json(&["show", "instances"]).await;
    assert_eq!(ids(&listed), vec![id], "{listed}");

    let labelled = cli.run(&["label", "instance", &id_text, "renamed"]).await;
    assert!(labelled.status.success(), "{}", shown(&labelled));
    assert_eq!(fake.instances()[0].label, "renamed");
    let shown_again = cli.json(&["show", "instance", &id_text]).await;
    assert_eq!(shown_again["label"], "renamed", "{shown_again}");

    // `destroy instance` prints nothing with `--raw`; its words say it.
    let destroyed = cli.run(&["destroy", "instance", &id_text, "-y"]).await;
    let text = shown(&destroyed);
    assert!(destroyed.status.success(), "{text}");
    assert!(
        text.contains(&format!("destroying instance {id}")),
        "{text}"
    );
    assert!(fake.instances()[0].destroyed);
    let gone = cli.json(&["show", "instance", &id_text]).await;
    assert_eq!(gone, serde_json::json!({"instances": null}));
    assert_eq!(
        ids(&cli.json(&["show", "instances"]).await),
        Vec::<u64>::new()
    );

    fake.shutdown();
    std::fs::remove_dir_all(&home).unwrap();
}
