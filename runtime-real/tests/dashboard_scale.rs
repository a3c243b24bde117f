//! The dashboard's +1 / -1 per group against a real `drover up` of two
//! local nodes: a scale without the token, with a foreign `Origin` or
//! `Host`, with a bad body or for an unknown group is refused and changes
//! nothing (no `DesiredSet` in the journal, both nodes ready); +1 adds
//! `workers-2`, which the run provisions until it is ready (the group shows
//! 3/3); -1 destroys it (2/2), and its lease is destroyed once: the journal
//! has one destroy request and one release for it, not another at
//! teardown. And the scaled fleet is the journal's: after `kill -9` of
//! `up`, `status` and a restarted `up` keep the added node. Every wait is
//! on an event (an SSE event, a line, an exit), bounded.

mod dashboard_support;
mod up_support;

use core_fsm::port::JournalRecord;
use dashboard_support::*;
use std::collections::BTreeMap;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);

/// The `workers` counter of a `groups` or `snapshot` event: (ready, desired).
fn workers_count(event: &SseEvent) -> Option<(u64, u64)> {
    let groups = event.data["groups"].as_array()?;
    let g = groups.iter().find(|g| g["group"] == "workers")?;
    Some((g["ready"].as_u64()?, g["desired"].as_u64()?))
}

fn journal(state: &std::path::Path) -> Vec<JournalRecord> {
    runtime_real::journal::Journal::read(state).unwrap().records
}

#[test]
fn plus_one_adds_a_ready_node_and_minus_one_destroys_it_once() {
    let dir = scratch("dash-scale");
    let WithDashboard {
        mut up,
        state,
        base,
        token,
        ..
    } = up_with_dashboard(&dir, 2, SETTLE);
    let rt = tokio_runtime();
    rt.block_on(async {
        let http = http();
        let mut sse = Sse::open(&base, &token, None).await;
        let mut cards = BTreeMap::new();
        let mut count = None;
        sse.until(SETTLE, |e| {
            fold(&mut cards, e);
            count = workers_count(e).or(count);
            count == Some((2, 2))
        })
        .await;
        let scale = format!("{base}/api/groups/workers/scale");
        let plus = r#"{"delta":1}"#;
        // Refused, each changing nothing.
        let bare = http.post(&scale).body(plus).send().await.unwrap();
        assert_eq!(bare.status(), 401);
        let cross = http
            .post(format!("{scale}?token={token}"))
            .header("origin", "http://evil.example")
            .body(plus)
            .send()
            .await
            .unwrap();
        assert_eq!(cross.status(), 403);
        let port = base.rsplit_once(':').unwrap().1;
        let rebound = http
            .post(format!("{scale}?token={token}"))
            .header("host", format!("evil.example:{port}"))
            .body(plus)
            .send()
            .await
            .unwrap();
        assert_eq!(rebound.status(), 403);
        for body in [r#"{"delta":2}"#, "{}", "+1"] {
            let bad = http
                .post(format!("{scale}?token={token}"))
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(bad.status(), 400, "{body}");
            assert!(bad.text().await.unwrap().contains(r#"{"delta": 1}"#));
        }
        let unknown = http
            .post(format!("{base}/api/groups/nope/scale?token={token}"))
            .body(plus)
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status(), 404);
        assert!(unknown.text().await.unwrap().contains("no group `nope`"));
        let records = journal(&state);
        assert!(
            !records
                .iter()
                .any(|r| matches!(r, JournalRecord::DesiredSet { .. })),
            "a refused scale journals nothing"
        );
        let before = status(&state);
        assert_eq!(before["nodes"].as_array().unwrap().len(), 2, "{before}");

        // +1, from the page's own origin: workers-2 comes up.
        let grown = http
            .post(format!("{scale}?token={token}"))
            .header("origin", base.as_str())
            .body(plus)
            .send()
            .await
            .unwrap();
        assert_eq!(grown.status(), 202);
        let body: serde_json::Value = grown.json().await.unwrap();
        assert_eq!(
            (&body["accepted"], &body["desired"]),
            (&"scale".into(), &3.into())
        );
        sse.until(SETTLE, |e| {
            fold(&mut cards, e);
            count = workers_count(e).or(count);
            count == Some((3, 3)) && cards.get("workers-2").is_some_and(|s| s == "Dormant")
        })
        .await;
        assert_eq!(node(&status(&state), "workers-2")["ready"], true);

        // -1: the tail node, workers-2, goes.
        let shrunk = http
            .post(format!("{scale}?token={token}"))
            .header("origin", base.as_str())
            .body(r#"{"delta":-1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(shrunk.status(), 202);
        sse.until(SETTLE, |e| {
            fold(&mut cards, e);
            count = workers_count(e).or(count);
            count == Some((2, 2)) && cards.get("workers-2").is_some_and(|s| s == "Destroyed")
        })
        .await;
        assert_eq!(cards.get("workers-0").map(String::as_str), Some("Dormant"));
        assert_eq!(cards.get("workers-1").map(String::as_str), Some("Dormant"));
        let stopped = http
            .post(format!("{base}/api/stop?token={token}"))
            .header("origin", base.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(stopped.status(), 202);
    });
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    let records = journal(&state);
    let counts: Vec<u32> = (records.iter())
        .filter_map(|r| match r {
            JournalRecord::DesiredSet { count, .. } => Some(*count),
            _ => None,
        })
        .collect();
    assert_eq!(counts, [3, 2], "both counts journaled, in order");
    let of_node = |want: fn(&JournalRecord) -> bool| {
        (records.iter())
            .filter(|r| want(r))
            .filter(|r| {
                core_fsm::node::Journaled::node_of(r).is_some_and(|n| n.as_str() == "workers-2")
            })
            .count()
    };
    assert_eq!(
        of_node(|r| matches!(r, JournalRecord::LeaseIntent { .. })),
        1
    );
    assert_eq!(
        of_node(|r| matches!(r, JournalRecord::DestroyRequested { .. })),
        1
    );
    assert_eq!(
        of_node(|r| matches!(r, JournalRecord::LeaseReleased { .. })),
        1,
        "its lease destroyed once"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The scaled fleet is the journal's: after `kill -9` of `up`, `drover
/// status` lists the added node, and a restarted `up` keeps it (adopted,
/// not destroyed as a node its plan lacks): three nodes settle, the page's
/// counter says 3/3, and the stop destroys all three.
#[test]
fn a_restarted_up_keeps_the_nodes_a_plus_one_added() {
    let dir = scratch("dash-scale-restart");
    let WithDashboard {
        mut up,
        state,
        plan,
        base,
        token,
    } = up_with_dashboard(&dir, 2, SETTLE);
    let rt = tokio_runtime();
    rt.block_on(async {
        let mut sse = Sse::open(&base, &token, None).await;
        let grown = http()
            .post(format!("{base}/api/groups/workers/scale?token={token}"))
            .header("origin", base.as_str())
            .body(r#"{"delta":1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(grown.status(), 202);
        let mut count = None;
        sse.until(SETTLE, |e| {
            count = workers_count(e).or(count);
            count == Some((3, 3))
        })
        .await;
    });
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    let crashed = status(&state);
    assert_eq!(node(&crashed, "workers-2")["ready"], true, "{crashed}");

    let mut up = Up::start(&state, &plan);
    let line = up.wait_line(SETTLE, |l| l["event"] == "dashboard");
    let (base, token) = split_url(line["url"].as_str().unwrap());
    let settled = up.wait_line(SETTLE, |l| l["event"] == "settled");
    assert_eq!(settled["nodes"].as_array().unwrap().len(), 3, "{settled}");
    rt.block_on(async {
        let mut sse = Sse::open(&base, &token, None).await;
        let mut count = None;
        sse.until(SETTLE, |e| {
            count = workers_count(e).or(count);
            count == Some((3, 3))
        })
        .await;
    });
    let restarted = status(&state);
    for i in 0..3 {
        assert_eq!(
            node(&restarted, &format!("workers-{i}"))["ready"],
            true,
            "{restarted}"
        );
    }
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    let after = status(&state);
    assert_all_destroyed(&after, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
