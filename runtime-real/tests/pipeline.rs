//! The pipeline end to end: `drover up` on local nodes (real processes,
//! real SSH, real iroh), the real model `stories260k.gguf` split across
//! them, prompts through `drover prompt`, compared with `drover-worker
//! generate` on the whole model in one process. Every wait is on an event
//! (a line, an exit) with a bound.

mod up_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use up_support::*;

const SERVE: Duration = Duration::from_secs(120);
const EXIT: Duration = Duration::from_secs(90);
const PROMPT: &str = "Once upon a time";
/// A prompt of some 200 tokens: seven chunks.
const LONG: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog. \
    One day, she saw a big red ball under a tree. She ran to the ball and kicked it high into the sky. \
    The dog barked and ran after it. Lily laughed and clapped her hands. Then the sun went down and it was time to go home. \
    Her mom made soup for dinner. Lily ate it all and said thank you. After dinner, she went to bed and dreamed of the ball. \
    The next day";

/// The trained model the project reads from `../shared/models/`.
fn model() -> PathBuf {
    stories()
}

/// `drover-worker`, built beside `drover` (`cargo build -p workers`).
fn worker() -> PathBuf {
    let path = Path::new(DROVER).with_file_name("drover-worker");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p workers`",
        path.display()
    );
    path
}

/// A plan of `nodes` local nodes serving the model, `extra` lines added to
/// `[pipeline]`.
fn pipeline_plan(dir: &Path, nodes: u32, extra: &str) -> PathBuf {
    let path = dir.join("plan.toml");
    std::fs::write(&path, pipeline_plan_text(nodes, "true", extra)).unwrap();
    path
}

fn is_serving(line: &serde_json::Value) -> bool {
    line["event"] == "serving"
}

/// What `drover-worker generate` says on the whole model.
fn reference(max_tokens: u32) -> String {
    reference_of(PROMPT, max_tokens)
}

/// What `drover-worker generate` says of `prompt` on the whole model.
fn reference_of(prompt: &str, max_tokens: u32) -> String {
    generated(prompt, max_tokens)
}

/// `drover prompt TEXT --max-tokens N`: (exit code, stdout).
fn prompt(state: &Path, text: &str, max_tokens: u32) -> (i32, String) {
    let out = drover(
        state,
        &["prompt", text, "--max-tokens", &max_tokens.to_string()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

/// Bytes each stage fetched, by layer range, from `up`'s `weights` events.
fn fetched(up: &mut Up, stages: usize) -> Vec<(String, u64, bool)> {
    let mut out: Vec<(String, u64, bool)> = (0..stages)
        .map(|_| {
            let line = up.wait_line(SERVE, |l| l["event"] == "weights");
            let range = line["layers"].as_str().unwrap().to_owned();
            (
                range,
                line["bytes_fetched"].as_u64().unwrap(),
                line["refetched"] == true,
            )
        })
        .collect();
    out.sort();
    out
}

/// Up, one prompt compared with the reference, stop: exit 0.
fn serves_like_one_process(name: &str, nodes: u32, extra: &str) {
    serves_like_one_process_then(name, nodes, extra, |_| {});
}

/// As [`serves_like_one_process`], `check` run on the state dir while the
/// pipeline still serves.
fn serves_like_one_process_then(name: &str, nodes: u32, extra: &str, check: impl Fn(&Path)) {
    let dir = scratch(name);
    let state = dir.join("state");
    let plan = pipeline_plan(&dir, nodes, extra);
    let mut up = Up::start(&state, &plan);
    let serving = up.wait_line(SERVE, is_serving);
    assert_eq!(serving["stages"], nodes, "{serving}");
    let (code, text) = prompt(&state, PROMPT, 64);
    assert_eq!(code, 0);
    // Both end the text with one newline.
    assert_eq!(text, reference(64), "{nodes} stages, {extra}");
    // A long prompt travels in chunks, several in flight: the same text.
    let (code, text) = prompt(&state, LONG, 32);
    assert_eq!(
        (code, text),
        (0, reference_of(LONG, 32)),
        "{nodes} stages, long"
    );
    check(&state);
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn one_stage_serves_the_same_text_as_one_process() {
    serves_like_one_process("pipe1", 1, "");
}

#[test]
fn two_stages_of_one_thread_each_serve_the_same_text() {
    serves_like_one_process_then("pipe2", 2, "threads = 1", |state| {
        // Each worker says, as it loads, the threads the plan gave it.
        for node in ["workers-0", "workers-1"] {
            let lines = logs_json(state, &[node, "--channel", "worker.stderr"]);
            let ready = lines
                .iter()
                .filter_map(|l| l["line"].as_str())
                .find(|l| l.contains(" ready: "));
            assert!(
                ready.is_some_and(|l| l.ends_with(", 1 thread(s)")),
                "{node}: {lines:#?}"
            );
        }
        agents_share_a_processor_with_their_serving_threads(state, 2);
    });
}

#[test]
fn five_stages_and_an_uneven_split_serve_the_same_text() {
    // Five stages also cut prompts into chunks of at most 4 tokens: the
    // long prompt travels in some 50, far more than a stage reads ahead
    // of what it computes (8), and the text is still the same.
    serves_like_one_process_then("pipe5", 5, "prefill_chunk = 4", |state| {
        let cuts = dispatched_chunks(state);
        assert_eq!(cuts.len(), 2, "{cuts:?}");
        for &(tokens, chunks) in &cuts {
            assert_eq!(chunks, tokens.div_ceil(4), "{cuts:?}");
        }
        assert!(cuts[1].1 > 40, "{cuts:?}");
    });
    serves_like_one_process("pipe131", 3, "split = [1, 3, 1]");
}

/// Each dispatched request's (prompt tokens, chunks), in order, from the
/// run's `prompt` channel.
fn dispatched_chunks(state: &Path) -> Vec<(u64, u64)> {
    logs_json(state, &["--run", "--channel", "prompt"])
        .iter()
        .filter_map(|l| l["line"].as_str())
        .filter_map(|l| {
            let (_, rest) = l.split_once(" dispatched: ")?;
            let (tokens, rest) = rest.split_once(" prompt tokens into stage 0, in ")?;
            let chunks = rest.strip_suffix(" chunk(s)")?;
            Some((tokens.parse().unwrap(), chunks.parse().unwrap()))
        })
        .collect()
}

#[test]
fn three_stages_fetch_only_their_slices_reuse_the_cache_and_refetch_a_corrupt_one() {
    let dir = scratch("pipe3");
    let state = dir.join("state");
    let plan = pipeline_plan(&dir, 3, "");
    let mut up = Up::start(&state, &plan);
    let first = fetched(&mut up, 3);
    up.wait_line(SERVE, is_serving);
    let (code, text) = prompt(&state, PROMPT, 64);
    assert_eq!((code, text), (0, reference(64)));
    // Two clients at once: both answered in full, one after the other.
    let a = std::thread::spawn({
        let state = state.clone();
        move || prompt(&state, PROMPT, 40)
    });
    let b = prompt(&state, "The dog", 40);
    let a = a.join().unwrap();
    assert_eq!(a, (0, reference(40)));
    assert_eq!(b, (0, reference_of("The dog", 40)));
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));

    // Each stage fetched its slice and the header, within the bound.
    let model = runtime_real::pipeline::model::Model::open(&model()).unwrap();
    let model = model.hash(&[], |_, _| {}).unwrap().0;
    assert_eq!(first.len(), 3);
    for (range, bytes, _) in &first {
        let (a, b) = range.split_once("..").unwrap();
        let layers = a.parse().unwrap()..b.parse().unwrap();
        let slice = model.slice(layers).unwrap().data_bytes();
        assert!(
            *bytes <= slice + model.header_len + 64 * 1024,
            "{range}: {bytes}"
        );
        assert!(*bytes >= slice, "{range}: {bytes} < {slice}");
    }

    // A second `up` on the same state dir reuses every cached slice.
    let mut up = Up::start(&state, &plan);
    let second = fetched(&mut up, 3);
    up.wait_line(SERVE, is_serving);
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    assert!(second.iter().all(|(_, bytes, _)| *bytes == 0), "{second:?}");

    // A corrupted cached slice is refused and fetched again: one in its
    // last tensor byte, one in its head (the RMSNorm epsilon's lowest
    // bit: the file still reads, its tensors are untouched).
    let cache = state.join("slice-cache");
    let cached = |range: &str| {
        std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains(range))
            .unwrap_or_else(|| panic!("the cached slice {range}"))
    };
    let victim = cached("-2-4-");
    let mut bytes = std::fs::read(&victim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();
    let victim = cached("-0-2-");
    let mut bytes = std::fs::read(&victim).unwrap();
    let key = b"layer_norm_rms_epsilon";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap();
    // The key, its value's type (u32), then the f32 itself.
    bytes[at + key.len() + 4] ^= 1;
    std::fs::write(&victim, bytes).unwrap();
    let mut up = Up::start(&state, &plan);
    let third = fetched(&mut up, 3);
    up.wait_line(SERVE, is_serving);
    let (code, text) = prompt(&state, PROMPT, 64);
    assert_eq!((code, text), (0, reference(64)));
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    let refetched: Vec<_> = third.iter().filter(|(_, b, _)| *b > 0).collect();
    assert_eq!(refetched.len(), 2, "{third:?}");
    assert_eq!(
        (refetched[0].0.as_str(), refetched[1].0.as_str()),
        ("0..2", "2..4")
    );
    assert!(
        refetched.iter().all(|r| r.2),
        "reported as refetched: {third:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn more_stages_than_layers_is_a_plan_error() {
    let dir = scratch("pipe6");
    let state = dir.join("state");
    let plan = pipeline_plan(&dir, 6, "");
    let out = drover(&state, &["up", plan.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("6 stages for a model of 5 layers"),
        "{stderr}"
    );
    assert!(!state.join("journal.bin").exists(), "nothing is rented");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Pids of the `drover-worker` processes whose working folder is under `state`.
fn workers_of(state: &Path) -> Vec<u32> {
    processes(state, "drover-worker")
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

#[test]
fn a_worker_killed_mid_request_faults_it_and_the_run_ends_with_every_lease_destroyed() {
    let dir = scratch("pipekill");
    let state = dir.join("state");
    let plan = pipeline_plan(&dir, 3, "");
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, is_serving);
    let workers = workers_of(&state);
    assert_eq!(workers.len(), 3, "one worker per stage");
    let pids = node_pids(&state);
    // A request with no cap runs until the context is full; kill a worker
    // once its first text arrived.
    let addr = runtime_real::prompt::read_addr(&state).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (first, terminal) = rt.block_on(async {
        let (mut client, first) = tokio::time::timeout(Duration::from_secs(30), async {
            let mut client = runtime_real::prompt::Client::connect(addr).await.unwrap();
            client.submit(1, PROMPT, None).await.unwrap();
            let first = client.next().await.unwrap().unwrap();
            (client, first)
        })
        .await
        .expect("the first text within the bound");
        let killed = Command::new("kill")
            .arg("-9")
            .arg(workers[1].to_string())
            .status()
            .unwrap();
        assert!(killed.success());
        let terminal = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match client.next().await.unwrap() {
                    Some(msg) if msg.is_terminal() => return Some(msg),
                    Some(_) => continue,
                    None => return None,
                }
            }
        })
        .await
        .expect("the request ends within the bound");
        (first, terminal)
    });
    assert!(
        matches!(first, runtime_real::prompt::ServerMsg::TextDelta { .. }),
        "{first:?}"
    );
    assert!(
        matches!(
            terminal,
            Some(runtime_real::prompt::ServerMsg::Fault { .. })
        ),
        "{terminal:?}"
    );
    // The run fails: exit 1, every lease destroyed, no process left.
    assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    assert_eq!(running(&workers), Vec::<u32>::new(), "workers left");
    let status = status(&state);
    assert_all_destroyed(&status, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stop_while_weights_load_is_a_shutdown_error_of_that_phase_and_tears_everything_down() {
    let dir = scratch("pipestop");
    let state = dir.join("state");
    // A 100 MB model, so loading takes a while.
    let big = dir.join("big.gguf");
    let made = Command::new(worker())
        .args([
            "make-model",
            "--shape",
            "0.5b,layers=4,vocab=512",
            "--type",
            "q8_0",
            "--vocab-from",
        ])
        .arg(model())
        .arg(&big)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let made = finish_within(made, "drover-worker make-model", COMMAND_BOUND);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let text = std::fs::read_to_string(pipeline_plan(&dir, 2, "split = [3, 1]")).unwrap();
    let text = text.replace(&model().display().to_string(), &big.display().to_string());
    let plan = dir.join("big.toml");
    std::fs::write(&plan, text).unwrap();
    let mut up = Up::start(&state, &plan);
    let loading = up.wait_line(SERVE, |l| l["event"] == "stage" && l["state"] == "loading");
    assert_eq!(loading["stage"], 0, "{loading}");
    let pids = node_pids(&state);
    up.type_stop();
    let failed = up.wait_line(EXIT, |l| l["event"] == "pipeline_failed");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with("a stop was asked for during weight loading"),
        "{error}"
    );
    assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));
    assert!(
        !up.seen.iter().any(|l| l.contains("\"serving\"")),
        "never served"
    );
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    assert_eq!(workers_of(&state), Vec::<u32>::new(), "workers left");
    let status = status(&state);
    assert_all_destroyed(&status, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A one-file HTTP server on loopback: the first `short` answers stop
/// halfway through the body (a dropped connection); later ones honour
/// `Range: bytes=N-` with 206. Returns its url and the requests' ranges.
fn serve_file(
    bytes: Vec<u8>,
    short: usize,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Option<u64>>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/stories.gguf", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut from = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(rest) = lower.strip_prefix("range: bytes=") {
                    from = rest.trim().trim_end_matches('-').parse::<u64>().ok();
                }
            }
            log.lock().unwrap().push(from);
            let start = from.unwrap_or(0) as usize;
            let body = &bytes[start..];
            let head = match from {
                Some(_) => format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{}\r\nConnection: close\r\n\r\n",
                    body.len(),
                    bytes.len() - 1,
                    bytes.len()
                ),
                None => format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                ),
            };
            let _ = stream.write_all(head.as_bytes());
            let cut = if i < short {
                body.len() / 2
            } else {
                body.len()
            };
            let _ = stream.write_all(&body[..cut]);
        }
    });
    (url, seen)
}

#[test]
fn a_model_by_url_is_fetched_once_resumed_after_a_cut_and_checked_against_its_sha256() {
    let dir = scratch("pipeurl");
    let state = dir.join("state");
    let bytes = std::fs::read(model()).unwrap();
    let sha = {
        use sha2::Digest;
        sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let (url, seen) = serve_file(bytes, 1);
    let path_line = format!("path = \"{}\"", model().display());
    let text = std::fs::read_to_string(pipeline_plan(&dir, 2, "")).unwrap();
    let good = text.replace(&path_line, &format!("url = \"{url}\"\nsha256 = \"{sha}\""));
    let plan = dir.join("url.toml");
    std::fs::write(&plan, good).unwrap();
    // The first answer is cut halfway: `up` says so and rents nothing.
    let out = drover(&state, &["up", plan.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("run again to resume"), "{stderr}");
    assert!(!state.join("journal.bin").exists(), "nothing is rented");
    // The next `up` resumes where it stopped, checks the digest, serves.
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, is_serving);
    let (code, answer) = prompt(&state, PROMPT, 64);
    assert_eq!((code, answer), (0, reference(64)));
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    assert!(state.join("models").join(format!("{sha}.gguf")).is_file());
    let ranges = seen.lock().unwrap().clone();
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[0], None);
    assert!(ranges[1].is_some_and(|n| n > 0), "resumed: {ranges:?}");
    // A second `up` uses the kept file: no request.
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, is_serving);
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    assert_eq!(seen.lock().unwrap().len(), 2);
    // A digest that does not match is refused after the fetch.
    let wrong = text_with_sha(&text, &path_line, &url, &"0".repeat(64));
    let plan = dir.join("wrong.toml");
    std::fs::write(&plan, wrong).unwrap();
    let other = dir.join("other");
    let out = drover(&other, &["up", plan.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the plan says 0000"), "{stderr}");
    assert!(!other.join("journal.bin").exists(), "nothing is rented");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn text_with_sha(text: &str, path_line: &str, url: &str, sha: &str) -> String {
    text.replace(path_line, &format!("url = \"{url}\"\nsha256 = \"{sha}\""))
}
