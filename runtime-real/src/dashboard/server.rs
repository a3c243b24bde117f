//! The dashboard's HTTP side (axum): the page, its one SSE stream, the full
//! log of a node, the state as JSON, and the prompt proxy. Every request
//! needs the run's token (`?token=` or `Authorization: Bearer`; 401
//! without it) and a loopback `Host` of this server (403 otherwise, which
//! also stops DNS rebinding); a POST with an `Origin` must come from this
//! server's own page (403).

use super::hub::{Cursor, Hub};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const PAGE: &str = include_str!("../../assets/dashboard/index.html");
const STYLE: &str = include_str!("../../assets/dashboard/style.css");
const SCRIPT: &str = include_str!("../../assets/dashboard/app.js");
/// The page's end of the stream (inlined before `SCRIPT`).
const FEED: &str = include_str!("../../assets/dashboard/feed.js");
/// The SharedWorker that holds one stream for every page of a browser.
const WORKER: &str = include_str!("../../assets/dashboard/stream.js");
/// How long a page waits before it reconnects a dropped stream.
const RETRY: Duration = Duration::from_millis(1000);
/// Longest prompt the proxy forwards.
const PROMPT_BYTES_MAX: usize = 64 * 1024;

/// What every handler shares.
pub struct App {
    /// The stream.
    pub hub: Arc<Hub>,
    /// The run's token.
    pub token: String,
    /// Where the server listens (its `Host` must name it).
    pub addr: SocketAddr,
    /// The state dir.
    pub state_dir: PathBuf,
    /// A stopped run: no prompts.
    pub read_only: bool,
    /// Where the controls reach the run.
    pub controls: super::controls::Controls,
}

/// The router.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/events", get(events))
        .route("/stream.js", get(worker))
        .route("/api/state", get(state))
        .route("/api/logs/{node}", get(logs))
        .route("/api/prompt", post(prompt))
        .route("/api/nodes/{node}/remove", post(super::controls::remove))
        .route("/api/nodes/{node}/kill", post(super::controls::kill))
        .route("/api/groups/{group}/scale", post(super::controls::scale))
        .route("/api/stop", post(super::controls::stop))
        .with_state(app)
}

pub(super) type Params = Query<BTreeMap<String, String>>;

/// The page, its style and script inlined (one request; nothing external).
async fn page(State(app): State<Arc<App>>, headers: HeaderMap, Query(q): Params) -> Response {
    if let Err(refused) = guard(&app, &headers, &q, false) {
        return *refused;
    }
    let html = PAGE
        .replace("/*STYLE*/", STYLE)
        .replace("/*SCRIPT*/", &format!("{FEED}\n{SCRIPT}"));
    let mut response = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    let csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
               connect-src 'self'; worker-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
               frame-ancestors 'none'";
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    hardened(response)
}

/// The SharedWorker's script (`assets/dashboard/stream.js`): it may only
/// connect to this server.
async fn worker(State(app): State<Arc<App>>, headers: HeaderMap, Query(q): Params) -> Response {
    if let Err(refused) = guard(&app, &headers, &q, false) {
        return *refused;
    }
    let mut response = (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        WORKER,
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; connect-src 'self'"),
    );
    hardened(response)
}

/// The SSE stream; resumes after `Last-Event-ID` (or `?last_event_id=`,
/// for a page that reconnects by itself).
async fn events(State(app): State<Arc<App>>, headers: HeaderMap, Query(q): Params) -> Response {
    if let Err(refused) = guard(&app, &headers, &q, false) {
        return *refused;
    }
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| q.get("last_event_id").cloned());
    let cursor = Cursor::new(last);
    let wake = app.hub.watch();
    let start = (
        app.hub.clone(),
        cursor,
        wake,
        std::collections::VecDeque::new(),
        true,
    );
    let stream = futures_util::stream::unfold(
        start,
        |(hub, mut cursor, mut wake, mut pending, first)| async move {
            loop {
                if let Some(out) = pending.pop_front() {
                    let out: super::hub::Out = out;
                    let mut event = Event::default().id(out.id).event(out.kind).data(out.data);
                    if first {
                        event = event.retry(RETRY);
                    }
                    return Some((
                        Ok::<_, Infallible>(event),
                        (hub, cursor, wake, pending, false),
                    ));
                }
                wake.borrow_and_update();
                match hub.next(&mut cursor) {
                    None => return None,
                    Some(batch) if !batch.is_empty() => pending.extend(batch),
                    Some(_) => {
                        if wake.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            }
        },
    );
    let sse = Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)));
    hardened(sse.into_response())
}

async fn state(State(app): State<Arc<App>>, headers: HeaderMap, Query(q): Params) -> Response {
    if let Err(refused) = guard(&app, &headers, &q, false) {
        return *refused;
    }
    hardened(axum::Json(app.hub.state()).into_response())
}

/// A node's whole log, line for line what `drover logs NODE` prints.
async fn logs(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Query(q): Params,
) -> Response {
    if let Err(refused) = guard(&app, &headers, &q, false) {
        return *refused;
    }
    if !crate::datastream::is_safe_file_stem(&node) {
        let reason = crate::datastream::unsafe_id(&node.as_str().into()).to_string();
        return refuse(StatusCode::BAD_REQUEST, &reason);
    }
    let path = crate::datastream::file_of(&app.state_dir, &node.as_str().into());
    let mut text = String::new();
    let mut offset = 0;
    loop {
        let mut lines = Vec::new();
        let next = match super::watch::read_lines(&path, &node, offset, &mut lines) {
            Ok(next) => next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => {
                let reason = format!("{}: {e}", path.display());
                return refuse(StatusCode::INTERNAL_SERVER_ERROR, &reason);
            }
        };
        for line in lines {
            text.push_str(&line.line);
            text.push('\n');
        }
        if next == offset {
            break;
        }
        offset = next;
    }
    hardened(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// What the page posts to `/api/prompt`.
#[derive(serde::Deserialize)]
struct PromptBody {
    text: String,
    max_tokens: Option<u32>,
}

/// Submits a prompt through the prompt RPC and streams the service's lines
/// back as they come (NDJSON: `TextDelta`s, then `Done` or `Fault`).
async fn prompt(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
    body: Bytes,
) -> Response {
    if let Err(refused) = guard(&app, &headers, &q, true) {
        return *refused;
    }
    if app.read_only {
        return refuse(
            StatusCode::CONFLICT,
            "this dashboard shows a stopped run: no prompts",
        );
    }
    if body.len() > PROMPT_BYTES_MAX {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "the prompt is over 64 KiB");
    }
    let Ok(request) = serde_json::from_slice::<PromptBody>(&body) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "expected {\"text\": ..., \"max_tokens\": ...}",
        );
    };
    let addr = match prompt_addr(&app) {
        Ok(addr) => addr,
        Err(reason) => return refuse(StatusCode::SERVICE_UNAVAILABLE, &reason),
    };
    let mut client = match crate::prompt::Client::connect(addr).await {
        Ok(client) => client,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    if let Err(e) = client.submit(1, &request.text, request.max_tokens).await {
        return refuse(StatusCode::BAD_GATEWAY, &e.to_string());
    }
    let stream = futures_util::stream::unfold(Some(client), |client| async move {
        let mut client = client?;
        match client.next_line().await {
            Ok(Some((line, message))) => {
                let rest = (!message.is_terminal()).then_some(client);
                Some((Ok::<_, Infallible>(Bytes::from(format!("{line}\n"))), rest))
            }
            Ok(None) => None,
            Err(e) => {
                let line =
                    serde_json::json!({ "Fault": { "request_id": 1, "reason": e.to_string() } });
                Some((Ok(Bytes::from(format!("{line}\n"))), None))
            }
        }
    });
    let response = Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    hardened(response)
}

/// The prompt service: `prompt_addr` of `pipeline.json`, else the
/// state dir's `prompt.addr`.
fn prompt_addr(app: &App) -> Result<SocketAddr, String> {
    let from_status = app.hub.state()["pipeline"]["prompt_addr"]
        .as_str()
        .and_then(|a| a.parse().ok());
    match from_status {
        Some(addr) => Ok(addr),
        None => crate::prompt::read_addr(&app.state_dir),
    }
}

/// Token, `Host` and (for a POST) `Origin` checks.
pub(super) fn guard(
    app: &App,
    headers: &HeaderMap,
    query: &BTreeMap<String, String>,
    is_post: bool,
) -> Result<(), Box<Response>> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !is_own_host(host, app.addr.port()) {
        return Err(Box::new(refuse(
            StatusCode::FORBIDDEN,
            "foreign Host header",
        )));
    }
    if is_post
        && let Some(origin) = headers.get(header::ORIGIN)
        && origin.to_str().ok() != Some(format!("http://{host}").as_str())
    {
        return Err(Box::new(refuse(StatusCode::FORBIDDEN, "foreign Origin")));
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let given = query.get("token").map(String::as_str).or(bearer);
    match given {
        Some(given) if same(given.as_bytes(), app.token.as_bytes()) => Ok(()),
        _ => Err(Box::new(refuse(
            StatusCode::UNAUTHORIZED,
            "missing or wrong dashboard token: open the URL `drover up` printed",
        ))),
    }
}

/// `127.0.0.1:PORT`, `localhost:PORT` or `[::1]:PORT`.
fn is_own_host(host: &str, port: u16) -> bool {
    let Some((name, given)) = host.rsplit_once(':') else {
        return false;
    };
    given == port.to_string() && matches!(name, "127.0.0.1" | "localhost" | "[::1]")
}

/// Equal, in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(super) fn refuse(status: StatusCode, reason: &str) -> Response {
    hardened((status, format!("{reason}\n")).into_response())
}

/// Headers every answer carries: never cached, never sent on as a referrer.
pub(super) fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_servers_loopback_host_is_accepted() {
        assert!(is_own_host("127.0.0.1:8080", 8080));
        assert!(is_own_host("localhost:8080", 8080));
        assert!(is_own_host("[::1]:8080", 8080));
        assert!(!is_own_host("evil.example:8080", 8080));
        assert!(!is_own_host("127.0.0.1:8081", 8080));
        assert!(!is_own_host("127.0.0.1", 8080));
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}
