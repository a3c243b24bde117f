//! The fake's HTTP surface: the gate every API request passes (request-level
//! scenarios, auth, rate limits), show, destroy and manage. Searches are in
//! `search.rs`, creates in `create.rs`, lists, SSH keys and the account in
//! `listing.rs`, the `/_fake/...` control endpoints in `control.rs`.

use super::scenario::Scenario;
use super::state::fire;
use super::{Shared, control, create, listing, logs, search};
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
    app = both(app, "/api/v0/bundles", post(search::search));
    app = both(app, "/api/v0/search/asks", put(search::search_new));
    app = both(app, "/api/v0/gpu_names/unique", get(search::gpu_names));
    app = both(app, "/api/v0/users/current", get(listing::current_user));
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
    app = both(
        app,
        "/api/v0/instances/request_logs/{id}",
        put(logs::request_logs),
    );
    app = both(app, "/api/v1/instances", get(listing::v1_list));
    // Where a requested log is "uploaded" (S3 in real life; no key).
    app = app.route("/vast.ai/instance_logs/{file}", get(logs::uploaded));
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
            post(control::add_rule).delete(control::clear_rules),
        )
        .route("/_fake/clock", post(control::clock))
        .route("/_fake/instances", get(control::instances));
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

/// The caller's identity: its key (bearer or `?api_key=`), or `anonymous`
/// where no key is needed. Missing key 401, wrong key 404 (F17).
#[allow(clippy::result_large_err)]
pub(crate) fn identity(
    shared: &Shared,
    headers: &HeaderMap,
    query: &QueryMap,
    needs_key: bool,
) -> Result<String, Response> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_owned());
    match bearer.or_else(|| query.get("api_key").cloned()) {
        None if needs_key || shared.config.search_requires_key => {
            Err(auth_error(StatusCode::UNAUTHORIZED))
        }
        None => Ok("anonymous".to_owned()),
        Some(key) if key != shared.config.api_key.expose() => {
            Err(auth_error(StatusCode::NOT_FOUND))
        }
        Some(key) => Ok(key),
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
    let identity = identity(shared, headers, query, needs_key)?;
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
    let change = match ManageRequest::parse(&body) {
        Ok(change) => change,
        Err(msg) => {
            return json_reply(
                StatusCode::BAD_REQUEST,
                json!({"success": false, "error": "invalid_args", "msg": msg}),
            );
        }
    };
    let now = shared.now_ms();
    let mut inner = shared.lock();
    let Some(instance) = inner
        .instances
        .get_mut(&id)
        .filter(|i| i.status(now, &shared.config.timings).is_some())
    else {
        return no_such_instance(id);
    };
    if let Some(stopped) = change.stopped {
        instance.user_stopped = stopped;
    }
    if let Some(label) = change.label {
        instance.label = label;
    }
    json_reply(StatusCode::OK, json!({"success": true}))
}

/// What `PUT /api/v0/instances/{id}/` asks to change, read as the official
/// CLI sends it (`{"label": ...}`, `{"state": "stopped"|"running"}`); what
/// it cannot read is an error naming the key, never a silent success.
struct ManageRequest {
    stopped: Option<bool>,
    label: Option<String>,
}

impl ManageRequest {
    fn parse(body: &[u8]) -> Result<ManageRequest, String> {
        let body: Value = match body {
            [] => Value::Object(Default::default()),
            bytes => serde_json::from_slice(bytes).map_err(|_| "Invalid json body".to_owned())?,
        };
        let stopped = match body.get("state") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "stopped" => Some(true),
            Some(Value::String(s)) if s == "running" => Some(false),
            Some(other) => return Err(format!("'state' must be stopped or running, got {other}")),
        };
        let label = match body.get("label") {
            None => None,
            Some(Value::Null) => Some(String::new()),
            Some(Value::String(s)) => Some(s.clone()),
            Some(v @ Value::Number(_)) => Some(v.to_string()),
            Some(other) => return Err(format!("'label' must be text, got {other}")),
        };
        if label.as_ref().is_some_and(|l| l.len() > 1024) {
            return Err("'label' must be at most 1024 characters".to_owned());
        }
        Ok(ManageRequest { stopped, label })
    }
}
