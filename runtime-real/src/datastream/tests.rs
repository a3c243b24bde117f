use super::*;
use core_fsm::Instant;
use core_fsm::ids::RunId;
use core_fsm::port::LogStream;

fn record(node: &str, seq: u64, line: &str) -> LogRecord {
    LogRecord {
        run_id: RunId(1),
        node: LogicalNodeId::from(node),
        lease_id: "local:0".into(),
        source: "ssh-bootstrap".into(),
        stream: LogStream::Stdout,
        seq,
        at: Instant(seq * 10),
        line: line.into(),
    }
}

/// A fresh folder of this test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-ds-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn forwarded(node: &str, channel: &'static str, position: u64, bytes: &[u8]) -> Forwarded {
    Forwarded {
        node: LogicalNodeId::from(node),
        lease: Some("local:0".into()),
        agent: AgentId::from("agent-a"),
        channel,
        position,
        bytes: bytes.to_vec(),
    }
}

#[test]
fn records_go_to_their_node_file_one_line_each() {
    let dir = scratch("files");
    let mut writer = Writer::new(&dir);
    writer.append(&record("w-0", 1, "hello")).unwrap();
    writer.append(&record("w-1", 1, "other")).unwrap();
    writer
        .append(&record("w-0", 2, "with \"quotes\" and\ttab"))
        .unwrap();
    writer.flush().unwrap();
    let (w0, skipped) = read(&dir, &LogicalNodeId::from("w-0")).unwrap();
    assert_eq!(skipped, 0);
    let records: Vec<LogRecord> = w0.iter().map(|l| l.record.clone()).collect();
    assert_eq!(
        records,
        vec![
            record("w-0", 1, "hello"),
            record("w-0", 2, "with \"quotes\" and\ttab")
        ]
    );
    assert!(w0.iter().all(|l| l.channel == channel::BOOTSTRAP_STDOUT));
    let text = std::fs::read_to_string(file_of(&dir, &LogicalNodeId::from("w-0"))).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert_eq!(format(&w0[0]), "w-0 bootstrap.stdout #1 t=10ms | hello");
    // Every line still reads as a bootstrap record (what `up/seqs.rs` reads).
    for line in text.lines() {
        serde_json::from_str::<LogRecord>(line).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_node_id_that_is_not_a_file_name_is_refused_and_others_go_on() {
    let dir = scratch("bad");
    let mut writer = Writer::new(&dir);
    for bad in ["../escape", "a/b", "..", ""] {
        let err = writer.append(&record(bad, 1, "x")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}: {err}");
        assert!(err.to_string().contains("not a safe file name"), "{err}");
    }
    writer.append(&record("w-0", 1, "still written")).unwrap();
    let (w0, _) = read(&dir, &LogicalNodeId::from("w-0")).unwrap();
    assert_eq!(w0[0].record, record("w-0", 1, "still written"));
    assert!(!dir.join("escape.ndjson").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn forwarded_lines_continue_the_numbering_per_stream_and_resends_are_dropped() {
    let dir = scratch("forward");
    let mut writer = Writer::new(&dir);
    writer.append(&record("w-0", 1, "boot 1")).unwrap();
    writer.append(&record("w-0", 2, "boot 2")).unwrap();
    let wrote = |w: &mut Writer, channel, position| {
        w.forwarded(forwarded("w-0", channel, position, b"x"))
            .unwrap()
    };
    assert!(wrote(&mut writer, channel::AGENT_STDOUT, 1));
    assert!(wrote(&mut writer, channel::WORKER_STDERR, 2));
    assert!(wrote(&mut writer, channel::AGENT_STDERR, 3));
    // A resend after a rejoin.
    assert!(!wrote(&mut writer, channel::AGENT_STDERR, 3));
    writer
        .gap(
            &LogicalNodeId::from("w-0"),
            None,
            &AgentId::from("agent-a"),
            4,
            9,
        )
        .unwrap();
    assert!(wrote(&mut writer, channel::AGENT_STDOUT, 10));
    // A later bootstrap of the node whose machine counted only its own
    // lines continues above the forwarded ones.
    writer.append(&record("w-0", 3, "boot again")).unwrap();
    let (lines, _) = read(&dir, &LogicalNodeId::from("w-0")).unwrap();
    let seen: Vec<(&str, LogStream, u64)> = lines
        .iter()
        .map(|l| (l.channel.as_str(), l.record.stream, l.record.seq))
        .collect();
    use LogStream::{Stderr, Stdout};
    assert_eq!(
        seen,
        vec![
            (channel::BOOTSTRAP_STDOUT, Stdout, 1),
            (channel::BOOTSTRAP_STDOUT, Stdout, 2),
            (channel::AGENT_STDOUT, Stdout, 3),
            (channel::WORKER_STDERR, Stderr, 1),
            (channel::AGENT_STDERR, Stderr, 2),
            (channel::GAP, Stderr, 3),
            (channel::AGENT_STDOUT, Stdout, 4),
            (channel::BOOTSTRAP_STDOUT, Stdout, 5),
        ]
    );
    assert!(
        lines[5].record.line.contains("6 line(s) lost"),
        "{:?}",
        lines[5]
    );
    // A restarted writer finds where the agent was and where numbering is.
    let mut again = Writer::new(&dir);
    let agent = AgentId::from("agent-a");
    assert_eq!(again.last_position(&LogicalNodeId::from("w-0"), &agent), 10);
    assert!(
        !again
            .forwarded(forwarded("w-0", channel::AGENT_STDOUT, 10, b"x"))
            .unwrap()
    );
    assert!(
        again
            .forwarded(forwarded("w-0", channel::AGENT_STDOUT, 11, b"y"))
            .unwrap()
    );
    let (lines, _) = read(&dir, &LogicalNodeId::from("w-0")).unwrap();
    assert_eq!(lines.last().unwrap().record.seq, 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_archive_holds_every_line_once_and_reads_back() {
    let dir = scratch("archive");
    let path = dir.join("deep/er/frames.ndjson");
    let archive = archive::Archive::open(&path).unwrap();
    let mut writer = Writer::with(&dir, RunId(1), Some(archive));
    writer.append(&record("w-0", 1, "boot")).unwrap();
    writer
        .forwarded(forwarded(
            "w-0",
            channel::WORKER_STDERR,
            1,
            b"bad \xff byte",
        ))
        .unwrap();
    writer.event(
        channel::LIFECYCLE,
        Some(&LogicalNodeId::from("w-0")),
        "w-0: ready".into(),
    );
    drop(writer);
    let (records, skipped) = archive::read(&path).unwrap();
    assert_eq!(skipped, 0);
    let arrivals: Vec<u64> = records.iter().map(|r| r.arrival).collect();
    assert_eq!(arrivals, vec![1, 2, 3]);
    assert_eq!(records[0].channel, channel::BOOTSTRAP_STDOUT);
    assert_eq!(records[0].encoding, "text");
    assert_eq!(records[1].encoding, "base64");
    assert_eq!(records[1].bytes().unwrap(), b"bad \xff byte");
    assert_eq!(records[1].agent_position, Some(1));
    assert_eq!(records[2].node, ORCHESTRATOR);
    // Reopened: appends, numbering on.
    let mut archive = archive::Archive::open(&path).unwrap();
    archive.record(
        &Line::of(record("w-0", 2, "more"), channel::BOOTSTRAP_STDOUT),
        b"more",
    );
    let (records, _) = archive::read(&path).unwrap();
    assert_eq!(records.last().unwrap().arrival, 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_archive_that_cannot_be_opened_names_its_path() {
    let dir = scratch("noarchive");
    std::fs::create_dir_all(&dir).unwrap();
    let blocker = dir.join("file");
    std::fs::write(&blocker, "x").unwrap();
    let path = blocker.join("frames.ndjson");
    let err = archive::Archive::open(&path).err().unwrap();
    assert!(err.contains(&path.display().to_string()), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn base64_round_trips() {
    for bytes in [&b""[..], b"f", b"fo", b"foo", b"foob", b"\xff\x00\x10"] {
        let text = archive::base64_encode(bytes);
        assert_eq!(archive::base64_decode(&text).unwrap(), bytes);
    }
    assert_eq!(archive::base64_encode(b"foobar"), "Zm9vYmFy");
    assert_eq!(archive::base64_encode(b"fo"), "Zm8=");
    assert!(archive::base64_decode("abc").is_none());
}
