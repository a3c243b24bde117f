//! Clients for the dashboard tests: an SSE reader over reqwest (every wait
//! bounded) and the URL `drover up` prints, split in its parts.

#![allow(dead_code)]

use std::time::Duration;

/// A reqwest client (plain HTTP; rustls wants its provider chosen once).
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// One SSE event.
#[derive(Clone, Debug, PartialEq)]
pub struct SseEvent {
    pub id: String,
    pub kind: String,
    pub data: serde_json::Value,
}

impl SseEvent {
    /// The seq part of `EPOCH-SEQ`.
    pub fn seq(&self) -> u64 {
        self.id.rsplit_once('-').unwrap().1.parse().unwrap()
    }

    /// The epoch part of `EPOCH-SEQ`.
    pub fn epoch(&self) -> &str {
        self.id.rsplit_once('-').unwrap().0
    }
}

/// An open `/events` stream.
pub struct Sse {
    response: reqwest::Response,
    buf: String,
    pub ended: bool,
}

impl Sse {
    /// `GET /events?token=TOKEN`, with `Last-Event-ID` when given.
    pub async fn open(base: &str, token: &str, last_event_id: Option<&str>) -> Sse {
        let mut request = http().get(format!("{base}/events?token={token}"));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse {
            response,
            buf: String::new(),
            ended: false,
        }
    }

    /// The next event within `bound`; `None` when the stream ended.
    pub async fn next(&mut self, bound: Duration) -> Option<SseEvent> {
        tokio::time::timeout(bound, self.next_unbounded())
            .await
            .unwrap_or_else(|_| panic!("no SSE event within {bound:?}"))
    }

    async fn next_unbounded(&mut self) -> Option<SseEvent> {
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                if let Some(event) = parse_block(&block) {
                    return Some(event);
                }
            }
            match self.response.chunk().await.unwrap() {
                Some(chunk) => self.buf.push_str(std::str::from_utf8(&chunk).unwrap()),
                None => {
                    self.ended = true;
                    return None;
                }
            }
        }
    }

    /// Events until one satisfies `want` (included), all within `bound`.
    pub async fn until(
        &mut self,
        bound: Duration,
        mut want: impl FnMut(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        let deadline = tokio::time::Instant::now() + bound;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = match tokio::time::timeout(left, self.next_unbounded()).await {
                Ok(Some(event)) => event,
                Ok(None) => panic!("the stream ended; seen: {seen:#?}"),
                Err(_) => panic!("no matching event within {bound:?}; seen: {seen:#?}"),
            };
            let done = want(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

/// One `id:/event:/data:` block; comments (keep-alives) are none.
fn parse_block(block: &str) -> Option<SseEvent> {
    let (mut id, mut kind, mut data) = (None, None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim_start().to_owned());
        } else if let Some(v) = line.strip_prefix("event:") {
            kind = Some(v.trim_start().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    Some(SseEvent {
        id: id?,
        kind: kind.unwrap_or_else(|| "message".into()),
        data: serde_json::from_str(&data).unwrap(),
    })
}

/// A token of the same length that is surely not `token`: its first
/// hex digit changed (replacing two with "00" was `token` itself in one
/// run of 256).
pub fn wrong_token(token: &str) -> String {
    let first = if token.starts_with('0') { '1' } else { '0' };
    format!("{first}{}", &token[1..])
}

/// `http://127.0.0.1:PORT/?token=T` as (`http://127.0.0.1:PORT`, `T`).
pub fn split_url(url: &str) -> (String, String) {
    let (base, token) = url.split_once("/?token=").unwrap();
    (base.to_owned(), token.to_owned())
}

/// The cards' stages by node, as a snapshot or the node events tell them.
pub fn stages(snapshot: &serde_json::Value) -> Vec<(String, String)> {
    snapshot["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_owned(),
                n["stage"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
pub mod webdriver;

/// Folds an event into the cards' stages (a snapshot replaces them).
pub fn fold(cards: &mut std::collections::BTreeMap<String, String>, event: &SseEvent) {
    match event.kind.as_str() {
        "snapshot" => {
            cards.clear();
            cards.extend(stages(&event.data));
        }
        "node" => {
            let node = &event.data["node"];
            cards.insert(
                node["id"].as_str().unwrap().to_owned(),
                node["stage"].as_str().unwrap().to_owned(),
            );
        }
        _ => {}
    }
}
