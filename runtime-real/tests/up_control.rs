//! `drover up`'s control plane end to end: a wrong join token is refused
//! and only that node fails (JoinTimeout) while the others become ready; a
//! malformed or oversized frame sent to the running `up` closes that
//! connection only, and every node stays ready with its agent connected.
//! Real node processes, real SSH, real iroh; every wait is on an event with
//! a bound.

mod transport_support;
mod up_support;

use core_fsm::ids::GroupId;
use runtime_real::transport::CLOSE_PROTOCOL;
use runtime_real::transport::wire;
use std::path::Path;
use std::time::Duration;
use transport_support::{closed_code, raw_client};
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);

/// The agent log of every local node, by lease folder.
fn agent_logs(state: &Path) -> Vec<String> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(state.join("nodes")).unwrap().flatten() {
        if let Ok(text) = std::fs::read_to_string(entry.path().join("agent.log")) {
            logs.push(text);
        }
    }
    logs
}

#[test]
fn a_wrong_join_token_is_refused_and_only_that_node_fails_with_join_timeout() {
    let dir = scratch("wrong-token");
    let state = dir.join("state");
    let mut plan = local_plan(2);
    let mut bad = plan.groups[0].clone();
    bad.group_id = GroupId::from("bad");
    bad.count = 1;
    // The token arrives corrupted: one character more.
    bad.boot.start_command = AGENT_START
        .replace("'${JOIN_TOKEN}'", "'x${JOIN_TOKEN}'")
        .into();
    // Long enough that the refused agent has surely connected and said so
    // before the wait ends, even on a loaded machine.
    bad.boot.timeouts.join_timeout = core_fsm::time::Duration::from_secs(10);
    plan.groups.push(bad);
    let plan = write_plan(&dir, &plan);
    let mut up = Up::start(&state, &plan);
    let settled = up.wait_line(SETTLE, |l| l["event"] == "settled");
    let status = status(&state);
    for good in ["workers-0", "workers-1"] {
        assert_eq!(node(&status, good)["ready"], true, "{settled}");
    }
    let failed = node(&status, "bad-0");
    assert_eq!(failed["stage"], "Failed", "{failed}");
    let reason = failed["failed_reason"].as_str().unwrap();
    assert!(reason.contains("JoinTimeout"), "{reason}");
    // The agent was refused (and said so), it did not crash or hang.
    let logs = agent_logs(&state);
    let refused: Vec<&String> = logs
        .iter()
        .filter(|l| l.contains("rejected: unknown join token"))
        .collect();
    assert_eq!(refused.len(), 1, "{logs:#?}");

    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 1, "a node failed");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_and_oversized_frames_close_their_connection_only_and_nodes_stay_ready() {
    let dir = scratch("bad-frames");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(3));
    let mut up = Up::start(&state, &plan);
    let control = up.wait_line(SETTLE, |l| l["event"] == "control");
    let addr = control["addr"].as_str().unwrap().to_owned();
    up.wait_line(SETTLE, |l| l["event"] == "settled");

    let oversized = (u32::try_from(wire::FRAME_BYTES_MAX).unwrap() + 1)
        .to_be_bytes()
        .to_vec();
    let cases: [(&str, Vec<u8>); 2] = [
        (
            "malformed",
            vec![0, 0, 0, 4, wire::WIRE_VERSION, 0xff, 0xff, 0xff],
        ),
        ("oversized", oversized),
    ];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (name, bytes) in cases {
        let code = runtime.block_on(async {
            let (_endpoint, conn) = raw_client(&addr).await;
            let (mut send, _recv) = conn.open_bi().await.unwrap();
            send.write_all(&bytes).await.unwrap();
            closed_code(&conn).await
        });
        assert_eq!(code, CLOSE_PROTOCOL.into_inner(), "{name}");
    }

    // Every node is still ready, and no agent lost its connection.
    let status = status(&state);
    for i in 0..3 {
        let node = node(&status, &format!("workers-{i}"));
        assert_eq!(
            (node["stage"].as_str(), node["ready"].as_bool()),
            (Some("Dormant"), Some(true)),
            "{node}"
        );
    }
    let logs = agent_logs(&state);
    assert_eq!(logs.len(), 3);
    for log in &logs {
        assert!(log.contains("joined"), "{log}");
        assert!(!log.contains("connection lost"), "{log}");
    }
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
