//! The page's controls (`spec/dashboard.md`, "Controls"): kill a node (a
//! drill), remove a node, stop the run. Each is a POST that passes the same checks as the prompt
//! proxy (token, loopback `Host`, own `Origin`), and becomes what the
//! operator's own tools would make of it: a kill is the pipeline host's
//! `Kill { node }` input (its agent dies as in a crash), removing a node is the
//! composite's `Destroy { node }` input (journaled by the node's lifecycle
//! as it goes), stopping the run is the stop `up` takes from Ctrl-C. The
//! page shows the effect through its stream, as for any other change.

use super::server::{App, Params, guard, hardened, refuse};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use core_fsm::ids::LogicalNodeId;
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
