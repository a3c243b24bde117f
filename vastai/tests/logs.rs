//! Instance logs (§A.9): `request_logs` answers a result URL, which answers
//! 404 until the log is "uploaded"; the client polls it within its bound.
//! Real client, real fake, real HTTP on 127.0.0.1; no test sleeps (the
//! client's own poll interval is its policy, shrunk to 1 ms here).

mod common;

use common::*;
use core_fsm::port::{EndpointStatus, ProviderErrorKind};
use vastai::client::AuthStyle;
use vastai::limits::Endpoint;

async fn running(w: &World) -> std::sync::Arc<core_fsm::port::LeaseFacts> {
    let lease = w.create("workers-0", 1).await.expect("create").lease;
    let status = w.settle(&lease, 1_000, 10).await;
    assert!(matches!(status, EndpointStatus::Ready(_)), "{status:?}");
    lease
}

#[tokio::test]
async fn logs_are_requested_then_polled_until_the_upload_is_there() {
    let w = world_with(|_| {}, |c| c.log_poll_interval_ms = 1).await;
    let lease = running(&w).await;
    let id: u64 = lease.contract_id.parse().unwrap();
    for n in 1..=3 {
        w.backend.print(id, format!("onstart line {n}"));
    }

    let url = w
        .client
        .request_logs(&lease, 2)
        .await
        .expect("request logs");
    assert!(
        url.starts_with(&format!("{}/vast.ai/instance_logs/", w.fake.base_url())),
        "{url}"
    );
    assert_eq!(w.fake.requests(Endpoint::Logs), 1);
    // The first fetch finds no upload yet (404), the second finds the log:
    // two fetches, and only the last two lines (`tail` 2).
    let before = w.client.stats().requests;
    let text = w.client.fetch_logs(&url).await.expect("fetch logs");
    assert_eq!(w.client.stats().requests - before, 2, "one 404, then 200");
    assert_eq!(text, "onstart line 2\nonstart line 3\n");

    // Both calls in one, with the whole log: the machine's start line first.
    let text = w.client.instance_logs(&lease, 1000).await.expect("logs");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        lines[0],
        format!("machine {id} started (ghcr.io/drover/node:1)")
    );
    assert_eq!(lines[3], "onstart line 3");
}

#[tokio::test]
async fn a_log_that_never_arrives_is_transient_within_the_poll_bound_and_names_no_url() {
    let w = world_with(
        |f| f.log_upload_polls = 1_000,
        |c| {
            c.log_poll_interval_ms = 1;
            c.log_polls_max = 3;
        },
    )
    .await;
    let lease = running(&w).await;
    let url = w.client.request_logs(&lease, 10).await.expect("request");
    let before = w.client.stats().requests;
    let err = w.client.fetch_logs(&url).await.unwrap_err();
    assert_eq!(w.client.stats().requests - before, 3, "exactly the bound");
    assert_eq!(err.kind, ProviderErrorKind::Transient, "{err:?}");
    assert!(err.message.contains("after 3 fetch(es)"), "{err:?}");
    assert!(err.message.contains("HTTP 404"), "{err:?}");
    assert!(!err.message.contains("instance_logs"), "{err:?}");
}

#[tokio::test]
async fn unknown_instances_are_not_found_and_a_bad_key_is_rejected_without_the_key() {
    let w = world_with(|_| {}, |c| c.log_poll_interval_ms = 1).await;
    let lease = running(&w).await;
    let mut stranger = (*lease).clone();
    stranger.contract_id = "999".into();
    let err = w.client.request_logs(&stranger, 10).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::NotFound, "{err:?}");

    // A destroyed instance has no logs to hand out either.
    w.client.destroy_lease(&lease).await.expect("destroy");
    let err = w.client.instance_logs(&lease, 10).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::NotFound, "{err:?}");

    for style in [AuthStyle::Bearer, AuthStyle::QueryParam] {
        let wrong = w.second_client(|c| {
            c.api_key = vastai::ApiKey::new("vk-wrong-0000");
            c.auth_style = style;
        });
        let err = wrong.request_logs(&lease, 10).await.unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::Rejected, "{err:?}");
        assert!(!err.message.contains("vk-wrong-0000"), "{err:?}");
    }
}

#[tokio::test]
async fn the_result_url_is_served_without_a_key_and_holds_none() {
    let w = world_with(
        |_| {},
        |c| {
            c.log_poll_interval_ms = 1;
            c.auth_style = AuthStyle::QueryParam;
        },
    )
    .await;
    let lease = running(&w).await;
    let url = w.client.request_logs(&lease, 10).await.expect("request");
    assert!(!url.contains(KEY), "{url}");
    // A plain GET without any key: 404 first (not uploaded yet), then the log.
    let plain = reqwest::Client::new();
    assert_eq!(plain.get(&url).send().await.unwrap().status().as_u16(), 404);
    let body = plain.get(&url).send().await.unwrap();
    assert_eq!(body.status().as_u16(), 200);
    assert!(body.text().await.unwrap().contains("started"));
}
