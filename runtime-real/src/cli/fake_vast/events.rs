//! `drover fake-vast`'s stdout: one line per event (`--json`: NDJSON).

use serde_json::json;

/// Event lines on stdout.
#[derive(Clone, Copy, Debug)]
pub struct Events {
    /// NDJSON instead of text.
    pub json: bool,
}

impl Events {
    /// One event line.
    pub fn say(&self, doc: serde_json::Value, text: &str) {
        if self.json {
            crate::stdout::say(&doc.to_string());
        } else {
            crate::stdout::say(text);
        }
    }

    /// One instance event line.
    pub fn instance(&self, id: u64, what: &str, detail: serde_json::Value, text: &str) {
        let mut doc = json!({"event": "instance", "id": id, "what": what});
        if let (Some(doc), Some(detail)) = (doc.as_object_mut(), detail.as_object()) {
            doc.extend(detail.clone());
        }
        self.say(doc, &format!("fake-vast: instance {id} {what}{text}"));
    }
}
