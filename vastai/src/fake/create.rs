//! `PUT /api/v0/asks/{id}/`: create an instance from an offer (§A.4), with
//! the create-time scenarios (F2, F3, F4-F14, F19) and the input limits of
//! `create_instance.yaml`.

use super::backend::keys_in_onstart;
use super::query::{bool_of, number_of};
use super::routes::{QueryMap, gate, json_reply};
use super::scenario::Scenario;
use super::state::{FakeInstance, Machine, fire};
use super::{Inner, Shared};
use crate::limits::Endpoint;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;

/// The env switch that picks a scenario for one instance (drover's client
/// turns the plan's `provider_labels.fake_scenario` into it).
pub const SCENARIO_ENV: &str = "DROVER_LABEL_fake_scenario";

/// What a create asks for, validated.
struct CreateRequest {
    image: String,
    label: String,
    runtype: String,
    onstart: String,
    env: Vec<(String, String)>,
    disk_gb: u64,
    price: Option<f64>,
    cancel_unavail: bool,
}

/// What the create decided under the lock.
enum Decision {
    Refuse(Response),
    Made {
        id: u64,
        lost: Option<Lost>,
        insufficient_bid: bool,
    },
}

/// How a committed create's answer is lost (F5).
#[derive(Clone, Copy, Debug)]
enum Lost {
    /// Held back for this many milliseconds, then sent.
    Held(u64),
    /// Cut part-way on the wire.
    Cut,
}

fn invalid(ask: u64, msg: &str) -> Response {
    json_reply(
        StatusCode::BAD_REQUEST,
        json!({"success": false, "error": "invalid_args", "msg": format!("error 400/3467: Invalid args: {msg}"), "ask_id": ask}),
    )
}

fn parse_env(value: Option<&Value>) -> Result<Vec<(String, String)>, String> {
    let mut env = Vec::new();
    match value {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                env.push((key.clone(), text));
            }
        }
        // The OpenAPI schema's docker-flag string: `-e K=V -p 8000:8000`.
        Some(Value::String(flags)) => {
            let mut words = flags.split_whitespace();
            while let Some(flag) = words.next() {
                match (flag, words.next()) {
                    ("-e", Some(pair)) => {
                        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                        env.push((k.to_owned(), v.to_owned()));
                    }
                    ("-p", Some(ports)) => env.push((format!("-p {ports}"), "1".to_owned())),
                    _ => return Err(format!("cannot read env flags {flags:?}")),
                }
            }
        }
        Some(_) => return Err("'env' must be an object or a string".to_owned()),
    }
    if env.iter().any(|(k, v)| k.len() + v.len() > 256) {
        return Err("each env entry must be at most 256 characters".to_owned());
    }
    if env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > 32_768 {
        return Err("env must be at most 32768 characters".to_owned());
    }
    Ok(env)
}

/// A text field: absent or `null` is empty, a number or boolean its text.
fn text_field(body: &Value, key: &str) -> Result<String, String> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        Some(other) => Err(format!("'{key}' must be text, got {other}")),
    }
}

/// A number field: a JSON number or a numeric string (`null`: absent).
fn number_field(body: &Value, key: &str) -> Result<Option<f64>, String> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(Value::String(s)) if number_of(s).is_some() => Ok(number_of(s)),
        Some(other) => Err(format!("'{key}' must be a number, got {other}")),
    }
}

/// A boolean field: `true`/`false`, `"true"`/`"false"` or 1/0 (`null`: absent).
fn bool_field(body: &Value, key: &str) -> Result<Option<bool>, String> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if bool_of(s).is_some() => Ok(bool_of(s)),
        Some(Value::Number(n)) if n.as_f64() == Some(1.0) => Ok(Some(true)),
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => Ok(Some(false)),
        Some(other) => Err(format!("'{key}' must be true or false, got {other}")),
    }
}

impl CreateRequest {
    fn parse(body: &Value) -> Result<CreateRequest, String> {
        let text = |key: &str| text_field(body, key);
        let image = text("image")?;
        if image.is_empty() || image.len() > 1024 {
            return Err("'image' is required and must be at most 1024 characters".to_owned());
        }
        let label = text("label")?;
        if label.len() > 256 {
            return Err("'label' must be at most 256 characters".to_owned());
        }
        let runtype = match text("runtype")? {
            r if r.is_empty() => "ssh".to_owned(),
            r => r,
        };
        let known = [
            "ssh",
            "ssh_proxy",
            "ssh_direct",
            "ssh_direc",
            "jupyter",
            "jupyter_proxy",
            "jupyter_direct",
            "jupyter_direc",
            "args",
        ];
        if !runtype.split_whitespace().all(|word| known.contains(&word)) {
            return Err(format!("unknown runtype {runtype:?}"));
        }
        let onstart = text("onstart")?;
        if onstart.len()
            + text("args_str")?.len()
            + body.get("args").map_or(0, |a| a.to_string().len())
            > 4096
        {
            return Err("args + args_str + onstart must be at most 4096 characters".to_owned());
        }
        let disk = number_field(body, "disk")?.unwrap_or(10.0);
        if disk < 8.0 {
            return Err("'disk' must be at least 8 GB".to_owned());
        }
        let price = number_field(body, "price")?;
        if price.is_some_and(|p| !(0.001..=128.0).contains(&p)) {
            return Err("'price' must be between 0.001 and 128".to_owned());
        }
        let cancel_unavail = bool_field(body, "cancel_unavail")?.unwrap_or(price.is_none());
        Ok(CreateRequest {
            image,
            label,
            runtype,
            onstart,
            env: parse_env(body.get("env"))?,
            disk_gb: disk as u64,
            price,
            cancel_unavail,
        })
    }
}

/// The create handler.
pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    Path(ask): Path<String>,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Create, &headers, &query, true) {
        return refusal;
    }
    let ask: u64 = ask.trim().parse().unwrap_or(0);
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "msg": "Invalid json body"}),
        );
    };
    let request = match CreateRequest::parse(&body) {
        Ok(request) => request,
        Err(msg) => return invalid(ask, &msg),
    };
    let decision = decide(&shared, &mut shared.lock(), ask, request);
    let (id, lost, insufficient_bid) = match decision {
        Decision::Refuse(response) => return response,
        Decision::Made {
            id,
            lost,
            insufficient_bid,
        } => (id, lost, insufficient_bid),
    };
    if insufficient_bid {
        // F14: an error *with* the new contract; the instance exists, stopped.
        return json_reply(
            StatusCode::BAD_REQUEST,
            json!({"success": false, "error": "invalid_price", "new_contract": id,
                   "msg": format!("error 400/3488: bid price is below the minimum bid for ask {ask}; instance {id} created stopped")}),
        );
    }
    start_machine(&shared, id).await;
    let answer = json!({"success": true, "new_contract": id, "instance_api_key": format!("fake-instance-{id}")});
    match lost {
        None => json_reply(StatusCode::OK, answer),
        // F5: committed, but the answer never arrives in time.
        Some(Lost::Held(ms)) => {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            json_reply(StatusCode::OK, answer)
        }
        // F5, cut: the answer breaks part-way on the wire.
        Some(Lost::Cut) => super::cut::cut_answer(),
    }
}

/// Starts the machine in its own task, so a client that hangs up cannot
/// cancel a start half-way.
async fn start_machine(shared: &Arc<Shared>, id: u64) {
    let Some(spec) = shared
        .lock()
        .instances
        .get(&id)
        .map(FakeInstance::machine_spec)
    else {
        return;
    };
    let start = shared.backend.start(spec);
    let shared = shared.clone();
    let task = tokio::spawn(async move {
        let machine = match start.await {
            Ok(addr) => Machine::Up(addr),
            Err(e) => Machine::Failed(e),
        };
        if let Some(instance) = shared.lock().instances.get_mut(&id) {
            instance.machine = machine;
        }
        shared.reap();
    });
    let _ = task.await;
}

fn decide(shared: &Shared, inner: &mut Inner, ask: u64, request: CreateRequest) -> Decision {
    let Some(offer) = shared.config.offers.iter().find(|o| o.id == ask).cloned() else {
        return Decision::Refuse(json_reply(
            StatusCode::NOT_FOUND,
            json!({"success": false, "error": "invalid_args", "ask_id": ask,
                   "msg": format!("error 404/3603: no_such_ask Instance type by id {ask} is not available.")}),
        ));
    };
    let switched = request
        .env
        .iter()
        .find(|(k, _)| k == SCENARIO_ENV)
        .and_then(|(_, v)| Scenario::parse_short(v));
    let Inner { rules, rng, .. } = inner;
    let scenario = switched.or_else(|| fire(rules, rng, Some(&request.label), None));
    if let Some(Scenario::F02OfferGone { status_410 }) = scenario {
        let body = if status_410 && request.cancel_unavail {
            (
                StatusCode::GONE,
                json!({"success": false, "error": "no_such_ask", "ask_id": ask,
                "msg": format!("error 410/3907: no_such_ask Instance type {ask} is no longer available.")}),
            )
        } else {
            (
                StatusCode::NOT_FOUND,
                json!({"success": false, "error": "invalid_args", "ask_id": ask,
                "msg": format!("error 404/3603: no_such_ask Instance type by id {ask} is not available.")}),
            )
        };
        return Decision::Refuse(json_reply(body.0, body.1));
    }
    let now = shared.now_ms();
    let timings = shared.config.timings;
    // F3, always on: a second live create on one offer loses the port bind.
    let double_rent_loser = inner
        .instances
        .values()
        .any(|other| other.offer.id == ask && other.is_live(now, &timings));
    let insufficient_bid = matches!(scenario, Some(Scenario::F14InsufficientBid))
        || request.price.is_some_and(|p| p < offer.min_bid);
    let id = inner.next_contract;
    inner.next_contract += 1;
    let mut authorized_keys: Vec<String> = inner
        .account_keys
        .iter()
        .map(|k| k.public_key.clone())
        .collect();
    for key in keys_in_onstart(&request.onstart) {
        if !authorized_keys.contains(&key) {
            authorized_keys.push(key);
        }
    }
    let lost = match scenario {
        Some(Scenario::F05CreateLost { cut: true, .. }) => Some(Lost::Cut),
        Some(Scenario::F05CreateLost { hold_ms, .. }) => {
            Some(Lost::Held(hold_ms.unwrap_or(shared.config.create_hang_ms)))
        }
        _ => None,
    };
    inner.instances.insert(
        id,
        FakeInstance {
            id,
            offer,
            label: request.label,
            image: request.image,
            onstart: request.onstart,
            extra_env: request.env,
            runtype: request.runtype,
            disk_gb: request.disk_gb,
            price: request.price,
            created_ms: now,
            contract_ms: shared.config.contract_ms,
            scenario,
            double_rent_loser,
            insufficient_bid,
            destroyed: false,
            user_stopped: false,
            machine: Machine::Starting,
            authorized_keys,
            stop_sent: false,
        },
    );
    Decision::Made {
        id,
        lost,
        insufficient_bid,
    }
}
