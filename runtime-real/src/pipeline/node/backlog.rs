//! The steps an inbound edge has brought and its stage has not yet
//! executed, and the edge's back-pressure: the reader takes the next frame
//! only while fewer than the cap wait, so the rest stay in the stream and
//! QUIC's flow control holds the sender back, stage by stage up to the
//! orchestrator. A stage thus holds a bounded number of steps however many
//! chunks a prompt travels in (a wide model's long prompt: many, of up to
//! 64 MiB each), and its ring (the stage machine's, of the same size) is
//! never overrun by a well-behaved upstream.

use super::super::wire::Step;
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::Notify;

pub(super) struct Backlog {
    steps: Mutex<BTreeMap<u64, Step>>,
    /// A step left: a reader waiting for room looks again.
    drained: Notify,
    cap: usize,
}

impl Backlog {
    /// An empty backlog of at most `cap` steps (at least one, or a reader
    /// would wait for ever: `node.rs` asserts it of its constant).
    pub(super) fn new(cap: usize) -> Backlog {
        Backlog {
            steps: Mutex::new(BTreeMap::new()),
            drained: Notify::new(),
            cap,
        }
    }

    /// Waits until fewer than the cap wait (at once if they do).
    pub(super) async fn room(&self) {
        loop {
            // Registered before the look, so a step leaving in between
            // still wakes it.
            let drained = self.drained.notified();
            if self.steps.lock().expect("backlog").len() < self.cap {
                return;
            }
            drained.await;
        }
    }

    /// Step `seq` arrived.
    pub(super) fn arrive(&self, seq: u64, step: Step) {
        self.steps.lock().expect("backlog").insert(seq, step);
    }

    /// Step `seq`, to execute now.
    pub(super) fn take(&self, seq: u64) -> Option<Step> {
        let step = self.steps.lock().expect("backlog").remove(&seq);
        self.drained.notify_waiters();
        step
    }

    /// Forgets every waiting step (the stage's edges stopped).
    pub(super) fn clear(&self) {
        self.steps.lock().expect("backlog").clear();
        self.drained.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::wire::Payload;
    use std::time::Duration;

    fn step(seq: u64) -> Step {
        Step {
            step: seq,
            request: 1,
            seq: 0,
            pos: 0,
            payload: Payload::Tokens(vec![1]),
            last: false,
        }
    }

    /// Whether `room` resolves within a bound (`false`: it still waits).
    async fn has_room(backlog: &Backlog) -> bool {
        tokio::time::timeout(Duration::from_millis(50), backlog.room())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_full_backlog_holds_the_reader_until_a_step_leaves() {
        let backlog = std::sync::Arc::new(Backlog::new(2));
        assert!(has_room(&backlog).await);
        backlog.arrive(0, step(0));
        assert!(has_room(&backlog).await);
        backlog.arrive(1, step(1));
        assert!(!has_room(&backlog).await, "two of two wait");
        // A reader already waiting is woken by the step that leaves.
        let waiting = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.room().await }
        });
        tokio::task::yield_now().await;
        assert_eq!(backlog.take(0).map(|s| s.step), Some(0));
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken within the bound")
            .expect("the waiter");
        assert_eq!(backlog.take(7), None);
        backlog.arrive(2, step(2));
        assert!(!has_room(&backlog).await);
        backlog.clear();
        assert!(has_room(&backlog).await);
        assert_eq!(backlog.take(1), None, "cleared");
    }
}
