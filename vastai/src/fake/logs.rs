//! Instance logs (§A.9): `PUT /api/v0/instances/request_logs/{id}/` takes a
//! snapshot of the instance's log from its backend (the last `tail` lines)
//! and answers a `result_url` on the fake itself, standing in for S3:
//! `GET /vast.ai/instance_logs/{name}.log`, which needs no key (the real one
//! is an S3 address) and answers 404 `NoSuchKey` for the first
//! `FakeConfig::log_upload_polls` fetches, as an upload not done yet does.

use super::Shared;
use super::routes::{QueryMap, gate, json_reply, no_such_instance};
use crate::limits::Endpoint;
use crate::wire::as_u64;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

type St = State<Arc<Shared>>;

/// Snapshots kept at once; the oldest goes first (nothing unbounded).
const UPLOADS_MAX: usize = 256;
/// The `tail` of a request that names none (the CLI's default).
const TAIL_DEFAULT: u64 = 1000;

/// One requested log, as "uploaded".
pub(crate) struct Upload {
    /// The log's text, its last `tail` lines.
    pub text: String,
    /// Fetches still to answer 404 before the log is there.
    pub misses_left: u32,
}

/// The last `tail` lines of `text`.
fn tail_of(text: &str, tail: u64) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines
        .len()
        .saturating_sub(usize::try_from(tail).unwrap_or(usize::MAX));
    let mut out = lines[skip..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// `tail` as the CLI sends it (text) or as a number; absent: the default.
fn read_tail(body: &[u8]) -> Result<u64, String> {
    let body: Value = match body {
        [] => return Ok(TAIL_DEFAULT),
        bytes => serde_json::from_slice(bytes).map_err(|_| "Invalid json body".to_owned())?,
    };
    match body.get("tail") {
        None | Some(Value::Null) => Ok(TAIL_DEFAULT),
        Some(value) => {
            as_u64(value).ok_or_else(|| format!("tail: cannot read {value} as a number"))
        }
    }
}

/// `PUT /api/v0/instances/request_logs/{id}/`.
pub(crate) async fn request_logs(
    State(shared): St,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<QueryMap>,
    body: Bytes,
) -> Response {
    if let Err(refusal) = gate(&shared, Endpoint::Logs, &headers, &query, true) {
        return refusal;
    }
    let id: u64 = id.trim().parse().unwrap_or(0);
    let tail = match read_tail(&body) {
        Ok(tail) => tail,
        Err(msg) => {
            return json_reply(
                StatusCode::BAD_REQUEST,
                json!({"success": false, "error": "invalid_args", "msg": msg}),
            );
        }
    };
    let now = shared.now_ms();
    let known = shared
        .lock()
        .instances
        .get(&id)
        .is_some_and(|i| i.status(now, &shared.config.timings).is_some());
    if !known {
        return no_such_instance(id);
    }
    let text = match shared.backend.logs(id).await {
        Ok(text) => tail_of(&text, tail),
        Err(msg) => {
            return json_reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"success": false, "error": "server_error", "msg": msg}),
            );
        }
    };
    let name = {
        let mut inner = shared.lock();
        inner.next_upload += 1;
        let name = format!("{id}-{:08x}", inner.next_upload);
        while inner.uploads.len() >= UPLOADS_MAX {
            inner.uploads.pop_first();
        }
        let misses_left = shared.config.log_upload_polls;
        inner
            .uploads
            .insert(name.clone(), Upload { text, misses_left });
        name
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map_or_else(|| shared.addr.to_string(), str::to_owned);
    let url = format!("http://{host}/vast.ai/instance_logs/{name}.log");
    json_reply(StatusCode::OK, json!({"success": true, "result_url": url}))
}

/// `GET /vast.ai/instance_logs/{name}.log`: the "uploaded" log.
pub(crate) async fn uploaded(State(shared): St, Path(file): Path<String>) -> Response {
    let name = file.strip_suffix(".log").unwrap_or(&file);
    let mut inner = shared.lock();
    let text = match inner.uploads.get_mut(name) {
        Some(upload) if upload.misses_left == 0 => Some(upload.text.clone()),
        Some(upload) => {
            upload.misses_left -= 1;
            None
        }
        None => None,
    };
    match text {
        Some(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/xml")],
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>\
                 <Message>The specified key does not exist.</Message>\
                 <Key>instance_logs/{name}.log</Key></Error>"
            ),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_and_reads_text_counts() {
        assert_eq!(tail_of("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail_of("a\nb", 10), "a\nb\n");
        assert_eq!(tail_of("", 10), "");
        assert_eq!(read_tail(br#"{"tail":"1000"}"#), Ok(1000));
        assert_eq!(read_tail(br#"{"tail":5}"#), Ok(5));
        assert_eq!(read_tail(b""), Ok(TAIL_DEFAULT));
        assert!(read_tail(br#"{"tail":"abc"}"#).unwrap_err().contains("abc"));
    }
}
