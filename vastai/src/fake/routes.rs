//! The fake's HTTP surface: the gate every API request passes (request-level
//! scenarios, auth, rate limits), search, show, destroy, manage, and the
//! `/_fake/...` control endpoints. Creates are in `create.rs`, lists and SSH
//! keys in `listing.rs`.

use super::catalog;
use super::scenario::{Rule, Scenario};
use super::state::fire;
use super::{InstanceInfo, Shared, create, listing};
use crate::limits::Endpoint;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Query parameters, raw.
pub(crate) type QueryMap = BTreeMap<String, String>;

type St = State<Arc<Shared>>;

/// The fake's routes (with and without the trailing slash clients send).
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let both = |router: Router<Arc<Shared>>,
                path: &str,
                route: axum::routing::MethodRouter<Arc<Shared>>| {
        router
            .route(path, route.clone())
            .route(&format!("{path}/"), route)
    };
    let mut app = Router::new();
    app = both(app, "/api/v0/bundles", post(search));
    app = both(app, "/api/v0/search/asks", put(search_new));
    app = both(app, "/api/v0/asks/{id}", put(create::create));
    app = both(
        app,
        "/api/v0/instances",
        get(listing::v0_list).delete(listing::bulk_destroy),
    );
    app = both(
        app,
        "/api/v0/instances/{id}",
        get(show).delete(destroy).put(manage),
    );
    app = both(app, "/api/v0/instances/{id}/ssh", post(listing::attach_key));
    app = both(app, "/api/v1/instances", get(listing::v1_list));
    app = both(
        app,
        "/api/v0/ssh",
        get(listing::list_keys).post(listing::create_key),
    );
    app = both(
        app,
        "/api/v0/ssh/{id}",
        axum::routing::delete(listing::delete_key),
    );
    app = app
        .route(
            "/_fake/scenario",
            post(control_add_rule).delete(control_clear_rules),
        )
        .route("/_fake/clock", post(control_clock))
        .route("/_fake/instances", get(control_instances));
    app.with_state(shared)
}

/// A JSON answer.
pub(crate) fn json_reply(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn text_reply(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn auth_error(status: StatusCode) -> Response {
    json_reply(
        status,
        json!({"success": false, "error": "auth_error", "msg": "Invalid user key"}),
    )
}

/// A 429 in one of Vast.ai's four body shapes, never with `Retry-After`.
fn too_many(endpoint: Endpoint, shape: u64) -> Response {
    let threshold = endpoint.threshold_text();
    let status = StatusCode::TOO_MANY_REQUESTS;
    match shape {
        0 => text_reply(status, "text/plain", "API requests too frequent".to_owned()),
        1 => text_reply(
            status,
            "text/plain",
            format!("API requests too frequent: endpoint threshold={threshold}"),
        ),
        2 => json_reply(
            status,
            json!({"detail": format!("API requests too frequent endpoint threshold={threshold}")}),
        ),
        _ => json_reply(
            status,
            json!({"success": false, "error": "rate_limit_exceeded", "msg": format!("API requests too frequent endpoint threshold={threshold}")}),
        ),
    }
}

/// A gateway blip (F21).
fn server_error(status: u16) -> Response {
    match status {
        503 => json_reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"success": false, "error": "service_unavailable", "msg": "Service temporarily unavailable"}),
        ),
        504 => text_reply(
            StatusCode::GATEWAY_TIMEOUT,
            "text/html",
            "<html><body><h1>504 Gateway Time-out</h1></body></html>".into(),
        ),
        other => text_reply(
            StatusCode::from_u16(other).unwrap_or(StatusCode::BAD_GATEWAY),
            "text/html",
            "<html><body><h1>502 Bad Gateway</h1></body></html>".into(),
        ),
    }
}

/// What every API request passes first: request-level scenarios (F21, F15),
/// auth (missing key 401, wrong key 404, F17), then the per-endpoint,
/// per-identity minimum interval (F15). Returns the caller's identity.
// The refusal is the handler's whole answer, returned at once; boxing it
// would buy nothing.
#[allow(clippy::result_large_err)]
pub(crate) fn gate(
    shared: &Shared,
    endpoint: Endpoint,
    headers: &HeaderMap,
    query: &QueryMap,
    needs_key: bool,
) -> Result<String, Response> {
    shared.reap();
    let mut inner = shared.lock();
    *inner.requests.entry(endpoint).or_default() += 1;
    let super::Inner { rules, rng, .. } = &mut *inner;
    match fire(rules, rng, None, Some(endpoint)) {
        Some(Scenario::F21ServerError { status }) => {
            let status = status.unwrap_or(502 + rng.below(3) as u16);
            return Err(server_error(status));
        }
        Some(Scenario::F15RateLimitStorm) => return Err(too_many(endpoint, rng.below(4))),
        _ => {}
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_owned());
    let key = bearer.or_else(|| query.get("api_key").cloned());
    let identity = match key {
        None if needs_key || shared.config.search_requires_key => {
            return Err(auth_error(StatusCode::UNAUTHORIZED));
        }
        None => "anonymous".to_owned(),
        Some(key) if key != shared.config.api_key.expose() => {
            return Err(auth_error(StatusCode::NOT_FOUND));
        }
        Some(key) => key,
    };
    let interval = shared.config.rate_limits.interval_ms(endpoint);
    if interval > 0 {
        let now = tokio::time::Instant::now();
        let slot = (endpoint, identity.clone());
        if inner.slots.get(&slot).is_some_and(|next| now < *next) {
            let penalty = shared.config.rate_limits.penalty_of_ms(endpoint);
            let next = inner.slots[&slot].max(now + std::time::Duration::from_millis(penalty));
            inner.slots.insert(slot, next);
            let shape = inner.rng.below(4);
            return Err(too_many(endpoint, shape));
        }
        inner
            .slots
            .insert(slot, now + std::time::Duration::from_millis(interval));
    }
    Ok(identity)
}

async fn search(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Search, &headers, &query, false) {
        return refusal;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "msg": "Invalid json body"}),
        );
    };
    match catalog::search(&shared.config.offers, &body) {
        Ok(offers) => json_reply(StatusCode::OK, json!({"offers": offers})),
        Err(msg) => json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "msg": msg}),
        ),
    }
}

/// The newer search: `{"select_cols":["*"],"q":{...}}` -> `{"offers":[...]}`.
async fn search_new(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Search, &headers, &query, false) {
        return refusal;
    }
    let q = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|b| b.get("q").cloned());
    match q.map(|q| catalog::search(&shared.config.offers, &q)) {
        Some(Ok(offers)) => json_reply(StatusCode::OK, json!({"offers": offers})),
        _ => json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "msg": "Invalid json body"}),
        ),
    }
}

/// The 404 for an unknown instance, in both spellings seen (F18).
pub(crate) fn no_such_instance(id: u64) -> Response {
    if id & 1 == 1 {
        json_reply(
            StatusCode::NOT_FOUND,
            json!({"success": false, "error": "no_such_instance", "msg": "No such instance."}),
        )
    } else {
        json_reply(
            StatusCode::NOT_FOUND,
            json!({"success": false, "error": "not_found", "msg": "Instance not found"}),
        )
    }
}

async fn show(
    State(shared): St,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::ShowInstance, &headers, &query, true) {
        return refusal;
    }
    let id: u64 = id.trim().parse().unwrap_or(0);
    let now = shared.now_ms();
    let inner = shared.lock();
    // Unknown, destroyed, deleted or not yet visible: `{"instances": null}`.
    let view = inner.instances.get(&id).and_then(|i| {
        i.status(now, &shared.config.timings)
            .map(|s| i.render(&s, now))
    });
    json_reply(StatusCode::OK, json!({"instances": view}))
}

/// Marks an instance destroyed and stops its machine; false if unknown.
pub(crate) fn destroy_one(shared: &Shared, id: u64) -> bool {
    let now = shared.now_ms();
    let stop = {
        let mut inner = shared.lock();
        let Some(instance) = inner.instances.get_mut(&id) else {
            return false;
        };
        let deleted = instance.status(now, &shared.config.timings).is_none()
            && !instance.is_live(now, &shared.config.timings);
        if instance.destroyed || deleted {
            return false;
        }
        instance.destroyed = true;
        let stop = !instance.stop_sent;
        instance.stop_sent = true;
        stop
    };
    if stop {
        let stop = shared.backend.stop(id);
        tokio::spawn(async move {
            let _ = stop.await;
        });
    }
    true
}

async fn destroy(
    State(shared): St,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Destroy, &headers, &query, true) {
        return refusal;
    }
    let id: u64 = id.trim().parse().unwrap_or(0);
    if destroy_one(&shared, id) {
        json_reply(StatusCode::OK, json!({"success": true}))
    } else {
        no_such_instance(id)
    }
}

/// `PUT /api/v0/instances/{id}/`: `{"state": "stopped"|"running"}` or `{"label": ...}`.
async fn manage(
    State(shared): St,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Manage, &headers, &query, true) {
        return refusal;
    }
    let id: u64 = id.trim().parse().unwrap_or(0);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let now = shared.now_ms();
    let mut inner = shared.lock();
    let Some(instance) = inner
        .instances
        .get_mut(&id)
        .filter(|i| i.status(now, &shared.config.timings).is_some())
    else {
        return no_such_instance(id);
    };
    if let Some(state) = body.get("state").and_then(Value::as_str) {
        instance.user_stopped = state == "stopped";
    }
    if let Some(label) = body.get("label").and_then(Value::as_str) {
        if label.len() > 1024 {
            return json_reply(
                StatusCode::BAD_REQUEST,
                json!({"success": false, "error": "invalid_args", "msg": "label too long"}),
            );
        }
        instance.label = label.to_owned();
    }
    json_reply(StatusCode::OK, json!({"success": true}))
}

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

async fn control_add_rule(State(shared): St, body: Bytes) -> Response {
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

async fn control_clear_rules(State(shared): St) -> Response {
    shared.lock().rules.clear();
    json_reply(StatusCode::OK, json!({"ok": true}))
}

async fn control_clock(State(shared): St, body: Bytes) -> Response {
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

async fn control_instances(State(shared): St) -> Response {
    json_reply(StatusCode::OK, json!(instance_infos(&shared)))
}
