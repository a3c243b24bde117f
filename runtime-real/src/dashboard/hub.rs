//! [`Hub`]: the one ordered stream of dashboard events, shared by every page.
//!
//! The watcher applies what it read to the [`Model`] under the hub's lock
//! and appends the events it produced to a bounded ring, each numbered by
//! the hub (`seq`, from 1, without gaps). An event's SSE id is
//! `EPOCH-SEQ`: the epoch is drawn when the hub starts or when the state
//! dir starts holding another run, so an id of another server or run is
//! never taken for one of this. A page follows with a [`Cursor`]: it
//! resumes after the id it last saw when the ring still holds what came
//! after; otherwise it gets a `gap` event (what was missed and why) and a
//! fresh `snapshot`, never a silent loss.

use super::model::Model;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Events the ring keeps by default.
pub const RING_MAX: usize = 4096;
/// Most events one [`Hub::next`] hands out.
const BATCH_MAX: usize = 256;

/// One event as it goes out: its SSE id, name and JSON data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Out {
    /// `EPOCH-SEQ`.
    pub id: String,
    /// The SSE event name (`snapshot`, `node`, `log`, ...).
    pub kind: &'static str,
    /// The data, one line of JSON.
    pub data: String,
}

/// An event in the ring.
#[derive(Debug)]
struct Event {
    seq: u64,
    kind: &'static str,
    data: String,
}

struct Inner {
    epoch: String,
    /// The seq of the last event appended (0: none yet).
    last_seq: u64,
    ring: VecDeque<Event>,
    ring_max: usize,
    model: Model,
    closed: bool,
}

/// The shared stream (see the module doc).
pub struct Hub {
    inner: Mutex<Inner>,
    wake: watch::Sender<u64>,
}

/// Where one page stands in the stream.
#[derive(Clone, Debug)]
pub struct Cursor {
    /// The id the page resumes after (its `Last-Event-ID`), until the
    /// first batch.
    resume: Option<String>,
    started: bool,
    epoch: String,
    seq: u64,
}

impl Cursor {
    /// A cursor for a page that last saw `last_event_id` (none: a new page).
    pub fn new(last_event_id: Option<String>) -> Cursor {
        Cursor {
            resume: last_event_id.filter(|s| !s.trim().is_empty()),
            started: false,
            epoch: String::new(),
            seq: 0,
        }
    }
}

/// `EPOCH-SEQ` split in two.
pub fn parse_id(id: &str) -> Option<(&str, u64)> {
    let (epoch, seq) = id.trim().rsplit_once('-')?;
    Some((epoch, seq.parse().ok()?))
}

/// A fresh epoch: 8 hex digits from the system's random source.
fn new_epoch() -> String {
    let mut bytes = [0u8; 4];
    let _ = rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Hub {
    /// A hub over `model` keeping at most `ring_max` events.
    pub fn new(model: Model, ring_max: usize) -> Arc<Hub> {
        Arc::new(Hub {
            inner: Mutex::new(Inner {
                epoch: new_epoch(),
                last_seq: 0,
                ring: VecDeque::new(),
                ring_max: ring_max.max(1),
                model,
                closed: false,
            }),
            wake: watch::channel(0).0,
        })
    }

    /// A receiver that changes whenever events are appended or the hub
    /// closes.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// Applies `change` to the model; the events it returns are appended.
    /// With `reset`, the model is replaced by `fresh` first and a new epoch
    /// begins (the state dir holds another run): every page resyncs.
    pub fn apply<F>(&self, reset: Option<Model>, change: F)
    where
        F: FnOnce(&mut Model) -> Vec<(&'static str, serde_json::Value)>,
    {
        let last = {
            let mut inner = self.inner.lock().expect("dashboard hub");
            if let Some(fresh) = reset {
                inner.model = fresh;
                inner.epoch = new_epoch();
                inner.ring.clear();
                inner.last_seq = 0;
            }
            let events = change(&mut inner.model);
            for (kind, data) in events {
                inner.last_seq += 1;
                let seq = inner.last_seq;
                inner.ring.push_back(Event {
                    seq,
                    kind,
                    data: data.to_string(),
                });
                if inner.ring.len() > inner.ring_max {
                    inner.ring.pop_front();
                }
            }
            inner.last_seq
        };
        self.wake.send_modify(|n| *n = n.wrapping_add(1).max(last));
    }

    /// A snapshot of the model as JSON (what `GET /api/state` answers).
    pub fn state(&self) -> serde_json::Value {
        let inner = self.inner.lock().expect("dashboard hub");
        snapshot_value(&inner)
    }

    /// The full text of the stream's `snapshot` data and its id (tests).
    pub fn last_id(&self) -> String {
        let inner = self.inner.lock().expect("dashboard hub");
        format!("{}-{}", inner.epoch, inner.last_seq)
    }

    /// Ends the stream: pages get what is in the ring, then their stream
    /// ends.
    pub fn close(&self) {
        self.inner.lock().expect("dashboard hub").closed = true;
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The next events for `cursor` (empty: none yet); `None` once the hub
    /// closed and the cursor has everything.
    pub fn next(&self, cursor: &mut Cursor) -> Option<Vec<Out>> {
        let inner = self.inner.lock().expect("dashboard hub");
        let mut out = Vec::new();
        if !cursor.started {
            cursor.started = true;
            match cursor.resume.take() {
                None => resync(&inner, cursor, &mut out, None),
                Some(id) => match resumable(&inner, &id) {
                    Ok(seq) => {
                        cursor.epoch = inner.epoch.clone();
                        cursor.seq = seq;
                        out.push(hello(&inner, cursor, "replay", Some(&id)));
                    }
                    Err(reason) => {
                        let gap = serde_json::json!({ "reason": reason, "last_event_id": id });
                        resync(&inner, cursor, &mut out, Some(gap));
                    }
                },
            }
        } else if cursor.epoch != inner.epoch {
            let gap = serde_json::json!({ "reason": "the state dir holds another run" });
            resync(&inner, cursor, &mut out, Some(gap));
        } else if inner.ring.front().is_some_and(|e| e.seq > cursor.seq + 1) {
            let front = inner.ring.front().map_or(0, |e| e.seq);
            let gap = serde_json::json!({
                "reason": "this page fell behind the event ring",
                "missed": front - cursor.seq - 1,
            });
            resync(&inner, cursor, &mut out, Some(gap));
        }
        let start = inner.ring.partition_point(|e| e.seq <= cursor.seq);
        for event in inner.ring.range(start..).take(BATCH_MAX) {
            cursor.seq = event.seq;
            out.push(Out {
                id: format!("{}-{}", inner.epoch, event.seq),
                kind: event.kind,
                data: event.data.clone(),
            });
        }
        if out.is_empty() && inner.closed {
            return None;
        }
        Some(out)
    }
}

/// The seq after which `id` may resume, or why it may not.
fn resumable(inner: &Inner, id: &str) -> Result<u64, String> {
    let Some((epoch, seq)) = parse_id(id) else {
        return Err(format!("`{id}` is not an event id of this dashboard"));
    };
    if epoch != inner.epoch {
        return Err("the id is of another server or run: resynced".into());
    }
    if seq > inner.last_seq {
        return Err(format!("event {seq} was never sent"));
    }
    let front = inner.ring.front().map_or(inner.last_seq + 1, |e| e.seq);
    if seq + 1 < front {
        return Err(format!(
            "{} event(s) after it are no longer kept",
            front - seq - 1
        ));
    }
    Ok(seq)
}

fn hello(inner: &Inner, cursor: &Cursor, mode: &str, from: Option<&str>) -> Out {
    let data = serde_json::json!({
        "epoch": inner.epoch, "mode": mode, "resumed_from": from,
        "server_ms": super::model::unix_ms(),
    });
    Out {
        id: format!("{}-{}", cursor.epoch, cursor.seq),
        kind: "hello",
        data: data.to_string(),
    }
}

/// A `gap` (when something was missed), then a snapshot at the ring's end.
fn resync(inner: &Inner, cursor: &mut Cursor, out: &mut Vec<Out>, gap: Option<serde_json::Value>) {
    cursor.epoch = inner.epoch.clone();
    cursor.seq = inner.last_seq;
    let id = format!("{}-{}", inner.epoch, inner.last_seq);
    out.push(hello(inner, cursor, "snapshot", None));
    if let Some(gap) = gap {
        out.push(Out {
            id: id.clone(),
            kind: "gap",
            data: gap.to_string(),
        });
    }
    out.push(Out {
        id,
        kind: "snapshot",
        data: snapshot_value(inner).to_string(),
    });
}

fn snapshot_value(inner: &Inner) -> serde_json::Value {
    let mut value = inner.model.snapshot();
    value["epoch"] = inner.epoch.clone().into();
    value["seq"] = inner.last_seq.into();
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(hub: &Hub, n: u64) {
        hub.apply(None, |_| {
            (0..n)
                .map(|i| ("log", serde_json::json!({ "i": i })))
                .collect()
        });
    }

    fn kinds(out: &[Out]) -> Vec<&str> {
        out.iter().map(|o| o.kind).collect()
    }

    fn seq_of(out: &Out) -> u64 {
        parse_id(&out.id).unwrap().1
    }

    #[test]
    fn a_new_page_gets_a_snapshot_then_every_event_in_order() {
        let hub = Hub::new(Model::new(false), 16);
        push(&hub, 3);
        let mut cursor = Cursor::new(None);
        let first = hub.next(&mut cursor).unwrap();
        assert_eq!(kinds(&first), ["hello", "snapshot"]);
        assert_eq!(seq_of(&first[1]), 3, "the snapshot covers events 1..=3");
        assert_eq!(hub.next(&mut cursor).unwrap(), vec![]);
        push(&hub, 2);
        let next = hub.next(&mut cursor).unwrap();
        assert_eq!(next.iter().map(seq_of).collect::<Vec<_>>(), [4, 5]);
    }

    #[test]
    fn a_page_resumes_after_its_last_event_id_without_loss() {
        let hub = Hub::new(Model::new(false), 16);
        push(&hub, 5);
        let id = format!("{}-2", hub.last_id().rsplit_once('-').unwrap().0);
        let mut cursor = Cursor::new(Some(id));
        let out = hub.next(&mut cursor).unwrap();
        assert_eq!(kinds(&out), ["hello", "log", "log", "log"]);
        assert_eq!(out[1..].iter().map(seq_of).collect::<Vec<_>>(), [3, 4, 5]);
    }

    #[test]
    fn a_page_that_fell_behind_gets_a_gap_and_a_snapshot() {
        let hub = Hub::new(Model::new(false), 4);
        let mut cursor = Cursor::new(None);
        hub.next(&mut cursor).unwrap();
        push(&hub, 10);
        let out = hub.next(&mut cursor).unwrap();
        assert_eq!(kinds(&out), ["hello", "gap", "snapshot"]);
        let gap: serde_json::Value = serde_json::from_str(&out[1].data).unwrap();
        assert_eq!(gap["missed"], 6, "{gap}");
        assert_eq!(seq_of(&out[2]), 10);
        // An id older than the ring, or of another epoch, resyncs too.
        let epoch = hub.last_id().rsplit_once('-').unwrap().0.to_owned();
        for id in [format!("{epoch}-1"), "0badbeef-3".into(), "junk".into()] {
            let out = hub.next(&mut Cursor::new(Some(id.clone()))).unwrap();
            assert_eq!(kinds(&out), ["hello", "gap", "snapshot"], "{id}");
        }
    }

    #[test]
    fn a_new_run_starts_a_new_epoch_and_every_page_resyncs() {
        let hub = Hub::new(Model::new(false), 16);
        let mut cursor = Cursor::new(None);
        hub.next(&mut cursor).unwrap();
        push(&hub, 2);
        let before = hub.last_id();
        hub.apply(Some(Model::new(false)), |_| vec![]);
        assert_ne!(hub.last_id(), before);
        let out = hub.next(&mut cursor).unwrap();
        assert_eq!(kinds(&out), ["hello", "gap", "snapshot"]);
    }

    #[test]
    fn a_closed_hub_drains_then_ends() {
        let hub = Hub::new(Model::new(false), 16);
        let mut cursor = Cursor::new(None);
        hub.next(&mut cursor).unwrap();
        push(&hub, 1);
        hub.close();
        assert_eq!(hub.next(&mut cursor).unwrap().len(), 1);
        assert_eq!(hub.next(&mut cursor), None);
    }
}
