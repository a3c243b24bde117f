//! The `/_fake/...` control endpoints (scenario rules, the manual clock,
//! what the fake knows about its instances) and [`instance_infos`].

use super::routes::json_reply;
use super::scenario::Rule;
use super::{InstanceInfo, Shared};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;

type St = State<Arc<Shared>>;

/// Every instance, destroyed ones included.
pub(crate) fn instance_infos(shared: &Shared) -> Vec<InstanceInfo> {
    let now = shared.now_ms();
    let inner = shared.lock();
    inner
        .instances
        .values()
        .map(|i| {
            let status = i.status(now, &shared.config.timings);
            InstanceInfo {
                id: i.id,
                offer_id: i.offer.id,
                label: i.label.clone(),
                destroyed: i.destroyed,
                actual_status: status.as_ref().and_then(|s| s.actual.map(str::to_owned)),
                visible: status.is_some(),
                authorized_keys: i.authorized_keys.clone(),
                env: i.extra_env.clone(),
                onstart: i.onstart.clone(),
                scenario: i.scenario.clone(),
            }
        })
        .collect()
}

pub(crate) async fn add_rule(State(shared): St, body: Bytes) -> Response {
    match serde_json::from_slice::<Rule>(&body) {
        Ok(rule) => {
            shared.lock().rules.push(rule);
            json_reply(StatusCode::OK, json!({"ok": true}))
        }
        Err(e) => json_reply(
            StatusCode::BAD_REQUEST,
            json!({"ok": false, "msg": e.to_string()}),
        ),
    }
}

pub(crate) async fn clear_rules(State(shared): St) -> Response {
    shared.lock().rules.clear();
    json_reply(StatusCode::OK, json!({"ok": true}))
}

pub(crate) async fn clock(State(shared): St, body: Bytes) -> Response {
    let advance = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|b| b.get("advance_ms").and_then(Value::as_u64));
    match (shared.config.clock, advance) {
        (super::ClockMode::Manual, Some(ms)) => {
            shared.advance_manual(ms);
            json_reply(StatusCode::OK, json!({"now_ms": shared.now_ms()}))
        }
        _ => json_reply(
            StatusCode::BAD_REQUEST,
            json!({"ok": false, "msg": "needs a manual clock and {\"advance_ms\": N}"}),
        ),
    }
}

pub(crate) async fn instances(State(shared): St) -> Response {
    json_reply(StatusCode::OK, json!(instance_infos(&shared)))
}
