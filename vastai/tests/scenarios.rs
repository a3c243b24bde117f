//! Every scenario of §A.12 (F1-F21), through the real client against the
//! fake over real HTTP on 127.0.0.1. Lifecycles move by the fake's manual
//! clock; no test sleeps.

mod common;

use common::*;
use core_fsm::ids::{LogicalNodeId, Nonce, RunId};
use core_fsm::port::{EndpointStatus, ProviderErrorKind, SshEndpoint};
use vastai::fake::{Rule, Scenario, When};
use vastai::limits::{Endpoint, RateLimits};

fn ready(host: &str, port: u16) -> EndpointStatus {
    EndpointStatus::Ready(SshEndpoint {
        host: host.into(),
        port,
        user: "root".into(),
    })
}

fn pending_detail(status: &EndpointStatus) -> String {
    match status {
        EndpointStatus::Pending { detail } => detail.clone(),
        other => panic!("expected Pending, got {other:?}"),
    }
}

#[tokio::test]
async fn f01_happy_path_walks_null_created_loading_running() {
    let w = world().await;
    let granted = w.create("workers-0", 1).await.expect("create");
    assert_eq!(
        granted.lease.offer_id.as_deref(),
        Some("18422312"),
        "cheapest fitting offer"
    );
    let lease = granted.lease;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(pending_detail(
            &w.client.lookup_endpoint(&lease).await.unwrap(),
        ));
        w.fake.advance(1_000);
    }
    assert_eq!(seen[0], "creating");
    assert_eq!(seen[1], "created");
    assert!(seen[2].starts_with("loading"), "{seen:?}");
    w.fake.advance(3_000);
    assert_eq!(
        w.client.lookup_endpoint(&lease).await.unwrap(),
        ready("203.0.113.42", 40022)
    );
    // What reached the host: drover's public key via onstart, the nonce in the label, no API key.
    let instance = &w.fake.instances()[0];
    assert_eq!(instance.label, "drover:run-1:workers-0:nonce-1");
    assert!(instance.onstart.contains(PUBKEY));
    let started = &w.backend.log().started[0];
    assert_eq!(started.authorized_keys, vec![PUBKEY.to_owned()]);
    let everything = format!("{instance:?} {started:?}");
    assert!(!everything.contains(KEY), "the API key reached a host");
}

#[tokio::test]
async fn f02_offer_gone_falls_back_to_the_next_offer_then_gives_up() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F02OfferGone { status_410: false }).times(1));
    let granted = w.create("workers-0", 1).await.expect("second offer");
    assert_eq!(granted.lease.offer_id.as_deref(), Some("18422311"));
    assert_eq!(w.fake.instances().len(), 1);
    // Every offer gone (404 and 410 shapes): a bounded number of tries, nothing created.
    w.rule(Rule::always(Scenario::F02OfferGone { status_410: true }).times(1));
    w.rule(Rule::always(Scenario::F02OfferGone { status_410: false }));
    let err = w.create("workers-1", 2).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient, "{err:?}");
    assert!(err.message.contains("no_such_ask"), "{}", err.message);
    assert_eq!(w.fake.instances().len(), 1);
}

#[tokio::test]
async fn f03_double_rent_loser_exits_with_a_port_bind_message() {
    let w = world_with(|f| f.offers.truncate(1), |_| {}).await;
    let mut shape_fits_one = request("workers-0", 1);
    std::sync::Arc::make_mut(&mut shape_fits_one.shape).min_down_mbps = None;
    let first = w.client.create_lease(&shape_fits_one).await.expect("first");
    // The same client never rents an offer twice ...
    shape_fits_one.nonce = Nonce(2);
    let err = w.client.create_lease(&shape_fits_one).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient, "{err:?}");
    // ... but another orchestrator (or user) does, and Vast.ai accepts both.
    let other = w.second_client(|_| {});
    shape_fits_one.nonce = Nonce(3);
    let second = other.create_lease(&shape_fits_one).await.expect("second");
    assert_eq!(first.lease.offer_id, second.lease.offer_id);
    w.fake.advance(5_000);
    assert_eq!(
        w.client.lookup_endpoint(&first.lease).await.unwrap(),
        ready("203.0.113.42", 40022)
    );
    let lost = other.lookup_endpoint(&second.lease).await.unwrap();
    assert_eq!(failed_code(&lost), "exited");
    assert!(format!("{lost:?}").contains("port is already allocated"));
}

#[tokio::test]
async fn f04_create_invisible_reads_pending_then_ready_never_gone() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F04CreateInvisible { delay_ms: 30_000 }).times(1));
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    assert_eq!(
        pending_detail(&w.client.lookup_endpoint(&lease).await.unwrap()),
        "created, not visible yet"
    );
    // The resolver reads a bounded number of times and honestly finds nothing yet.
    let node = LogicalNodeId::from("workers-0");
    assert_eq!(
        w.client
            .find_lease(RunId(1), &node, Nonce(1))
            .await
            .unwrap(),
        None
    );
    assert!(w.client.list_leases(RunId(1)).await.unwrap().is_empty());
    w.fake.advance(30_000);
    assert_eq!(
        w.client.lookup_endpoint(&lease).await.unwrap(),
        ready("203.0.113.42", 40022)
    );
    let found = w
        .client
        .find_lease(RunId(1), &node, Nonce(1))
        .await
        .unwrap()
        .expect("visible now");
    assert_eq!(found.contract_id, lease.contract_id);
    // Without the grace (a client that did not create it), null means gone.
    w.rule(Rule::always(Scenario::F04CreateInvisible { delay_ms: 30_000 }).times(1));
    let hidden = w.create("workers-1", 2).await.unwrap().lease;
    let stranger = w.second_client(|c| c.visibility_grace_ms = 0);
    assert_eq!(
        stranger.lookup_endpoint(&hidden).await.unwrap(),
        EndpointStatus::Gone
    );
}

#[tokio::test]
async fn f05_lost_create_is_ambiguous_and_resolved_by_label_never_twice() {
    let w = world_with(|_| {}, |c| c.request_timeout_ms = 300).await;
    w.rule(
        Rule::always(Scenario::F05CreateLost {
            cut: false,
            hold_ms: None,
        })
        .times(1),
    );
    let err = w.create("workers-0", 1).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Ambiguous, "{err:?}");
    assert_eq!(
        w.fake.requests(Endpoint::Create),
        1,
        "a create is never re-sent"
    );
    let node = LogicalNodeId::from("workers-0");
    let found = w
        .client
        .find_lease(RunId(1), &node, Nonce(1))
        .await
        .unwrap()
        .expect("adopted by label");
    assert_eq!(w.fake.instances().len(), 1);
    w.fake.advance(5_000);
    assert_eq!(
        w.client.lookup_endpoint(&found).await.unwrap(),
        ready("203.0.113.42", 40022)
    );
}

#[tokio::test]
async fn f05_cut_answer_is_ambiguous_at_once_and_resolved_by_label_never_twice() {
    // The client's production timeout: a cut answer must end the create by
    // itself (the connection breaks), not by the client giving up on it.
    let w = world_with(|_| {}, |c| c.request_timeout_ms = 60_000).await;
    w.rule(
        Rule::always(Scenario::F05CreateLost {
            cut: true,
            hold_ms: None,
        })
        .times(1),
    );
    let create = w.create("workers-0", 1);
    let err = tokio::time::timeout(std::time::Duration::from_secs(20), create)
        .await
        .expect("a cut answer is seen when it breaks, not waited out")
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Ambiguous, "{err:?}");
    assert!(
        err.message.contains("status 200, body lost"),
        "the headers arrived, the body broke: {err:?}"
    );
    assert_eq!(
        w.fake.requests(Endpoint::Create),
        1,
        "a create is never re-sent"
    );
    assert_eq!(w.fake.instances().len(), 1);
    let node = LogicalNodeId::from("workers-0");
    let found = w
        .client
        .find_lease(RunId(1), &node, Nonce(1))
        .await
        .unwrap()
        .expect("adopted by label");
    assert_eq!(found.contract_id, w.fake.instances()[0].id.to_string());
    // The next intent is answered in full: one instance per intent.
    w.create("workers-1", 2).await.unwrap();
    assert_eq!(w.fake.requests(Endpoint::Create), 2);
    assert_eq!(w.fake.instances().len(), 2, "one instance per intent");
}

#[tokio::test]
async fn f06_stuck_loading_stays_pending_for_hours() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F06StuckLoading));
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    for _ in 0..10 {
        w.fake.advance(3_600_000);
        let detail = pending_detail(&w.client.lookup_endpoint(&lease).await.unwrap());
        assert!(detail.starts_with("loading"), "{detail}");
    }
}

#[tokio::test]
async fn f07_ssh_endpoint_appears_late() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F07SshLate { delay_ms: 12_000 }));
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    w.fake.advance(5_000);
    let detail = pending_detail(&w.client.lookup_endpoint(&lease).await.unwrap());
    assert!(
        detail.starts_with("running, SSH endpoint not published yet"),
        "{detail}"
    );
    w.fake.advance(12_000);
    assert_eq!(
        w.client.lookup_endpoint(&lease).await.unwrap(),
        ready("203.0.113.42", 40022)
    );
}

#[tokio::test]
async fn f08_missing_direct_port_falls_back_to_the_proxy() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F08NoDirectPort));
    // Two instances: the fake drops `22/tcp` in both shapes (key missing, null).
    let a = w.create("workers-0", 1).await.unwrap().lease;
    let b = w.create("workers-1", 2).await.unwrap().lease;
    w.fake.advance(5_000);
    for lease in [&a, &b] {
        assert_eq!(
            w.client.lookup_endpoint(lease).await.unwrap(),
            ready("ssh5.vast.ai", 10882)
        );
    }
}

#[tokio::test]
async fn f09_image_pull_failures_are_failed_image_pull() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F09ImagePullFailure));
    let mut leases = Vec::new();
    for n in 0..3 {
        leases.push(w.create(&format!("workers-{n}"), n).await.unwrap().lease);
    }
    w.fake.advance(2_000);
    for lease in &leases {
        let status = w.client.lookup_endpoint(lease).await.unwrap();
        assert_eq!(failed_code(&status), "image_pull", "{status:?}");
    }
}

#[tokio::test]
async fn f10_oci_runtime_failure() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F10OciFailure));
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    let status = w.settle(&lease, 1_000, 10).await;
    assert_eq!(failed_code(&status), "oci_runtime", "{status:?}");
}

#[tokio::test]
async fn f11_exited_after_running_and_its_machine_is_stopped() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F11Exited { after_ms: 60_000 }));
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    assert!(matches!(
        w.settle(&lease, 1_000, 10).await,
        EndpointStatus::Ready(_)
    ));
    w.fake.advance(60_000);
    let status = w.client.lookup_endpoint(&lease).await.unwrap();
    assert_eq!(failed_code(&status), "exited");
    let id: u64 = lease.contract_id.parse().unwrap();
    assert_eq!(w.backend.log().stopped, vec![id]);
}

#[tokio::test]
async fn f12_host_offline() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F12Offline { after_ms: 3_000 }));
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    let status = w.settle(&lease, 1_000, 10).await;
    assert_eq!(failed_code(&status), "offline", "{status:?}");
}

#[tokio::test]
async fn f13_outbid_interruptible_is_failed_outbid() {
    let w = world_with(|_| {}, |c| c.bid_cents_per_hour = Some(20)).await;
    w.rule(Rule::always(Scenario::F13Outbid { after_ms: 600_000 }));
    let granted = w.create("workers-0", 1).await.unwrap();
    assert_eq!(granted.lease.metadata["dollars_per_hour"], "0.2000");
    assert!(matches!(
        w.settle(&granted.lease, 1_000, 10).await,
        EndpointStatus::Ready(_)
    ));
    w.fake.advance(600_000);
    let status = w.client.lookup_endpoint(&granted.lease).await.unwrap();
    assert_eq!(failed_code(&status), "outbid", "{status:?}");
}

#[tokio::test]
async fn f14_insufficient_bid_error_carries_a_contract_that_is_destroyed() {
    let w = world_with(|_| {}, |c| c.bid_cents_per_hour = Some(20)).await;
    w.rule(Rule::always(Scenario::F14InsufficientBid).times(1));
    let err = w.create("workers-0", 1).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Rejected, "{err:?}");
    assert!(
        err.message.starts_with("insufficient_bid"),
        "{}",
        err.message
    );
    let instances = w.fake.instances();
    assert_eq!(instances.len(), 1);
    assert!(
        instances[0].destroyed,
        "the stray stopped instance is destroyed"
    );
    // When that destroy fails too, the create is ambiguous and the label finds it.
    w.rule(Rule::always(Scenario::F14InsufficientBid).times(1));
    w.rule(
        Rule::always(Scenario::F21ServerError { status: Some(503) })
            .on(Endpoint::Destroy)
            .times(5),
    );
    let err = w.create("workers-1", 2).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Ambiguous, "{err:?}");
    let node = LogicalNodeId::from("workers-1");
    let stray = w
        .client
        .find_lease(RunId(1), &node, Nonce(2))
        .await
        .unwrap()
        .expect("found");
    assert_eq!(
        failed_code(&w.client.lookup_endpoint(&stray).await.unwrap()),
        "outbid"
    );
    w.client.destroy_lease(&stray).await.expect("destroyed");
}

#[tokio::test]
async fn f15_rate_limit_storms_are_survived_within_the_retry_bound() {
    // The fake enforces the documented thresholds (1 unit = 200 ms, so show
    // instance allows one request per 400 ms: back-to-back lookups are
    // rejected however slow the machine); this client does not pace, and
    // its retries outlast one interval.
    let w = world_with(
        |f| f.rate_limits = RateLimits::documented(200),
        |c| {
            c.retry.attempts_max = 10;
            c.retry.backoff_base_ms = 50;
            c.retry.backoff_max_ms = 200;
        },
    )
    .await;
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    for _ in 0..6 {
        w.client.lookup_endpoint(&lease).await.expect("survived");
    }
    assert!(w.client.stats().rate_limited > 0, "{:?}", w.client.stats());
    // An explicit storm in all four body shapes, shorter than the bound.
    let before = w.client.stats().rate_limited;
    w.rule(
        Rule::always(Scenario::F15RateLimitStorm)
            .on(Endpoint::ShowInstance)
            .times(6),
    );
    w.client
        .lookup_endpoint(&lease)
        .await
        .expect("survived the storm");
    assert!(w.client.stats().rate_limited >= before + 6);
    // A storm longer than the bound is a transient error, not a wrong answer.
    w.rule(
        Rule::always(Scenario::F15RateLimitStorm)
            .on(Endpoint::ShowInstance)
            .times(50),
    );
    let err = w.client.lookup_endpoint(&lease).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert!(
        err.message.contains("429") && err.message.contains("too frequent"),
        "{}",
        err.message
    );
    // A client that paces itself by the thresholds (with a wide margin over
    // the server's: 50 ms against 4 ms for show instance, so a request held
    // up in flight cannot close the gap) sees no 429 at all.
    let p = world_with(
        |f| f.rate_limits = RateLimits::documented(2),
        |c| c.rate_limits = RateLimits::documented(25),
    )
    .await;
    let lease = p.create("workers-0", 1).await.unwrap().lease;
    for _ in 0..4 {
        p.client.lookup_endpoint(&lease).await.expect("paced");
    }
    assert_eq!(p.client.stats().rate_limited, 0, "{:?}", p.client.stats());
}

#[tokio::test]
async fn f16_v0_list_is_deprecated_and_the_client_lists_with_v1() {
    let w = world().await;
    w.create("workers-0", 1).await.unwrap();
    vastai::client::install_crypto_provider();
    let answer = reqwest::Client::new()
        .get(format!("{}/api/v0/instances/", w.fake.base_url()))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 410);
    assert!(answer.text().await.unwrap().contains("deprecated_endpoint"));
    let leases = w.client.list_leases(RunId(1)).await.expect("v1 list");
    assert_eq!(leases.len(), 1);
}

#[tokio::test]
async fn f17_bad_key_answers_404_and_is_rejected_never_gone() {
    let w = world().await;
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    let wrong = w.second_client(|c| c.api_key = vastai::ApiKey::new("vk-wrong-0000"));
    let lookup = wrong.lookup_endpoint(&lease).await.unwrap_err();
    let destroy = wrong.destroy_lease(&lease).await.unwrap_err();
    let list = wrong.list_leases(RunId(1)).await.unwrap_err();
    let create = wrong
        .create_lease(&request("workers-1", 2))
        .await
        .unwrap_err();
    for err in [&lookup, &destroy, &list, &create] {
        assert_eq!(err.kind, ProviderErrorKind::Rejected, "{err:?}");
        assert!(
            err.message.contains("API key is wrong or revoked"),
            "{}",
            err.message
        );
        assert!(!err.message.contains("vk-wrong-0000"));
    }
    assert!(!w.fake.instances()[0].destroyed);
}

#[tokio::test]
async fn f18_destroying_a_gone_instance_succeeds() {
    let w = world().await;
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    w.client.destroy_lease(&lease).await.expect("destroy");
    w.client
        .destroy_lease(&lease)
        .await
        .expect("destroy again: 404 is done");
    assert_eq!(
        w.client.lookup_endpoint(&lease).await.unwrap(),
        EndpointStatus::Gone
    );
    // Both 404 spellings (`no_such_instance`, `not_found`).
    for id in ["4", "5"] {
        let mut unknown = (*lease).clone();
        unknown.contract_id = id.to_owned();
        w.client
            .destroy_lease(&unknown)
            .await
            .expect("unknown id is destroyed");
    }
    assert_eq!(w.backend.log().stopped.len(), 1);
}

#[tokio::test]
async fn f19_contract_expiry_stops_then_deletes() {
    let w = world().await;
    w.rule(Rule::always(Scenario::F19ContractExpiry {
        after_ms: 3_600_000,
        delete_after_ms: 7_200_000,
    }));
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    assert!(matches!(
        w.settle(&lease, 1_000, 10).await,
        EndpointStatus::Ready(_)
    ));
    w.fake.advance(3_600_000);
    assert_eq!(
        failed_code(&w.client.lookup_endpoint(&lease).await.unwrap()),
        "stopped"
    );
    w.fake.advance(7_200_000);
    let stranger = w.second_client(|c| c.visibility_grace_ms = 0);
    assert_eq!(
        stranger.lookup_endpoint(&lease).await.unwrap(),
        EndpointStatus::Gone
    );
    w.client
        .destroy_lease(&lease)
        .await
        .expect("already gone is destroyed");
}

#[tokio::test]
async fn f20_account_key_added_later_never_reaches_existing_instances() {
    let w = world().await;
    let first = w.create("workers-0", 1).await.unwrap().lease;
    let account_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAccountKey me@laptop";
    w.fake.add_account_key(account_key);
    let second = w.create("workers-1", 2).await.unwrap().lease;
    let keys = |lease: &core_fsm::port::LeaseFacts| {
        let id: u64 = lease.contract_id.parse().unwrap();
        w.fake
            .instances()
            .into_iter()
            .find(|i| i.id == id)
            .unwrap()
            .authorized_keys
    };
    assert_eq!(
        keys(&first),
        vec![PUBKEY.to_owned()],
        "drover's own key arrived via onstart"
    );
    assert_eq!(
        keys(&second),
        vec![account_key.to_owned(), PUBKEY.to_owned()]
    );
    // The toggle (the OpenAPI's reading) reaches existing instances too.
    let t = world_with(|f| f.account_keys_reach_existing = true, |_| {}).await;
    let lease = t.create("workers-0", 1).await.unwrap().lease;
    t.fake.add_account_key(account_key);
    let id: u64 = lease.contract_id.parse().unwrap();
    assert!(
        t.fake.instances()[0]
            .authorized_keys
            .contains(&account_key.to_owned())
    );
    assert_eq!(
        t.backend.log().keys_added,
        vec![(id, account_key.to_owned())]
    );
}

#[tokio::test]
async fn f21_server_error_blips_are_retried_and_a_create_blip_is_ambiguous() {
    let w = world().await;
    let lease = w.create("workers-0", 1).await.unwrap().lease;
    w.rule(
        Rule::always(Scenario::F21ServerError { status: None })
            .on(Endpoint::ShowInstance)
            .times(3),
    );
    w.client
        .lookup_endpoint(&lease)
        .await
        .expect("retried through");
    assert_eq!(w.client.stats().server_errors, 3);
    w.rule(
        Rule::always(Scenario::F21ServerError { status: Some(502) })
            .on(Endpoint::Create)
            .times(1),
    );
    let err = w.create("workers-1", 2).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Ambiguous, "{err:?}");
    // The blip came before the create took effect: nothing is found, so a new create is safe.
    let node = LogicalNodeId::from("workers-1");
    assert_eq!(
        w.client
            .find_lease(RunId(1), &node, Nonce(2))
            .await
            .unwrap(),
        None
    );
    w.create("workers-1", 3)
        .await
        .expect("created on the next intent");
    assert_eq!(w.fake.instances().len(), 2);
    // A rate of blips, seeded: everything still gets through.
    w.rule(
        Rule::always(Scenario::F21ServerError { status: None }).when(When::Rate {
            numerator: 1,
            denominator: 3,
        }),
    );
    for _ in 0..10 {
        w.client
            .lookup_endpoint(&lease)
            .await
            .expect("through blips");
    }
}
