//! What the operator reads of a repair: `up`'s lines, the datastream's
//! `prompt` channel and the status file.

use super::HostSink;
use core_fsm::run::{self, RequestId};

impl HostSink {
    pub(super) fn repairing(&self, cause: &run::RunError, repair: u32, request: Option<RequestId>) {
        self.shared.update(|s| s.repairing(repair));
        let waits = match request {
            Some(r) => format!("; request {} resumes after it", r.0),
            None => String::new(),
        };
        let text = format!("repair {repair}: {cause}; rebuilding the pipeline{waits}");
        self.shared.prompt_event(text.clone());
        let line = if self.shared.json {
            serde_json::json!({"event": "repairing", "repair": repair, "cause": cause.to_string(), "request": request.map(|r| r.0)}).to_string()
        } else {
            format!("pipeline: {text}")
        };
        crate::up::view::println_flush(&line);
    }

    pub(super) fn repaired(&self, repair: u32, resumed: Option<(RequestId, u64)>) {
        self.shared.update(|s| s.repaired());
        let text = match resumed {
            Some((r, seq)) => format!(
                "repair {repair} done: serving again; request {} resumes at token {seq}",
                r.0
            ),
            None => format!("repair {repair} done: serving again"),
        };
        self.shared.prompt_event(text.clone());
        let line = if self.shared.json {
            serde_json::json!({"event": "repaired", "repair": repair, "request": resumed.map(|r| r.0.0), "next_token": resumed.map(|r| r.1)}).to_string()
        } else {
            format!("pipeline: {text}")
        };
        crate::up::view::println_flush(&line);
    }
}
