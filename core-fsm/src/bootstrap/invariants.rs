//! The session's invariants (B1.. in `spec/provisioning.md`), checked
//! after every step in debug builds.

use super::TimerKind;
use super::machine::{End, Machine, Phase, TAILS_MAX};

impl Machine {
    /// Every invariant of this machine (see `spec/provisioning.md`).
    pub(super) fn check_all(&self) {
        let s = self.config.session;
        let t = &self.timers;
        assert!(
            self.tails.len() <= TAILS_MAX,
            "B9 {s}: at most {TAILS_MAX} tails"
        );
        match self.phase {
            Phase::Created => assert!(t.is_empty(), "B1 {s}: nothing before Start"),
            Phase::Connecting { op, attempts } => {
                assert!(
                    t.is_set(&TimerKind::ConnectDeadline),
                    "B2 {s}: connecting is bounded"
                );
                assert!(
                    op.is_none() || t.is_set(&TimerKind::ConnectAttempt),
                    "B2 {s}: each attempt is bounded"
                );
                assert!(
                    attempts <= self.connect_attempts_max(),
                    "B8 {s}: connect attempts bounded"
                );
            }
            Phase::Probing { .. } | Phase::Verifying { .. } | Phase::Starting { .. } => {
                assert!(
                    t.is_set(&TimerKind::Command) && t.len() == 1,
                    "B3 {s}: every command has its own timeout"
                )
            }
            // B4's "only after the start command": the phase holds it.
            Phase::WaitingForJoin { .. } => assert!(
                t.is_set(&TimerKind::Join) && t.len() == 1,
                "B4 {s}: the join wait is bounded"
            ),
            Phase::Closing { .. } => assert!(
                t.is_set(&TimerKind::Close) && t.len() == 1,
                "B5 {s}: closing is bounded"
            ),
            Phase::Ended(_) => assert!(
                t.is_empty() && self.tails.is_empty(),
                "B6 {s}: an ended session holds nothing"
            ),
        }
        if let Phase::Verifying { index, .. } = self.phase {
            let count = self.config.boot.verify_commands.len();
            assert!((index as usize) < count, "B7 {s}: verify index in range");
        }
        if let Phase::Closing {
            end: End::Converged,
            start,
            ..
        } = self.phase
        {
            assert!(
                start.is_some(),
                "B10 {s}: convergence only after the start command"
            );
        }
        if let Some(reason) = self.phase.reason() {
            assert!(!reason.is_empty(), "B11 {s}: a failure has a reason");
        }
        // B12 holds by construction: `Closing` is entered only from the
        // phases after `Created`, where a connect was issued.
    }
}
