//! The dashboard server in process, on a state dir the test writes: the
//! pipeline view follows `pipeline.json` (the fixture is the documented
//! shape), the prompt proxy streams a prompt service's answer back, and a
//! page that falls behind the event ring gets a gap and a resync. Every
//! wait is on an event with a bound.

mod dashboard_support;

use dashboard_support::*;
use runtime_real::dashboard::{Config, serve};
use runtime_real::prompt::{DoneReason, ServerMsg};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const BOUND: Duration = Duration::from_secs(20);
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A prompt service that answers one prompt with two deltas and `Done`;
/// yields the line it received.
async fn fake_prompt_service() -> (std::net::SocketAddr, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (read, mut write) = socket.into_split();
        let mut lines = tokio::io::BufReader::new(read).lines();
        let line = lines.next_line().await.unwrap().unwrap();
        for message in [
            ServerMsg::TextDelta {
                request_id: 1,
                text: "Once".into(),
            },
            ServerMsg::TextDelta {
                request_id: 1,
                text: " upon".into(),
            },
            ServerMsg::Done {
                request_id: 1,
                tokens: 2,
                reason: DoneReason::MaxTokens,
            },
        ] {
            write.write_all(message.to_line().as_bytes()).await.unwrap();
        }
        line
    });
    (addr, task)
}

fn log_line(node: &str, seq: u64) -> String {
    let record = core_fsm::port::LogRecord {
        run_id: core_fsm::ids::RunId(1),
        node: node.into(),
        lease_id: "local:0".into(),
        source: "agent".into(),
        stream: core_fsm::port::LogStream::Stdout,
        seq,
        at: core_fsm::Instant(seq),
        line: format!("line {seq}"),
    };
    format!("{}\n", serde_json::to_string(&record).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pipeline_view_the_prompt_proxy_and_a_page_that_fell_behind() {
    let state = std::env::temp_dir().join(format!("drover-dash-pipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(state.join("datastream")).unwrap();
    let (prompt_addr, service) = fake_prompt_service().await;
    let fixture =
        include_str!("fixtures/pipeline.json").replace("PROMPT_ADDR", &prompt_addr.to_string());
    std::fs::write(state.join("pipeline.json"), &fixture).unwrap();
    let served = serve(Config {
        state_dir: state.clone(),
        addr: "127.0.0.1:0".parse().unwrap(),
        read_only: false,
        ring_max: 4,
        token: TOKEN.into(),
        controls: Default::default(),
    })
    .await
    .unwrap();
    let base = format!("http://{}", served.addr);

    // The snapshot carries the pipeline document as the file has it.
    let mut sse = Sse::open(&base, TOKEN, None).await;
    let seen = sse.until(BOUND, |e| e.kind == "snapshot").await;
    let snapshot = &seen.last().unwrap().data;
    let expected: serde_json::Value = serde_json::from_str(&fixture).unwrap();
    assert_eq!(snapshot["pipeline"], expected);
    assert_eq!(snapshot["pipeline"]["stages"][1]["fetched_bytes"], 381552);

    // A rewrite of the file is one `pipeline` event with the new document.
    let ready = fixture
        .replace("\"loading\"", "\"ready\"")
        .replace("381552", "763104");
    let tmp = state.join("pipeline.json.tmp");
    std::fs::write(&tmp, &ready).unwrap();
    std::fs::rename(&tmp, state.join("pipeline.json")).unwrap();
    let seen = sse.until(BOUND, |e| e.kind == "pipeline").await;
    let doc = &seen.last().unwrap().data["pipeline"];
    assert_eq!(doc["stages"][1]["state"], "ready");
    assert_eq!(doc["stages"][1]["fetched_bytes"], 763104);

    // The prompt proxy: the service's lines stream back as they come.
    let http = http();
    let mut answer = http
        .post(format!("{base}/api/prompt?token={TOKEN}"))
        .header("origin", &base)
        .body(r#"{"text":"Once upon a time","max_tokens":2}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let mut body = String::new();
    while let Some(chunk) = tokio::time::timeout(BOUND, answer.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let lines: Vec<serde_json::Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{body}");
    assert_eq!(lines[0]["TextDelta"]["text"], "Once");
    assert_eq!(lines[1]["TextDelta"]["text"], " upon");
    assert_eq!(lines[2]["Done"]["tokens"], 2);
    let received = tokio::time::timeout(BOUND, service).await.unwrap().unwrap();
    let received: serde_json::Value = serde_json::from_str(&received).unwrap();
    assert_eq!(received["SubmitPrompt"]["prompt_text"], "Once upon a time");
    assert_eq!(received["SubmitPrompt"]["max_tokens"], 2);

    // 20 lines in one write overrun the 4-event ring: the page gets a gap
    // naming what it missed, then a snapshot holding every line.
    let text: String = (1..=20).map(|s| log_line("workers-0", s)).collect();
    let path = state.join("datastream/workers-0.ndjson");
    std::fs::write(&path, text).unwrap();
    let seen = sse.until(BOUND, |e| e.kind == "snapshot").await;
    let gap = seen
        .iter()
        .find(|e| e.kind == "gap")
        .expect("a gap before the resync");
    assert_eq!(gap.data["missed"], 16, "{:?}", gap.data);
    let tail = seen.last().unwrap().data["logs"]["workers-0"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(tail.len(), 20);
    assert_eq!(
        tail[19]["line"],
        "workers-0 bootstrap.stdout #20 t=20ms | line 20"
    );
    assert_eq!(tail[19]["offset"], std::fs::metadata(&path).unwrap().len());

    served.stop().await;
    // Once stopped, the stream ends after what it had.
    while sse.next(BOUND).await.is_some() {}
    std::fs::remove_dir_all(&state).unwrap();
}
