//! Lists (the v1 paginated list, the deprecated v0 list, F16), SSH keys
//! (§A.6-A.8, F20) and the account (§A.9).

use super::query::{Kind, matches, parse_filters};
use super::routes::{QueryMap, destroy_one, gate, identity, json_reply, no_such_instance};
use super::{AccountKey, Shared};
use crate::limits::Endpoint;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

type St = State<Arc<Shared>>;

/// Columns the v1 list can filter on (stored, not computed), and their kinds.
const FILTERABLE: [(&str, Kind); 11] = [
    ("id", Kind::Number),
    ("label", Kind::Text),
    ("actual_status", Kind::Text),
    ("intended_status", Kind::Text),
    ("cur_state", Kind::Text),
    ("next_state", Kind::Text),
    ("gpu_name", Kind::Text),
    ("verification", Kind::Text),
    ("machine_id", Kind::Number),
    ("host_id", Kind::Number),
    ("image_uuid", Kind::Text),
];

/// Page size: default and maximum 25, anything <= 0 means 5 (§A.6).
const PAGE_MAX: i64 = 25;

/// `GET /api/v0/instances/`: deprecated, 410 (F16).
pub(crate) async fn v0_list(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::ListInstances, &headers, &query, true) {
        return refusal;
    }
    json_reply(
        StatusCode::GONE,
        json!({"success": false, "error": "deprecated_endpoint",
               "msg": "/api/v0/instances/ is deprecated. Use /api/v1/instances/ instead."}),
    )
}

/// `DELETE /api/v0/instances/` with `{"instance_ids": [...]}`.
pub(crate) async fn bulk_destroy(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Destroy, &headers, &query, true) {
        return refusal;
    }
    let ids: Vec<u64> = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|b| b.get("instance_ids").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|id| match id {
            Value::String(s) => s.trim().parse().ok(),
            other => other.as_u64(),
        })
        .collect();
    let destroyed: Vec<u64> = ids
        .into_iter()
        .filter(|id| destroy_one(&shared, *id))
        .collect();
    json_reply(
        StatusCode::OK,
        json!({"success": true, "destroyed": destroyed}),
    )
}

/// A query value sent JSON-encoded (`quote_plus(json.dumps(v))`), or raw.
fn json_param(query: &QueryMap, key: &str) -> Option<Value> {
    let raw = query.get(key)?;
    Some(serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone())))
}

fn bad(error: &str, msg: String) -> Response {
    json_reply(
        StatusCode::BAD_REQUEST,
        json!({"success": false, "error": error, "msg": msg}),
    )
}

/// `GET /api/v1/instances/`: paginated by `next_token`/`after_token`.
pub(crate) async fn v1_list(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::ListInstances, &headers, &query, true) {
        return refusal;
    }
    let limit = match json_param(&query, "limit").and_then(|v| v.as_i64()) {
        None => PAGE_MAX,
        Some(n) if n <= 0 => 5,
        Some(n) => n.min(PAGE_MAX),
    } as usize;
    let filters = match json_param(&query, "select_filters") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return bad("invalid_args", "select_filters must be an object".into()),
    };
    let kind_of = |column: &str| {
        FILTERABLE
            .iter()
            .find(|(name, _)| *name == column)
            .map(|(_, kind)| *kind)
    };
    if let Some(column) = filters.keys().find(|k| kind_of(k).is_none()) {
        return bad(
            "invalid_args",
            format!("cannot filter on computed or unknown column {column}"),
        );
    }
    let filters = match parse_filters(&filters, &[], kind_of) {
        Ok(filters) => filters,
        Err(msg) => return bad("invalid_args", format!("select_filters: {msg}")),
    };
    let descending = json_param(&query, "order_by")
        .and_then(|o| {
            o.get(0)
                .and_then(|e| e.get("dir"))
                .and_then(Value::as_str)
                .map(|d| d == "desc")
        })
        .unwrap_or(false);
    let after = match json_param(&query, "after_token") {
        None | Some(Value::Null) => None,
        Some(token) => match token
            .as_str()
            .and_then(|t| t.strip_prefix("tok_"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(after) => Some(after),
            None => return bad("invalid_token", "Invalid after_token".into()),
        },
    };
    let now = shared.now_ms();
    let inner = shared.lock();
    let mut visible: Vec<Value> = inner
        .instances
        .values()
        .filter_map(|i| {
            i.status(now, &shared.config.timings)
                .map(|s| i.render(&s, now))
        })
        .collect();
    let total = visible.len();
    visible.retain(|v| matches(v, &filters));
    if descending {
        visible.reverse();
    }
    let id_of = |v: &Value| v.get("id").and_then(Value::as_u64).unwrap_or(0);
    let mut label_counts: BTreeMap<String, u64> = BTreeMap::new();
    for v in &visible {
        *label_counts
            .entry(
                v.get("label")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            )
            .or_default() += 1;
    }
    let found = visible.len();
    let rest: Vec<Value> = visible
        .into_iter()
        .filter(|v| {
            after.is_none_or(|a| {
                if descending {
                    id_of(v) < a
                } else {
                    id_of(v) > a
                }
            })
        })
        .collect();
    let page: Vec<Value> = rest.iter().take(limit).cloned().collect();
    let next_token =
        (rest.len() > page.len()).then(|| format!("tok_{}", page.last().map_or(0, id_of)));
    json_reply(
        StatusCode::OK,
        json!({"success": true, "instances_found": found, "total_instances": total,
               "label_counts": label_counts, "next_token": next_token, "instances": page}),
    )
}

/// Adds an account key; with the F20 toggle on, also to existing instances.
pub(crate) fn add_account_key(shared: &Shared, public_key: &str) -> u64 {
    let now = shared.now_ms();
    let (id, reach) = {
        let mut inner = shared.lock();
        let id = inner.next_key_id;
        inner.next_key_id += 1;
        inner.account_keys.push(AccountKey {
            id,
            public_key: public_key.to_owned(),
        });
        let mut reach = Vec::new();
        if shared.config.account_keys_reach_existing {
            for instance in inner
                .instances
                .values_mut()
                .filter(|i| i.is_live(now, &shared.config.timings))
            {
                instance.authorized_keys.push(public_key.to_owned());
                reach.push(instance.id);
            }
        }
        (id, reach)
    };
    for instance in reach {
        let add = shared.backend.add_key(instance, public_key.to_owned());
        tokio::spawn(async move {
            let _ = add.await;
        });
    }
    id
}

fn ssh_key_of(body: &Bytes) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("ssh_key")?
        .as_str()
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
}

/// `GET /api/v0/ssh/`: the OpenAPI's bare array.
pub(crate) async fn list_keys(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::SshKeys, &headers, &query, true) {
        return refusal;
    }
    let keys: Vec<Value> = shared
        .lock()
        .account_keys
        .iter()
        .map(|k| json!({"id": k.id, "user_id": 456, "key": k.public_key, "created_at": "2026-01-01T00:00:00Z", "deleted_at": null}))
        .collect();
    json_reply(StatusCode::OK, Value::Array(keys))
}

/// `POST /api/v0/ssh/` `{"ssh_key": ...}`.
pub(crate) async fn create_key(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::SshKeys, &headers, &query, true) {
        return refusal;
    }
    let Some(key) = ssh_key_of(&body) else {
        return json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "no_ssh_key", "msg": "No ssh key provided"}),
        );
    };
    let id = add_account_key(&shared, &key);
    json_reply(
        StatusCode::OK,
        json!({"success": true, "key": {"id": id, "user_id": 456, "public_key": key, "created_at": "2026-01-01T00:00:00Z", "deleted_at": null}}),
    )
}

/// `DELETE /api/v0/ssh/{id}/`.
pub(crate) async fn delete_key(
    State(shared): St,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::SshKeys, &headers, &query, true) {
        return refusal;
    }
    let id: u64 = id.trim().parse().unwrap_or(0);
    let mut inner = shared.lock();
    let before = inner.account_keys.len();
    inner.account_keys.retain(|k| k.id != id);
    if inner.account_keys.len() == before {
        return json_reply(
            StatusCode::NOT_FOUND,
            json!({"success": false, "error": "no_such_ssh_key", "msg": "No such ssh key."}),
        );
    }
    json_reply(StatusCode::OK, json!({"success": true}))
}

/// `POST /api/v0/instances/{id}/ssh/` `{"ssh_key": ...}`: attach to one instance.
pub(crate) async fn attach_key(
    State(shared): St,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::SshKeys, &headers, &query, true) {
        return refusal;
    }
    let id: u64 = id.trim().parse().unwrap_or(0);
    let Some(key) = ssh_key_of(&body) else {
        return json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "no_ssh_key", "msg": "No ssh key provided"}),
        );
    };
    let now = shared.now_ms();
    {
        let mut inner = shared.lock();
        let Some(instance) = inner
            .instances
            .get_mut(&id)
            .filter(|i| i.is_live(now, &shared.config.timings))
        else {
            return no_such_instance(id);
        };
        instance.authorized_keys.push(key.clone());
    }
    let add = shared.backend.add_key(id, key);
    let _ = add.await;
    json_reply(
        StatusCode::OK,
        json!({"success": true, "msg": "SSH key attached successfully"}),
    )
}

/// `GET /api/v0/users/current/`: the account (the official CLI reads it
/// once, to learn whether it runs for a host).
pub(crate) async fn current_user(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
) -> Response {
    if let Err(refusal) = identity(&shared, &headers, &query, true) {
        return refusal;
    }
    let ssh_key = shared
        .lock()
        .account_keys
        .first()
        .map(|k| k.public_key.clone());
    json_reply(
        StatusCode::OK,
        json!({"id": 456, "email": "fake@example.invalid", "credit": 25.0, "balance": 25.0,
               "ssh_key": ssh_key, "host_agreement_accepted": false}),
    )
}
