//! The status classification table of `spec/vastai.md`, row by row: one
//! show-instance answer in, what drover makes of it out.

use serde_json::{Value, json};
use vastai::client::{FailureReason, Observation, SshRoute, classify};
use vastai::wire::InstanceView;

fn rows() -> Vec<(&'static str, Value)> {
    let direct = json!({"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "40022"}]});
    let run = |extra: Value| {
        let mut base = json!({"id": 1, "actual_status": "running", "intended_status": "running",
            "cur_state": "running", "next_state": "running", "public_ipaddr": "203.0.113.42"});
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    };
    vec![
        ("null while creating", run(json!({"actual_status": null}))),
        ("created", run(json!({"actual_status": "created"}))),
        (
            "loading",
            run(json!({"actual_status": "loading", "status_msg": "Pulling image"})),
        ),
        ("scheduling", run(json!({"actual_status": "scheduling"}))),
        ("restarting", run(json!({"actual_status": "restarting"}))),
        ("unknown", run(json!({"actual_status": "unknown"}))),
        ("running, no ssh yet", run(json!({"ports": null}))),
        (
            "running, direct + proxy",
            run(json!({"ports": direct, "ssh_host": "ssh5.vast.ai", "ssh_port": 10882})),
        ),
        (
            "running, proxy only (22/tcp null)",
            run(
                json!({"ports": {"22/tcp": null}, "ssh_host": "ssh5.vast.ai", "ssh_port": "10882"}),
            ),
        ),
        ("running, direct only", run(json!({"ports": direct}))),
        (
            "running, but intended stopped",
            run(json!({"intended_status": "stopped", "ports": direct})),
        ),
        (
            "pull: manifest not found",
            run(
                json!({"actual_status": "loading", "intended_status": "stopped",
            "status_msg": "Error response from daemon: manifest for vastai/test:self-test-cuda-99 not found"}),
            ),
        ),
        (
            "pull: access denied",
            run(json!({"actual_status": "created",
            "status_msg": "pull access denied for private/image, repository does not exist or may require authorization"})),
        ),
        (
            "pull: unauthorized",
            run(
                json!({"actual_status": "loading", "status_msg": "unauthorized: authentication required"}),
            ),
        ),
        (
            "oci runtime",
            run(
                json!({"actual_status": "created", "status_msg": "Error: container failed to start: OCI runtime create failed"}),
            ),
        ),
        (
            "loading, intended stopped, no message",
            run(json!({"actual_status": "loading", "intended_status": "stopped"})),
        ),
        (
            "exited",
            run(json!({"actual_status": "exited", "status_msg": "container exited with code 1"})),
        ),
        (
            "exited, port bind (double rent)",
            run(json!({"actual_status": "exited",
            "status_msg": "Bind for 0.0.0.0:40022 failed: port is already allocated"})),
        ),
        ("offline", run(json!({"actual_status": "offline"}))),
        (
            "outbid (bid)",
            run(
                json!({"actual_status": "stopped", "intended_status": "stopped", "cur_state": "stopped", "next_state": "stopped", "is_bid": true}),
            ),
        ),
        (
            "outbid, container still says running",
            run(
                json!({"intended_status": "stopped", "cur_state": "stopped", "next_state": "stopped", "is_bid": 1}),
            ),
        ),
        (
            "stopped on-demand (contract end)",
            run(
                json!({"actual_status": "stopped", "intended_status": "stopped", "cur_state": "stopped", "next_state": "stopped", "is_bid": false, "status_msg": "contract ended"}),
            ),
        ),
        ("stopped", run(json!({"actual_status": "stopped"}))),
        ("frozen", run(json!({"actual_status": "frozen"}))),
        (
            "a status added later",
            run(json!({"actual_status": "migrating"})),
        ),
    ]
}

fn show(observation: &Observation) -> String {
    match observation {
        Observation::Pending { detail } => format!("Pending  {detail}"),
        Observation::Ready(e) => format!("Ready    {}@{}:{}", e.user, e.host, e.port),
        Observation::Failed { reason, detail } => format!("Failed   {} ({detail})", reason.code()),
        Observation::Gone => "Gone".to_owned(),
    }
}

#[test]
fn classification_table() {
    let mut out = String::new();
    for (name, value) in rows() {
        let view = InstanceView::from_value(&value);
        let line = show(&classify(&view, SshRoute::PreferDirect, "root"));
        out.push_str(&format!("{name:<40} -> {line}\n"));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn routes_pick_the_documented_endpoint() {
    let value = json!({"actual_status": "running", "public_ipaddr": "203.0.113.42", "ssh_host": "ssh5.vast.ai", "ssh_port": 10882,
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": 40022}]}});
    let view = InstanceView::from_value(&value);
    let pick = |route| show(&classify(&view, route, "root"));
    assert_eq!(
        pick(SshRoute::PreferDirect),
        "Ready    root@203.0.113.42:40022"
    );
    assert_eq!(
        pick(SshRoute::PreferProxy),
        "Ready    root@ssh5.vast.ai:10882"
    );
    assert_eq!(
        pick(SshRoute::ProxyOnly),
        "Ready    root@ssh5.vast.ai:10882"
    );
    assert_eq!(
        pick(SshRoute::DirectOnly),
        "Ready    root@203.0.113.42:40022"
    );
}

#[test]
fn failure_reasons_round_trip_through_the_port_text() {
    for reason in FailureReason::ALL {
        let status = Observation::Failed {
            reason,
            detail: "x: y".to_owned(),
        }
        .into_endpoint_status();
        let core_fsm::port::EndpointStatus::Failed { reason: text } = status else {
            panic!()
        };
        assert_eq!(FailureReason::from_reason_text(&text), Some(reason));
    }
}
