//! The prompt RPC over real loopback TCP: the `Server` with a test backend,
//! its `Client`, raw sockets for what a client should not send, and the
//! `drover prompt` and `drover chat` binaries. Every wait is bounded.

mod prompt_support;

use prompt_support::{Raw, Seen, Service, answer, done, drover, state_dir, within};
use runtime_real::prompt::{self, DoneReason, ServerMsg};
use std::net::SocketAddr;
use tokio::io::AsyncWriteExt;

fn submit_line(request_id: u64, text: &str) -> String {
    format!("{{\"SubmitPrompt\":{{\"request_id\":{request_id},\"prompt_text\":\"{text}\"}}}}\n")
}

#[tokio::test]
async fn a_prompt_is_answered_in_full_and_the_connection_stays_open() {
    let mut service = Service::start().await;
    let mut client = service.client().await;
    client
        .submit(1, "Once upon a time", Some(64))
        .await
        .expect("submitting");
    let (_, request_id, max_tokens) = service.submitted("Once upon a time").await;
    assert_eq!((request_id, max_tokens), (1, Some(64)));
    let expected = ("Once upon a time".into(), done(1, 4, DoneReason::Eos));
    assert_eq!(answer(&mut client, 1).await, expected);

    client
        .submit(2, "a b c d", Some(2))
        .await
        .expect("submitting again");
    let expected = ("a b".into(), done(2, 2, DoneReason::MaxTokens));
    assert_eq!(answer(&mut client, 2).await, expected);

    client
        .submit(3, "fault now", None)
        .await
        .expect("submitting a third");
    let (_, terminal) = answer(&mut client, 3).await;
    assert!(
        matches!(terminal, ServerMsg::Fault { request_id: 3, .. }),
        "{terminal:?}"
    );
    // Aborting the server ends its connections too.
    service.server.abort();
    let ended = within("the server's end", &mut service.server).await;
    assert!(ended.is_err_and(|e| e.is_cancelled()), "aborted");
    let after = within("the connection's end", client.next()).await;
    assert!(matches!(after, Ok(None) | Err(_)), "{after:?}");
}

#[tokio::test]
async fn a_half_closed_client_still_gets_its_answer() {
    let mut service = Service::start().await;
    let mut raw = Raw::connect(service.addr).await;
    raw.send(&submit_line(1, "hold that")).await;
    // As `printf '...' | nc` does: no more lines, still listening.
    within("half-closing", raw.writer.shutdown())
        .await
        .expect("half-closing");
    let (conn, ..) = service.submitted("hold that").await;
    service.release.send(()).expect("releasing");
    let delta = ServerMsg::TextDelta {
        request_id: 1,
        text: "held".into(),
    };
    assert_eq!(raw.recv().await, Some(delta));
    assert_eq!(raw.recv().await, Some(done(1, 1, DoneReason::Eos)));
    assert_eq!(raw.recv().await, None, "closed once answered");
    service
        .wait_for("its disconnect", |s| *s == Seen::Disconnected { conn })
        .await;
}

#[tokio::test]
async fn two_clients_at_once_are_both_answered_in_full() {
    let mut service = Service::start().await;
    let (mut first, mut second) = (service.client().await, service.client().await);
    first.submit(1, "hold on", None).await.expect("submitting");
    let (first_conn, ..) = service.submitted("hold on").await;
    second
        .submit(1, "meanwhile here", None)
        .await
        .expect("submitting");
    let (second_conn, ..) = service.submitted("meanwhile here").await;
    assert_ne!(first_conn, second_conn, "each connection has its own id");
    // The second is answered while the first is held, then the first.
    let expected = ("meanwhile here".into(), done(1, 2, DoneReason::Eos));
    assert_eq!(answer(&mut second, 1).await, expected);
    service.release.send(()).expect("releasing");
    let expected = ("held".into(), done(1, 1, DoneReason::Eos));
    assert_eq!(answer(&mut first, 1).await, expected);
}

#[tokio::test]
async fn a_second_submit_in_flight_ends_only_its_own_connection() {
    let mut service = Service::start().await;
    let mut other = service.client().await;
    let mut raw = Raw::connect(service.addr).await;
    raw.send(&submit_line(1, "hold it")).await;
    let (conn, ..) = service.submitted("hold it").await;
    raw.send(&submit_line(2, "again")).await;
    let reason = raw.protocol_error().await;
    assert!(
        reason.starts_with("line 2: SubmitPrompt 2 while request 1"),
        "{reason}"
    );
    service
        .wait_for("its disconnect", |s| *s == Seen::Disconnected { conn })
        .await;

    other
        .submit(7, "still here", None)
        .await
        .expect("submitting");
    let expected = ("still here".into(), done(7, 2, DoneReason::Eos));
    assert_eq!(answer(&mut other, 7).await, expected);
    // The abandoned request's answer goes nowhere and disturbs nobody.
    service.release.send(()).expect("releasing");
    other.submit(8, "and here", None).await.expect("submitting");
    let expected = ("and here".into(), done(8, 2, DoneReason::Eos));
    assert_eq!(answer(&mut other, 8).await, expected);
}

#[tokio::test]
async fn malformed_and_unknown_lines_name_their_line() {
    let service = Service::start().await;
    let mut raw = Raw::connect(service.addr).await;
    // A blank line counts as a line, and is otherwise skipped.
    raw.send(&format!("{}\n", submit_line(1, "fine"))).await;
    let delta = ServerMsg::TextDelta {
        request_id: 1,
        text: "fine".into(),
    };
    assert_eq!(raw.recv().await, Some(delta));
    assert_eq!(raw.recv().await, Some(done(1, 1, DoneReason::Eos)));
    raw.send("{\"SubmitPrompt\":{\"request_id\":2,\n").await;
    let reason = raw.protocol_error().await;
    assert!(
        reason.starts_with("line 3, column 32: EOF while parsing"),
        "{reason}"
    );

    let mut raw = Raw::connect(service.addr).await;
    raw.send("{\"Hello\":{}}\n").await;
    let reason = raw.protocol_error().await;
    let expected =
        "line 1, column 8: unknown variant `Hello`, expected `SubmitPrompt` or `Shutdown`";
    assert_eq!(reason, expected);

    let mut raw = Raw::connect(service.addr).await;
    raw.send("{\"SubmitPrompt\":{\"request_id\":-1,\"prompt_text\":\"x\"}}\n")
        .await;
    let reason = raw.protocol_error().await;
    let expected = "line 1, column 32: invalid value: integer `-1`, expected u64";
    assert_eq!(reason, expected);
}

#[tokio::test]
async fn an_oversized_line_is_a_protocol_error() {
    let service = Service::start().await;
    let Raw { lines, mut writer } = Raw::connect(service.addr).await;
    let mut line = "x".repeat(prompt::protocol::LINE_BYTES_MAX + 1);
    line.push('\n');
    // The server stops reading at the limit: write beside the reading.
    let writing = tokio::spawn(async move {
        let _ = writer.write_all(line.as_bytes()).await;
        writer
    });
    let writer = within("writing", writing).await.expect("the writer");
    let reason = Raw { lines, writer }.protocol_error().await;
    let limit = prompt::protocol::LINE_BYTES_MAX;
    assert_eq!(reason, format!("line 1: longer than {limit} bytes"));
}

#[tokio::test]
async fn a_client_gone_mid_stream_is_disconnected_and_disturbs_nobody() {
    let mut service = Service::start().await;
    let mut other = service.client().await;
    other.submit(1, "before", None).await.expect("submitting");
    let expected = ("before".into(), done(1, 1, DoneReason::Eos));
    assert_eq!(answer(&mut other, 1).await, expected);

    let mut leaving = service.client().await;
    leaving
        .submit(1, "stream please", None)
        .await
        .expect("submitting");
    let (conn, ..) = service.submitted("stream please").await;
    let first = within("a delta", leaving.next()).await.expect("reading");
    assert_eq!(
        first,
        Some(ServerMsg::TextDelta {
            request_id: 1,
            text: "tick".into()
        })
    );
    drop(leaving);
    // The backend streams on until the connection's end stops it.
    service.release.send(()).expect("releasing");
    service
        .wait_for("the disconnect", |s| *s == Seen::Disconnected { conn })
        .await;

    other.submit(2, "after it", None).await.expect("submitting");
    let expected = ("after it".into(), done(2, 2, DoneReason::Eos));
    assert_eq!(answer(&mut other, 2).await, expected);
}

#[tokio::test]
async fn shutdown_is_passed_on_and_answered() {
    let mut service = Service::start().await;
    let mut client = service.client().await;
    client.shutdown().await.expect("asking to stop");
    let answer = within("the answer", client.next()).await.expect("reading");
    assert_eq!(answer, Some(ServerMsg::ShuttingDown {}));
    let is_shutdown = |s: &Seen| matches!(s, Seen::Shutdown { .. });
    let first = service.wait_for("a shutdown", is_shutdown).await;
    // The bare string, from another connection.
    let mut raw = Raw::connect(service.addr).await;
    raw.send("\"Shutdown\"\n").await;
    assert_eq!(raw.recv().await, Some(ServerMsg::ShuttingDown {}));
    let second = service.wait_for("a shutdown", is_shutdown).await;
    assert_ne!(first, second, "one Shutdown call per connection that asked");
}

#[tokio::test]
async fn max_tokens_absent_null_or_zero_is_no_cap() {
    let mut service = Service::start().await;
    let mut raw = Raw::connect(service.addr).await;
    let fields = [
        "",
        ",\"max_tokens\":null",
        ",\"max_tokens\":0",
        ",\"max_tokens\":3",
    ];
    for (n, field) in (1u64..).zip(fields) {
        let text = format!("w{n}");
        let line = submit_line(n, &text).replace("\"}}", &format!("\"{field}}}}}"));
        raw.send(&line).await;
        let (_, _, max_tokens) = service.submitted(&text).await;
        assert_eq!(max_tokens, (n == 4).then_some(3), "{line}");
        let delta = ServerMsg::TextDelta {
            request_id: n,
            text,
        };
        assert_eq!(raw.recv().await, Some(delta));
        assert_eq!(raw.recv().await, Some(done(n, 1, DoneReason::Eos)));
    }
}

#[test]
fn read_addr_without_a_service_names_the_file() {
    let dir = state_dir("missing");
    let file = dir.join("prompt.addr");
    let expected = format!(
        "no prompt service: is a pipeline `drover up` running on {}? ({} does not exist)",
        dir.display(),
        file.display()
    );
    assert_eq!(prompt::read_addr(&dir), Err(expected));

    let addr: SocketAddr = "127.0.0.1:19777".parse().expect("an address");
    prompt::write_addr(&dir, addr).expect("writing the address");
    assert_eq!(prompt::read_addr(&dir), Ok(addr));
    std::fs::write(&file, "nowhere\n").expect("spoiling the file");
    let error = prompt::read_addr(&dir).expect_err("not an address");
    let expected = format!("{}: `nowhere` is not an ip:port", file.display());
    assert!(error.starts_with(&expected), "{error}");
    prompt::remove_addr(&dir).expect("removing the address");
    assert!(prompt::read_addr(&dir).is_err(), "gone again");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_drover_prompt_and_chat_commands() {
    let mut service = Service::start().await;
    let dir = state_dir("commands");
    let (code, _, stderr) = drover(&dir, &["prompt", "hi"], "").await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("drover: no prompt service"), "{stderr}");
    prompt::write_addr(&dir, service.addr).expect("writing the address");

    let args = ["prompt", "Once upon a time", "--max-tokens", "3"];
    let (code, stdout, stderr) = drover(&dir, &args, "").await;
    assert_eq!((code, stdout.as_str()), (0, "Once upon a\n"), "{stderr}");
    assert_eq!(service.submitted("Once upon a time").await.1, 1);

    let (code, stdout, stderr) = drover(&dir, &["--json", "prompt", "two words"], "").await;
    assert_eq!(code, 0, "{stderr}");
    let expected = [
        r#"{"TextDelta":{"request_id":1,"text":"two"}}"#,
        r#"{"TextDelta":{"request_id":1,"text":" words"}}"#,
        r#"{"Done":{"request_id":1,"tokens":2,"reason":"eos"}}"#,
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
    assert_eq!(service.submitted("two words").await.2, None, "no cap asked");

    let (code, stdout, stderr) = drover(&dir, &["prompt", "fault please"], "").await;
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert_eq!(
        stderr,
        "drover: prompt failed: the test backend faults it\n"
    );

    let input = "hello there\n\nsecond line\n";
    let (code, stdout, stderr) = drover(&dir, &["chat", "--max-tokens", "5"], input).await;
    assert_eq!(
        (code, stdout.as_str()),
        (0, "hello there\nsecond line\n"),
        "{stderr}"
    );
    assert_eq!(stderr, "", "no `> ` prompt when stdin is not a terminal");
    let (first_conn, first_id, _) = service.submitted("hello there").await;
    let (second_conn, second_id, cap) = service.submitted("second line").await;
    assert_eq!((first_id, second_id, cap), (1, 2, Some(5)));
    assert_eq!(first_conn, second_conn, "chat keeps one connection");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn drover_prompt_into_a_reader_that_stops_ends_quietly() {
    use tokio::io::AsyncReadExt;
    let mut service = Service::start().await;
    let dir = state_dir("reader-gone");
    prompt::write_addr(&dir, service.addr).expect("writing the address");
    // `drover prompt ... | head -c 4`: the reader takes the first delta
    // and closes the pipe while the answer streams on.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_drover"))
        .arg("--state-dir")
        .arg(&dir)
        .args(["prompt", "stream on"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting drover");
    let (conn, ..) = service.submitted("stream on").await;
    let mut stdout = child.stdout.take().expect("its stdout");
    let mut first = [0u8; 4];
    within("the first delta", stdout.read_exact(&mut first))
        .await
        .expect("reading its stdout");
    assert_eq!(&first, b"tick");
    drop(stdout);
    service.release.send(()).expect("releasing");
    let output = within("drover", child.wait_with_output())
        .await
        .expect("running drover");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "a closed pipe is not an error to report");
    // Its connection ends with it; the service goes on.
    service
        .wait_for("the disconnect", |s| *s == Seen::Disconnected { conn })
        .await;
    let mut other = service.client().await;
    other
        .submit(1, "still here", None)
        .await
        .expect("submitting");
    let expected = ("still here".into(), done(1, 2, DoneReason::Eos));
    assert_eq!(answer(&mut other, 1).await, expected);
    let _ = std::fs::remove_dir_all(&dir);
}
