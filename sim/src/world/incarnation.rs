//! Incarnations of the orchestrator: the first boot, a crash (what is
//! lost with it) and the restore from the synced journal.

use super::{Event, Orch, World};
use conformance::System;
use conformance::oracle::Observation;
use core_fsm::port::{Input, JournalRecord};
use core_fsm::time::Duration;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};

impl<S: System> World<'_, S> {
    /// Starts incarnation 1 (`journal` None) or restores the next one.
    pub(super) fn start_incarnation(&mut self, journal: Option<Vec<JournalRecord>>) {
        self.inc += 1;
        let seed = self.case.profile.system_seed ^ u64::from(self.inc).rotate_left(32);
        let plan = &self.plan;
        let built = catch_unwind(AssertUnwindSafe(|| match &journal {
            None => S::boot(plan, seed),
            Some(records) => S::restore(plan, seed, records),
        }));
        let sys = match built {
            Ok(sys) => sys,
            Err(panic) => {
                let what = if journal.is_some() { "restore" } else { "boot" };
                self.violate(
                    "W7",
                    format!(
                        "{what} panicked: {}",
                        conformance::backend::panic_text(&*panic)
                    ),
                );
                return;
            }
        };
        self.digest.update_debug(&("start", self.now, self.inc));
        let inc = self.inc;
        self.note(|| format!("world: orchestrator #{inc} started"));
        self.observe(Observation::Started { inc });
        let first = if self.teardown_wanted {
            Input::Teardown
        } else {
            Input::Start
        };
        self.orch = Some(Orch {
            sys,
            pending: VecDeque::new(),
            inbox: VecDeque::from([first]),
            syncing: false,
            armed: None,
        });
    }

    pub(super) fn crash(&mut self, restart_after_ms: u64, why: &'static str) {
        if self.orch.is_none() || !self.faulty() {
            return;
        }
        self.injected(why);
        self.orch = None;
        self.disk.unsynced = None;
        for session in self.ssh.open_sessions() {
            self.close_connection(session);
        }
        self.ssh.tails.clear();
        self.observe(Observation::Crashed);
        self.op_node.clear();
        self.session_node.clear();
        self.connecting.clear();
        self.stats.restarts += 1;
        self.digest.update_debug(&("crash", self.now, self.inc));
        let inc = self.inc;
        self.note(|| format!("world: orchestrator #{inc} killed ({why})"));
        self.schedule(
            self.now + Duration::from_millis(restart_after_ms),
            Event::Restart,
        );
    }
}
