//! Offer searches (§A.3): `POST /api/v0/bundles/`, the newer
//! `PUT /api/v0/search/asks/`, and the GPU names the official CLI reads
//! when it starts. A search the fake cannot read is a 400 naming the field
//! and the value, never an empty list (see `query.rs`).

use super::Shared;
use super::catalog;
use super::routes::{QueryMap, gate, json_reply};
use crate::limits::Endpoint;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

type St = State<Arc<Shared>>;

/// The 400 of a search (`search_offers.yaml`).
fn invalid(msg: &str) -> Response {
    json_reply(
        StatusCode::BAD_REQUEST,
        json!({"error": "invalid_request", "msg": msg}),
    )
}

fn answer(shared: &Shared, query: &Value) -> Response {
    match catalog::search(&shared.config.offers, query) {
        Ok(offers) => json_reply(StatusCode::OK, json!({"offers": offers})),
        Err(msg) => invalid(&msg),
    }
}

/// `POST /api/v0/bundles/`: the body is the query.
pub(crate) async fn search(
    State(shared): St,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Search, &headers, &query, false) {
        return refusal;
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(body) => answer(&shared, &body),
        Err(_) => invalid("Invalid json body"),
    }
}

/// `PUT /api/v0/search/asks/`: `{"select_cols":["*"],"q":{...}}` -> `{"offers":[...]}`.
pub(crate) async fn search_new(
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
    match q {
        Some(q) => answer(&shared, &q),
        None => invalid("Invalid json body"),
    }
}

/// `GET /api/v0/gpu_names/unique/` (no key): the catalog's GPU names.
pub(crate) async fn gpu_names(State(shared): St) -> Response {
    let names: BTreeSet<&str> = shared
        .config
        .offers
        .iter()
        .map(|o| o.gpu_name.as_str())
        .collect();
    json_reply(StatusCode::OK, json!({"gpu_names": names}))
}
