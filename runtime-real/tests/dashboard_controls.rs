//! The dashboard's controls against a real `drover up` of three local
//! nodes: a control without the token, with a foreign `Origin` or for an
//! unknown node is refused and changes nothing; removing a node destroys
//! its lease (the journal says so, `drover status` shows it Destroyed, the
//! other nodes stay ready, and the stream shows it); stopping the run from
//! the page tears everything down and `up` exits 0. Every wait is on an
//! event (an SSE event, a line, an exit), bounded.

mod dashboard_support;
mod up_support;

use dashboard_support::*;
use std::collections::BTreeMap;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);

fn stage_of(cards: &BTreeMap<String, String>, node: &str) -> String {
    cards.get(node).cloned().unwrap_or_default()
}

#[test]
fn remove_and_stop_from_the_page_go_through_the_run_and_refusals_change_nothing() {
    let dir = scratch("dash-controls");
    let WithDashboard {
        mut up,
        state,
        base,
        token,
        ..
    } = up_with_dashboard(&dir, 3, SETTLE);
    let rt = tokio_runtime();
    rt.block_on(async {
        let http = http();
        let mut sse = Sse::open(&base, &token, None).await;
        let mut cards = BTreeMap::new();
        sse.until(SETTLE, |e| {
            fold(&mut cards, e);
            cards.len() == 3 && cards.values().all(|s| s == "Dormant")
        })
        .await;
        let remove = format!("{base}/api/nodes/workers-1/remove");
        // Refused: no token, a wrong one, a foreign Origin, an unknown node.
        let bare = http.post(&remove).send().await.unwrap();
        assert_eq!(bare.status(), 401);
        let wrong = http
            .post(format!("{remove}?token={}", wrong_token(&token)))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401);
        let cross = http
            .post(format!("{remove}?token={token}"))
            .header("origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(cross.status(), 403);
        let unknown = http
            .post(format!("{base}/api/nodes/workers-9/remove?token={token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status(), 404);
        assert!(
            unknown
                .text()
                .await
                .unwrap()
                .contains("no node `workers-9`")
        );
        let cross_stop = http
            .post(format!("{base}/api/stop?token={token}"))
            .header("origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(cross_stop.status(), 403);
        // Nothing changed.
        let status = status(&state);
        for i in 0..3 {
            assert_eq!(
                node(&status, &format!("workers-{i}"))["ready"],
                true,
                "{status}"
            );
        }

        // Remove workers-1, from the page's own origin.
        let origin = base.clone();
        let removed = http
            .post(format!("{remove}?token={token}"))
            .header("origin", origin.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(removed.status(), 202);
        let body: serde_json::Value = removed.json().await.unwrap();
        assert_eq!(body["accepted"], "remove");
        sse.until(SETTLE, |e| {
            fold(&mut cards, e);
            stage_of(&cards, "workers-1") == "Destroyed"
        })
        .await;
        assert_eq!(stage_of(&cards, "workers-0"), "Dormant");
        assert_eq!(stage_of(&cards, "workers-2"), "Dormant");
        // A second remove of it is refused: it is gone already.
        let again = http
            .post(format!("{remove}?token={token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 409);

        // Stop the run from the page.
        let stopped = http
            .post(format!("{base}/api/stop?token={token}"))
            .header("origin", origin.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(stopped.status(), 202);
    });
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    // The journal's story: workers-1 destroyed once (by the control, not
    // again at teardown), every lease gone.
    let after = status(&state);
    assert_all_destroyed(&after, 3);
    let destroying = up
        .seen
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["id"] == "workers-1" && v["stage"] == "Destroying")
        .count();
    assert_eq!(destroying, 1, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
