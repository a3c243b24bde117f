//! The page's controls (`spec/dashboard.md`, "Controls"): kill a node (a
//! drill), remove a node, +1 / -1 per group, stop the run. Each is a POST that passes the same checks as the prompt
//! proxy (token, loopback `Host`, own `Origin`), and becomes what the
//! operator's own tools would make of it: a kill is the pipeline host's
//! `Kill { node }` input (its agent dies as in a crash), removing a node is the
//! composite's `Destroy { node }` input (journaled by the node's lifecycle
//! as it goes), +1 / -1 is the composite's `SetDesired { group, count }`
//! (journaled as `DesiredSet`; the reconciler creates or destroys the
//! group's tail node), stopping the run is the stop `up` takes from Ctrl-C. The
//! page shows the effect through its stream, as for any other change.

use super::server::{App, Params, guard, hardened, refuse};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use core_fsm::ids::{GroupId, LogicalNodeId};
use core_fsm::node::Lifecycle;
use core_fsm::port::Input;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Where a control reaches the running composite: empty until `up`'s loop
/// runs, and again once it ended (or for `drover dashboard`).
#[derive(Clone, Default)]
pub struct Controls {
    inputs: Arc<Mutex<Option<mpsc::Sender<Input>>>>,
    stop: Arc<Mutex<Option<mpsc::Sender<()>>>>,
    host: Arc<Mutex<Option<crate::pipeline::Tap>>>,
}

impl std::fmt::Debug for Controls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let connected = self.inputs.lock().expect("controls").is_some();
        f.debug_struct("Controls")
            .field("connected", &connected)
            .finish()
    }
}

impl Controls {
    /// From now on, controls go to `inputs` (the composite) and `host` (the
    /// pipeline host: a kill); a stop goes to `stop`.
    pub fn connect(
        &self,
        inputs: mpsc::Sender<Input>,
        stop: mpsc::Sender<()>,
        host: crate::pipeline::Tap,
    ) {
        *self.inputs.lock().expect("controls") = Some(inputs);
        *self.stop.lock().expect("controls") = Some(stop);
        *self.host.lock().expect("controls") = Some(host);
    }

    /// No loop takes controls any more.
    pub fn disconnect(&self) {
        self.inputs.lock().expect("controls").take();
        self.stop.lock().expect("controls").take();
        self.host.lock().expect("controls").take();
    }

    fn kill(&self, node: LogicalNodeId) -> Result<(), &'static str> {
        let host = self.host.lock().expect("controls");
        let Some(tap) = host.as_ref() else {
            return Err("the run does not take controls now (not started, or over)");
        };
        tap.kill(node)
            .then_some(())
            .ok_or("the run is busy; try again in a moment")
    }

    fn input(&self, input: Input) -> Result<(), &'static str> {
        let inputs = self.inputs.lock().expect("controls");
        let Some(tx) = inputs.as_ref() else {
            return Err("the run does not take controls now (not started, or over)");
        };
        tx.try_send(input)
            .map_err(|_| "the run is busy; try again in a moment")
    }

    fn request_stop(&self) -> Result<(), &'static str> {
        let stop = self.stop.lock().expect("controls");
        let Some(tx) = stop.as_ref() else {
            return Err("the run does not take controls now (not started, or over)");
        };
        // A stop already asked for is the same stop.
        match tx.try_send(()) {
            Ok(()) | Err(mpsc::error::TrySendError::Full(())) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(())) => Err("the run is over"),
        }
    }
}

/// The checks every control makes: the token, `Host` and `Origin`, and a
/// live run (not a read-only server).
fn admit(
    app: &App,
    headers: &HeaderMap,
    q: &std::collections::BTreeMap<String, String>,
) -> Result<(), Box<Response>> {
    guard(app, headers, q, true)?;
    if app.read_only {
        let reason = "this dashboard shows a stopped run";
        return Err(Box::new(refuse(StatusCode::CONFLICT, reason)));
    }
    Ok(())
}

/// [`admit`], then the card of `node` (404 when the run has none).
fn admit_node(
    app: &App,
    headers: &HeaderMap,
    q: &std::collections::BTreeMap<String, String>,
    node: &str,
) -> Result<serde_json::Value, Box<Response>> {
    admit(app, headers, q)?;
    let state = app.hub.state();
    (state["nodes"].as_array())
        .and_then(|nodes| nodes.iter().find(|c| c["id"] == node))
        .cloned()
        .ok_or_else(|| {
            let reason = format!("no node `{node}` in this run");
            Box::new(refuse(StatusCode::NOT_FOUND, &reason))
        })
}

fn accepted(what: &str, node: Option<&str>) -> Response {
    let body = serde_json::json!({ "accepted": what, "node": node });
    hardened((StatusCode::ACCEPTED, body.to_string()).into_response())
}

/// `POST /api/nodes/{node}/remove`: the node's lease is destroyed and the
/// node is not replaced (its group counts one node less).
pub async fn remove(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
    Path(node): Path<String>,
) -> Response {
    let card = match admit_node(&app, &headers, &q, &node) {
        Ok(card) => card,
        Err(refused) => return *refused,
    };
    let gone = [Lifecycle::Destroying, Lifecycle::Destroyed]
        .iter()
        .any(|l| card["stage"] == format!("{l:?}"));
    if gone {
        return refuse(
            StatusCode::CONFLICT,
            &format!("`{node}` is already being removed"),
        );
    }
    let input = Input::Destroy {
        node: LogicalNodeId::from(node.as_str()),
    };
    match app.controls.input(input) {
        Ok(()) => accepted("remove", Some(&node)),
        Err(reason) => refuse(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// `POST /api/nodes/{node}/kill`: a drill. The node's agent is made to
/// exit as a crash would; its silence makes it Dead, and the node fails
/// (and, under `replacement = "bounded"`, is replaced) as after any crash.
pub async fn kill(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
    Path(node): Path<String>,
) -> Response {
    let card = match admit_node(&app, &headers, &q, &node) {
        Ok(card) => card,
        Err(refused) => return *refused,
    };
    if card["stage"] != "Dormant" {
        let reason = format!("`{node}` has no agent to kill (it is {})", card["stage"]);
        return refuse(StatusCode::CONFLICT, &reason);
    }
    match app.controls.kill(LogicalNodeId::from(node.as_str())) {
        Ok(()) => accepted("kill", Some(&node)),
        Err(reason) => refuse(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// `POST /api/stop`: the run stops as on Ctrl-C (the pipeline first, then
/// every lease).
pub async fn stop(State(app): State<Arc<App>>, headers: HeaderMap, Query(q): Params) -> Response {
    if let Err(refused) = admit(&app, &headers, &q) {
        return *refused;
    }
    match app.controls.request_stop() {
        Ok(()) => accepted("stop", None),
        Err(reason) => refuse(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// What `POST /api/groups/{group}/scale` takes.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScaleBody {
    delta: i32,
}

/// `POST /api/groups/{group}/scale` with `{"delta": 1}` or `{"delta": -1}`:
/// the group's desired count goes up or down by one. Up: the reconciler
/// creates node `{group}-{count}` (provisioned like any planned node). Down:
/// it destroys the group's highest-numbered node, which must not serve a
/// pipeline stage (409 with the reason otherwise, and below 0).
pub async fn scale(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
    Path(group): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(refused) = admit(&app, &headers, &q) {
        return *refused;
    }
    let delta = match serde_json::from_slice::<ScaleBody>(&body) {
        Ok(ScaleBody { delta }) if delta == 1 || delta == -1 => delta,
        _ => {
            let reason = "expected {\"delta\": 1} or {\"delta\": -1}";
            return refuse(StatusCode::BAD_REQUEST, reason);
        }
    };
    let state = app.hub.state();
    let desired = (state["groups"].as_array())
        .and_then(|groups| groups.iter().find(|g| g["group"] == group.as_str()))
        .and_then(|g| g["desired"].as_u64());
    let Some(desired) = desired.and_then(|d| u32::try_from(d).ok()) else {
        let reason = format!("no group `{group}` in this run");
        return refuse(StatusCode::NOT_FOUND, &reason);
    };
    let count = match scale_target(&state, &group, desired, delta) {
        Ok(count) => count,
        Err(reason) => return refuse(StatusCode::CONFLICT, &reason),
    };
    let input = Input::SetDesired {
        group: GroupId::from(group.as_str()),
        count,
    };
    match app.controls.input(input) {
        Ok(()) => {
            let body = serde_json::json!({ "accepted": "scale", "group": group, "desired": count });
            hardened((StatusCode::ACCEPTED, body.to_string()).into_response())
        }
        Err(reason) => refuse(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// The new desired count, or why the change would be refused: below 0,
/// above the plan's limit, a -1 whose node serves a pipeline stage, a +1
/// whose node is still being destroyed (the composite refuses the same).
fn scale_target(
    state: &serde_json::Value,
    group: &str,
    desired: u32,
    delta: i32,
) -> Result<u32, String> {
    let card = |node: &str| {
        (state["nodes"].as_array()).and_then(|nodes| nodes.iter().find(|c| c["id"] == node))
    };
    if delta < 0 {
        let Some(count) = desired.checked_sub(1) else {
            return Err(format!("`{group}` wants no nodes already"));
        };
        let node = format!("{group}-{count}");
        let serving = (state["pipeline"]["stages"].as_array()).and_then(|stages| {
            stages.iter().find(|s| {
                s["node"] == node.as_str()
                    && !matches!(s["state"].as_str(), Some("stopped" | "failed"))
            })
        });
        if let Some(stage) = serving {
            return Err(format!(
                "`{node}` serves pipeline stage {}; removing it would break the run",
                stage["stage"]
            ));
        }
        return Ok(count);
    }
    if desired >= core_fsm::plan::GROUP_COUNT_MAX {
        let max = core_fsm::plan::GROUP_COUNT_MAX;
        return Err(format!(
            "`{group}` has {max} nodes, the most a group may have"
        ));
    }
    let node = format!("{group}-{desired}");
    if let Some(card) = card(&node)
        && (card["stage"] != "Destroyed" || !card["lease"].is_null())
    {
        return Err(format!(
            "`{node}` is still being destroyed; try again once it is gone"
        ));
    }
    Ok(desired + 1)
}

#[cfg(test)]
mod tests {
    use super::scale_target;
    use serde_json::json;

    fn state(stage_of_2: &str, pipeline: serde_json::Value) -> serde_json::Value {
        json!({
            "nodes": [
                {"id": "w-0", "stage": "Dormant", "lease": "local:0"},
                {"id": "w-1", "stage": "Dormant", "lease": "local:1"},
                {"id": "w-2", "stage": stage_of_2, "lease": if stage_of_2 == "Destroyed" { json!(null) } else { json!("local:2") }},
            ],
            "pipeline": pipeline,
        })
    }

    #[test]
    fn a_scale_is_refused_with_its_reason_where_the_run_would_not_take_it() {
        let none = serde_json::Value::Null;
        // +1 of a group of 2 wants w-2 again: only once it is gone.
        assert_eq!(
            scale_target(&state("Destroyed", none.clone()), "w", 2, 1),
            Ok(3)
        );
        let going = scale_target(&state("Destroying", none.clone()), "w", 2, 1).unwrap_err();
        assert!(going.contains("`w-2` is still being destroyed"), "{going}");
        assert_eq!(
            scale_target(&state("Dormant", none.clone()), "w", 3, 1),
            Ok(4)
        );
        let full = scale_target(&state("Dormant", none.clone()), "w", 1024, 1).unwrap_err();
        assert!(full.contains("1024"), "{full}");
        // -1: the tail node goes, unless it serves a stage; never below 0.
        assert_eq!(
            scale_target(&state("Dormant", none.clone()), "w", 3, -1),
            Ok(2)
        );
        let empty = scale_target(&state("Dormant", none), "w", 0, -1).unwrap_err();
        assert!(empty.contains("wants no nodes already"), "{empty}");
        let serving = json!({"stages": [
            {"stage": 0, "node": "w-0", "state": "serving"},
            {"stage": 1, "node": "w-2", "state": "serving"},
        ]});
        let refused = scale_target(&state("Dormant", serving.clone()), "w", 3, -1).unwrap_err();
        assert!(
            refused.contains("`w-2` serves pipeline stage 1"),
            "{refused}"
        );
        // With two wanted, -1 takes w-1, which serves no stage.
        assert_eq!(scale_target(&state("Dormant", serving), "w", 2, -1), Ok(1));
        let stopped = json!({"stages": [{"stage": 1, "node": "w-2", "state": "stopped"}]});
        assert_eq!(scale_target(&state("Dormant", stopped), "w", 3, -1), Ok(2));
    }
}
