//! Client policies against the fake over real HTTP: lists fail loudly and
//! walk every page, offers rank deterministically, the API key never leaks,
//! and the fake's switches work over HTTP.

mod common;

use common::*;
use core_fsm::ids::{LogicalNodeId, RunId};
use core_fsm::port::{EndpointStatus, ProviderErrorKind};
use serde_json::json;
use vastai::client::AuthStyle;
use vastai::fake::{OfferSpec, Rule, Scenario, default_catalog};
use vastai::limits::Endpoint;

/// `count` RTX 4090 offers, so one client can hold many leases.
fn many_offers(count: u64) -> Vec<OfferSpec> {
    let template = default_catalog()[0].clone();
    (0..count)
        .map(|n| OfferSpec {
            id: 30_000_000 + n,
            machine_id: 50_000 + n,
            dph_base: 0.30 + n as f64 / 1000.0,
            ..template.clone()
        })
        .collect()
}

#[tokio::test]
async fn list_walks_every_page_and_keeps_only_the_runs_labels() {
    let w = world_with(|f| f.offers = many_offers(40), |_| {}).await;
    for n in 0..30 {
        w.create(&format!("workers-{n}"), n).await.expect("create");
    }
    let mut other_run = request("workers-0", 99);
    other_run.run_id = RunId(2);
    w.client.create_lease(&other_run).await.expect("other run");
    let leases = w.client.list_leases(RunId(1)).await.expect("list");
    assert_eq!(leases.len(), 30);
    assert!(
        w.fake.requests(Endpoint::ListInstances) >= 2,
        "two pages of 25"
    );
    let nodes: std::collections::BTreeSet<String> =
        leases.iter().map(|l| l.metadata["node"].clone()).collect();
    assert_eq!(nodes.len(), 30);
    assert!(
        leases
            .iter()
            .all(|l| l.lease_id.as_str() == format!("vastai:{}", l.contract_id))
    );
}

#[tokio::test]
async fn a_failed_list_is_an_error_never_an_empty_fleet() {
    let w = world_with(|f| f.offers = many_offers(30), |_| {}).await;
    for n in 0..26 {
        w.create(&format!("workers-{n}"), n).await.expect("create");
    }
    // The second page fails for longer than the retry bound: the whole list fails.
    w.rule(
        Rule::always(Scenario::F21ServerError { status: Some(503) })
            .on(Endpoint::ListInstances)
            .after(1)
            .times(5),
    );
    let err = w.client.list_leases(RunId(1)).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient, "{err:?}");
    // The first page fails: same.
    w.rule(
        Rule::always(Scenario::F21ServerError { status: Some(502) })
            .on(Endpoint::ListInstances)
            .times(5),
    );
    assert!(w.client.list_leases(RunId(1)).await.is_err());
    // Once healthy, the list is whole.
    assert_eq!(w.client.list_leases(RunId(1)).await.unwrap().len(), 26);
}

#[tokio::test]
async fn offers_rank_by_price_then_reliability_and_plan_bounds_the_cost() {
    let w = world().await;
    let plan = w.client.plan_offers(&shape(), 2).await.expect("plan");
    let ids: Vec<u64> = plan.chosen.iter().map(|o| o.id).collect();
    // Verified RTX 4090s with >= 200 Mbit/s down: 0.30, 0.32, 0.35 $/h (plus storage).
    assert_eq!(ids, vec![18_422_312, 18_422_311]);
    assert_eq!(plan.candidates, 3);
    assert_eq!(plan.shortfall, 0);
    // Worst case: both nodes on the dearest candidate (0.35 + 20 GB storage).
    assert_eq!(plan.worst_case_cents_per_hour, 71);
    let again = w.client.plan_offers(&shape(), 2).await.unwrap();
    assert_eq!(again, plan, "deterministic");
    let mut capped = shape();
    capped.max_price_cents_per_hour = Some(31);
    let plan = w.client.plan_offers(&capped, 3).await.unwrap();
    assert_eq!(plan.chosen.len(), 1);
    assert_eq!((plan.shortfall, plan.worst_case_cents_per_hour), (2, 93));
    // Excluded hosts are skipped.
    let mut excluded = request("workers-0", 1);
    excluded.excluded_hosts = vec!["41312".to_owned()];
    let granted = w.client.create_lease(&excluded).await.unwrap();
    assert_eq!(granted.lease.offer_id.as_deref(), Some("18422311"));
    assert_eq!(granted.lease.host_id.as_deref(), Some("41311"));
}

#[tokio::test]
async fn no_fitting_offer_is_rejected() {
    let w = world().await;
    let mut req = request("workers-0", 1);
    std::sync::Arc::make_mut(&mut req.shape).gpu_name = Some("H200".to_owned());
    let err = w.client.create_lease(&req).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Rejected, "{err:?}");
    assert_eq!(w.fake.instances().len(), 0);
}

#[tokio::test]
async fn a_create_that_never_connected_is_transient_not_ambiguous() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let client = vastai::VastClient::new(client_config(&format!("http://{addr}"))).unwrap();
    let err = client
        .create_lease(&request("workers-0", 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient, "{err:?}");
}

#[tokio::test]
async fn the_api_key_never_appears_in_errors_or_debug_output() {
    let mut seen = Vec::new();
    for style in [AuthStyle::Bearer, AuthStyle::QueryParam] {
        let w = world_with(
            |_| {},
            |c| {
                c.auth_style = style;
                c.request_timeout_ms = 200;
            },
        )
        .await;
        let lease = w
            .create("workers-0", 1)
            .await
            .expect("create works in both auth styles")
            .lease;
        seen.push(format!("{lease:?} {:?} {:?}", w.client, w.client.config()));
        w.rule(Rule::always(Scenario::F21ServerError { status: None }));
        seen.push(format!(
            "{:?}",
            w.client.lookup_endpoint(&lease).await.unwrap_err()
        ));
        seen.push(format!(
            "{:?}",
            w.client.list_leases(RunId(1)).await.unwrap_err()
        ));
        seen.push(format!(
            "{:?}",
            w.client.destroy_lease(&lease).await.unwrap_err()
        ));
        seen.push(format!("{:?}", w.create("workers-1", 2).await.unwrap_err()));
        w.fake.clear_rules();
        w.rule(Rule::always(Scenario::F15RateLimitStorm));
        seen.push(format!(
            "{:?}",
            w.client.plan_offers(&shape(), 1).await.unwrap_err()
        ));
        w.fake.clear_rules();
        w.rule(Rule::always(Scenario::F05CreateLost {
            cut: false,
            hold_ms: None,
        }));
        seen.push(format!("{:?}", w.create("workers-2", 3).await.unwrap_err()));
        seen.push(format!("{:?}", w.fake.instances()));
        seen.push(format!("{:?}", w.backend.log()));
        let closed = w.second_client(|c| {
            c.auth_style = style;
            c.base_url = "http://127.0.0.1:9".to_owned();
        });
        seen.push(format!(
            "{:?}",
            closed.lookup_endpoint(&lease).await.unwrap_err()
        ));
    }
    let all = seen.join("\n");
    assert!(
        all.contains("Ambiguous") && all.contains("Transient"),
        "the errors were produced"
    );
    assert!(!all.contains(KEY), "API key leaked:\n{all}");
}

#[tokio::test]
async fn an_env_switch_from_provider_labels_picks_a_scenario_per_instance() {
    let w = world().await;
    let mut req = request("workers-0", 1);
    std::sync::Arc::make_mut(&mut req.shape)
        .provider_labels
        .insert("fake_scenario".to_owned(), "f10_oci_failure".to_owned());
    let bad = w.client.create_lease(&req).await.unwrap().lease;
    let good = w.create("workers-1", 2).await.unwrap().lease;
    w.fake.advance(5_000);
    assert_eq!(
        failed_code(&w.client.lookup_endpoint(&bad).await.unwrap()),
        "oci_runtime"
    );
    assert!(matches!(
        w.client.lookup_endpoint(&good).await.unwrap(),
        EndpointStatus::Ready(_)
    ));
}

#[tokio::test]
async fn control_endpoints_switch_scenarios_and_move_the_clock_over_http() {
    let w = world().await;
    vastai::client::install_crypto_provider();
    let http = reqwest::Client::new();
    let base = w.fake.base_url();
    let rule = json!({"scenario": {"kind": "f12_offline", "after_ms": 0}, "when": {"label_contains": "workers-7"}, "times": 1});
    let answer = http
        .post(format!("{base}/_fake/scenario"))
        .json(&rule)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let lease = w.create("workers-7", 1).await.unwrap().lease;
    let other = w.create("workers-8", 2).await.unwrap().lease;
    let clock = http
        .post(format!("{base}/_fake/clock"))
        .json(&json!({"advance_ms": 5000}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        clock.json::<serde_json::Value>().await.unwrap()["now_ms"],
        5000
    );
    assert_eq!(
        failed_code(&w.client.lookup_endpoint(&lease).await.unwrap()),
        "offline"
    );
    assert!(matches!(
        w.client.lookup_endpoint(&other).await.unwrap(),
        EndpointStatus::Ready(_)
    ));
    let listed: serde_json::Value = http
        .get(format!("{base}/_fake/instances"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let node = LogicalNodeId::from("workers-8");
    assert!(
        w.client
            .find_lease(RunId(1), &node, core_fsm::ids::Nonce(2))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn the_fake_speaks_the_documented_shapes() {
    let w = world().await;
    vastai::client::install_crypto_provider();
    let http = reqwest::Client::new();
    let base = w.fake.base_url();
    // Search works without a key (gpuhunt does this) and refuses bad JSON.
    let offers: serde_json::Value = http
        .post(format!("{base}/api/v0/bundles/"))
        .json(&json!({"gpu_name": {"eq": "H100 SXM"}, "type": "ondemand"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(offers["offers"][0]["compute_cap"], 900);
    let bad = http
        .post(format!("{base}/api/v0/bundles/"))
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    // No key: 401; unknown offer: 404 no_such_ask; unknown instance: {"instances": null}.
    let create = |ask: u64| http.put(format!("{base}/api/v0/asks/{ask}/"));
    let with_query = |path: &str, key: &str, value: &str| {
        let mut url = reqwest::Url::parse(&format!("{base}{path}")).unwrap();
        url.query_pairs_mut().append_pair(key, value);
        url
    };
    assert_eq!(
        create(18_422_311)
            .json(&json!({"image": "x"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    let gone = create(1)
        .bearer_auth(KEY)
        .json(&json!({"image": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status().as_u16(), 404);
    assert!(gone.text().await.unwrap().contains("no_such_ask"));
    // The CLI's legacy runtype and the OpenAPI's env string are accepted.
    let made: serde_json::Value = http
        .put(with_query("/api/v0/asks/18422311/", "api_key", KEY))
        .json(&json!({"image": "x", "runtype": "ssh_direc ssh_proxy", "env": "-e A=1 -p 7447:7447/udp", "disk": 10, "label": "someone-else"}))
        .send().await.unwrap().json().await.unwrap();
    let id = made["new_contract"].as_u64().unwrap();
    let shown: serde_json::Value = http
        .get(format!("{base}/api/v0/instances/{id}/"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        shown["instances"]["extra_env"],
        json!([["A", "1"], ["-p 7447:7447/udp", "1"]])
    );
    assert_eq!(shown["instances"]["actual_status"], serde_json::Value::Null);
    let none: serde_json::Value = http
        .get(format!("{base}/api/v0/instances/5/"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(none, json!({"instances": null}));
    // Too-small disk is invalid_args; a computed column filter is refused.
    let small = create(18_422_311)
        .bearer_auth(KEY)
        .json(&json!({"image": "x", "disk": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(small.status().as_u16(), 400);
    let computed = http
        .get(with_query(
            "/api/v1/instances/",
            "select_filters",
            &json!({"dph_total": {"lte": 1}}).to_string(),
        ))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(computed.status().as_u16(), 400);
    // A foreign label is never adopted.
    assert!(w.client.list_leases(RunId(1)).await.unwrap().is_empty());
}
