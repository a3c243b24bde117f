//! `drover up`'s own stdout and stderr lines are in the datastream
//! (channels `orchestrator.stdout`, `orchestrator.stderr`, shown by
//! `drover logs --run`), the dashboard's token masked there: a real `up` of
//! two local nodes, one whose verify command fails. Every wait is on a line
//! or an exit, bounded.

mod up_support;

use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(60);
const EXIT: Duration = Duration::from_secs(60);

/// `drover --json logs --run --channel CHANNEL`, parsed.
fn run_lines(state: &Path, channel: &str) -> Vec<Value> {
    logs_json(state, &["--run", "--channel", channel])
}

fn texts(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["line"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn what_up_prints_is_in_the_datastream_with_the_dashboard_token_masked() {
    let dir = scratch("ds-up-lines");
    let state = dir.join("state");
    let mut plan = local_plan(2);
    let mut failing = plan.groups[0].clone();
    failing.group_id = "broken".into();
    failing.count = 1;
    failing.boot.verify_commands = vec!["echo checking; exit 3".into()];
    plan.groups[0].count = 1;
    plan.groups.push(failing);
    let plan = write_plan(&dir, &plan);
    let mut up = Up::start(&state, &plan);
    let dashboard = up.wait_line(SETTLE, |l| l["event"] == "dashboard");
    let url = dashboard["url"].as_str().unwrap().to_owned();
    let token = url.split("token=").nth(1).unwrap().to_owned();
    assert!(token.len() >= 32, "{url}");
    up.wait_line(SETTLE, |l| l["event"] == "settled");
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));

    // Every stdout line `up` printed is there, in order, as printed, but
    // for the token.
    let stdout = texts(&run_lines(&state, "orchestrator.stdout"));
    let printed: Vec<String> = up
        .seen
        .iter()
        .map(|l| l.replace(&token, "<masked>"))
        .collect();
    assert_eq!(stdout, printed);
    assert!(
        stdout.iter().any(|l| l.contains("\"event\":\"settled\"")),
        "{stdout:#?}"
    );
    assert!(
        stdout.iter().any(|l| l.contains("?token=<masked>")),
        "{stdout:#?}"
    );
    // Its stderr: the failed node, named with its reason.
    let stderr = run_lines(&state, "orchestrator.stderr");
    assert!(
        stderr
            .iter()
            .all(|l| l["stream"] == "stderr" && l["node"] == "orchestrator"),
        "{stderr:#?}"
    );
    let stderr = texts(&stderr);
    assert!(
        stderr
            .iter()
            .any(|l| l.starts_with("drover: broken-0 failed: ")),
        "{stderr:#?}"
    );
    // The token is nowhere in the state dir but its own 0600 file (which
    // `drover dashboard` reads).
    for entry in walk(&state) {
        if entry.file_name().is_some_and(|n| n == "dashboard.token") {
            continue;
        }
        let bytes = std::fs::read(&entry).unwrap();
        let found = bytes.windows(token.len()).any(|w| w == token.as_bytes());
        assert!(!found, "the dashboard token is in {}", entry.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
