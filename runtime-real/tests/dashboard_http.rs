//! The dashboard over plain HTTP, against a real `drover up` of three
//! local nodes: the token, the SSE stream (ids increase, resume after
//! Last-Event-ID, a gap and a resync for an id it cannot resume), the full
//! log equal to `drover logs`, the cards turning Destroyed when the run
//! stops, then `drover dashboard` serving the stopped run read-only. Every
//! wait is on an event with a bound.

mod dashboard_support;
mod up_support;

use dashboard_support::*;
use std::collections::BTreeMap;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every node of the stream's state is at `stage`.
fn all_at(cards: &BTreeMap<String, String>, count: usize, stage: &str) -> bool {
    cards.len() == count && cards.values().all(|s| s == stage)
}

#[test]
fn the_dashboard_of_up_streams_the_fleet_resumes_and_serves_the_stopped_run() {
    let dir = scratch("dash-http");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(3));
    let mut up = Up::start(&state, &plan);
    let line = up.wait_line(SETTLE, |l| l["event"] == "dashboard");
    let (base, token) = split_url(line["url"].as_str().unwrap());
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let rt = runtime();
    rt.block_on(async {
        // The stream opens before the fleet moves: `up` prints the URL
        // before it starts the run.
        let mut sse = Sse::open(&base, &token, None).await;
        let http = http();
        // The token: stored 0600 in the state dir; required everywhere.
        let stored = std::fs::read_to_string(state.join("dashboard.token")).unwrap();
        assert_eq!(stored, token);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(state.join("dashboard.token"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        for path in ["/", "/events", "/api/state", "/api/logs/workers-0"] {
            let bare = http.get(format!("{base}{path}")).send().await.unwrap();
            assert_eq!(bare.status(), 401, "{path} without the token");
            let wrong = http
                .get(format!("{base}{path}?token={}", wrong_token(&token)))
                .send()
                .await
                .unwrap();
            assert_eq!(wrong.status(), 401, "{path} with a wrong token");
        }
        let foreign = http
            .get(format!("{base}/api/state?token={token}"))
            .header(
                "host",
                format!("evil.example:{}", base.rsplit(':').next().unwrap()),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(foreign.status(), 403, "a foreign Host");
        let cross = http
            .post(format!("{base}/api/prompt?token={token}"))
            .header("origin", "http://evil.example")
            .body(r#"{"text":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(cross.status(), 403, "a foreign Origin");
        let page = http
            .get(format!("{base}/?token={token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        let html = page.text().await.unwrap();
        assert!(html.contains("new EventSource") && !html.contains("/*SCRIPT*/"));

        // The stream: a snapshot first, then the fleet moving to ready.
        let mut cards = BTreeMap::new();
        let mut seen = sse
            .until(SETTLE, |e| {
                fold(&mut cards, e);
                all_at(&cards, 3, "Dormant")
            })
            .await;
        assert_eq!(seen[0].kind, "hello");
        assert_eq!(seen[1].kind, "snapshot");
        let epoch = seen[1].epoch().to_owned();
        for pair in seen[1..].windows(2) {
            assert_eq!(pair[1].epoch(), epoch);
            assert!(pair[1].seq() > pair[0].seq(), "ids increase: {pair:?}");
        }
        assert!(seen.iter().any(|e| e.kind == "node"), "the cards moved");
        // The counter reaches 3/3 (its event follows the tick's cards).
        let latest = seen
            .iter()
            .rev()
            .find(|e| e.kind == "groups" || e.kind == "snapshot")
            .unwrap();
        assert_eq!(latest.data["groups"][0]["desired"], 3, "{:?}", latest.data);
        if latest.data["groups"][0]["ready"] != 3 {
            let more = sse
                .until(SETTLE, |e| {
                    e.kind == "groups" && e.data["groups"][0]["ready"] == 3
                })
                .await;
            seen.extend(more);
        }

        // A resume after an id in the middle replays exactly what followed.
        let middle = seen.len() / 2;
        let resume_id = seen[middle].id.clone();
        let mut again = Sse::open(&base, &token, Some(&resume_id)).await;
        let hello = again.next(SETTLE).await.unwrap();
        assert_eq!(hello.kind, "hello");
        assert_eq!(hello.data["mode"], "replay", "{:?}", hello.data);
        let expected: Vec<_> = seen[middle + 1..]
            .iter()
            .filter(|e| e.seq() > seen[middle].seq())
            .map(|e| (e.id.clone(), e.kind.clone()))
            .collect();
        let mut replayed = Vec::new();
        while replayed.len() < expected.len() {
            let e = again.next(SETTLE).await.unwrap();
            replayed.push((e.id.clone(), e.kind.clone()));
        }
        assert_eq!(
            replayed, expected,
            "the resumed stream lost or added events"
        );

        // An id this server cannot resume from: a gap, then a snapshot.
        let mut stale = Sse::open(&base, &token, Some("00000000-7")).await;
        let kinds: Vec<String> = [
            stale.next(SETTLE).await.unwrap(),
            stale.next(SETTLE).await.unwrap(),
            stale.next(SETTLE).await.unwrap(),
        ]
        .iter()
        .map(|e| e.kind.clone())
        .collect();
        assert_eq!(kinds, ["hello", "gap", "snapshot"]);

        // The full log is `drover logs NODE`, line for line; so is the
        // stream's tail (snapshot tail, then log events).
        let logs = drover(&state, &["logs", "workers-0"]);
        assert!(logs.status.success());
        let expected = String::from_utf8(logs.stdout).unwrap();
        assert!(expected.lines().count() >= 2, "{expected}");
        let full = http
            .get(format!("{base}/api/logs/workers-0?token={token}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(full, expected);
        let state_now: serde_json::Value = http
            .get(format!("{base}/api/state?token={token}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let tail: Vec<&str> = state_now["logs"]["workers-0"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["line"].as_str().unwrap())
            .collect();
        // The agent's lines keep arriving after the handoff, and the page
        // reads them as they land: its tail is the start of what `drover
        // logs` prints now, at least the bootstrap lines.
        let now = drover(&state, &["logs", "workers-0"]);
        let now = String::from_utf8(now.stdout).unwrap();
        let lines: Vec<&str> = now.lines().collect();
        assert!(lines.len() < 200 && tail.len() >= 2, "{tail:?}");
        assert_eq!(tail[..], lines[..tail.len().min(lines.len())]);
        assert_eq!(state_now["read_only"], false);
        assert_eq!(state_now["up_running"], true);
        // Local nodes are free: the rate and the cost so far are $0.
        assert_eq!(state_now["fleet_usd_per_hour"], 0.0);
        assert_eq!(state_now["usd_accrued"], 0.0);

        // Stop the run: the open stream shows every card Destroyed, then
        // ends when `up` exits.
        up.type_stop();
        let mut cards = BTreeMap::new();
        seen = sse
            .until(EXIT, |e| {
                fold(&mut cards, e);
                all_at(&cards, 3, "Destroyed")
            })
            .await;
        assert!(seen.iter().all(|e| e.epoch() == epoch));
        while sse.next(EXIT).await.is_some() {}
        assert!(sse.ended);
    });
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));

    // The token is in no log and not in the datastream or the journal.
    let token = std::fs::read_to_string(state.join("dashboard.token")).unwrap();
    for entry in std::fs::read_dir(state.join("datastream"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read(entry.path()).unwrap();
        assert!(!contains(&text, token.as_bytes()), "{:?}", entry.path());
    }
    assert!(!contains(
        &std::fs::read(state.join("journal.bin")).unwrap(),
        token.as_bytes()
    ));

    // `drover dashboard` serves the stopped run read-only, same token.
    let mut served = Served::start(&state);
    let line = served.wait_line(SETTLE, |l| l["event"] == "dashboard");
    assert_eq!(line["read_only"], true);
    let (base, again_token) = split_url(line["url"].as_str().unwrap());
    assert_eq!(again_token, token);
    rt.block_on(async {
        let http = http();
        let doc: serde_json::Value = http
            .get(format!("{base}/api/state?token={token}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["read_only"], true);
        assert_eq!(doc["up_running"], false);
        let stages = stages(&doc);
        assert_eq!(stages.len(), 3, "{doc}");
        assert!(stages.iter().all(|(_, s)| s == "Destroyed"), "{stages:?}");
        let prompt = http
            .post(format!("{base}/api/prompt?token={token}"))
            .body(r#"{"text":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(prompt.status(), 409, "a stopped run takes no prompt");
        for control in ["/api/stop", "/api/nodes/workers-1/remove"] {
            let refused = http
                .post(format!("{base}{control}?token={token}"))
                .send()
                .await
                .unwrap();
            assert_eq!(
                refused.status(),
                409,
                "{control}: a stopped run takes no control"
            );
        }
        let logs = drover(&state, &["logs", "workers-1"]);
        let full = http
            .get(format!("{base}/api/logs/workers-1?token={token}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(full, String::from_utf8(logs.stdout).unwrap());
    });
    assert_eq!(served.terminate(EXIT), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A `drover --json dashboard` in the background.
struct Served {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Served {
    fn start(state: &std::path::Path) -> Served {
        use std::io::BufRead;
        let mut child = std::process::Command::new(DROVER)
            .arg("--state-dir")
            .arg(state)
            .args(["--json", "dashboard"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Served { child, lines }
    }

    fn wait_line(
        &mut self,
        bound: Duration,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = std::time::Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .expect("drover dashboard printed no URL");
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && want(&v)
            {
                return v;
            }
        }
    }

    /// SIGTERM, then its exit code (its stdout closing is the event).
    fn terminate(&mut self, bound: Duration) -> i32 {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let deadline = std::time::Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("drover dashboard did not exit: {e}"),
            }
        }
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
