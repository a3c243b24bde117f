//! The session's state, its one `match (phase, input)` and its invariants.
//! Transitions live in `transitions.rs`.

use super::Timers;
use super::{Config, Effect, Input, Step, TimerKind};
use crate::ids::{Counter, OpId};
use crate::port::LogSeqs;
use crate::time::Instant;

/// Tail commands at most: one for stdout sources, one for stderr sources.
pub(super) const TAILS_MAX: usize = 2;

/// Why a session failed; each is a terminal stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Failure {
    SshTimeout,
    BootCheckFailed,
    StartFailed,
    JoinTimeout,
    StreamError,
}

impl Failure {
    pub(super) fn stage(self) -> Step {
        match self {
            Failure::SshTimeout => Step::SshTimeout,
            Failure::BootCheckFailed => Step::BootCheckFailed,
            Failure::StartFailed => Step::StartFailed,
            Failure::JoinTimeout => Step::JoinTimeout,
            Failure::StreamError => Step::StreamError,
        }
    }
}

/// How a session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Converged,
    Failed(Failure),
    Cancelled,
}

/// The session's phase; each variant holds only what is valid in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Created,
    /// `op` is `None` while waiting for the next attempt.
    Connecting {
        op: Option<OpId>,
        attempts: u32,
    },
    Probing {
        op: OpId,
    },
    Verifying {
        index: u32,
        op: OpId,
    },
    Starting {
        op: OpId,
    },
    WaitingForJoin,
    Closing {
        op: OpId,
        end: End,
    },
    Ended {
        end: End,
    },
}

impl Phase {
    pub(super) fn stage(self) -> Step {
        match self {
            Phase::Created => Step::Created,
            Phase::Connecting { .. } => Step::SshConnecting,
            Phase::Probing { .. } => Step::SshReady,
            Phase::Verifying { .. } => Step::BootChecking,
            Phase::Starting { .. } => Step::AgentStarting,
            Phase::WaitingForJoin => Step::WaitingForJoin,
            Phase::Closing {
                end: End::Converged,
                ..
            } => Step::Converged,
            Phase::Ended {
                end: End::Converged,
            } => Step::Closed,
            Phase::Closing {
                end: End::Failed(f),
                ..
            }
            | Phase::Ended {
                end: End::Failed(f),
            } => f.stage(),
            Phase::Closing {
                end: End::Cancelled,
                ..
            }
            | Phase::Ended {
                end: End::Cancelled,
            } => Step::Cancelled,
        }
    }

    /// The command whose output and exit belong to the current step.
    fn command_op(self) -> Option<OpId> {
        match self {
            Phase::Probing { op } | Phase::Verifying { op, .. } | Phase::Starting { op } => {
                Some(op)
            }
            _ => None,
        }
    }
}

/// One bootstrap session.
#[derive(Clone, Debug)]
pub struct Machine {
    pub(super) config: Config,
    pub(super) phase: Phase,
    pub(super) timers: Timers,
    /// Operation ids; the composite lends its own counter (see `swap_ids`).
    pub(super) ops: Counter,
    /// Sequence numbers of the node's last stdout/stderr line (0: none
    /// yet), starting from the configured `log_seqs`.
    pub(super) stdout_seq: u64,
    pub(super) stderr_seq: u64,
    /// Running tail commands.
    pub(super) tails: Vec<OpId>,
    /// A connect was issued, so the close path must run.
    pub(super) connect_issued: bool,
    /// The start command ran, so an unused token may exist.
    pub(super) join_minted: bool,
    /// The start command's operation, once it ran.
    pub(super) start_op: Option<OpId>,
    /// Why the session failed.
    pub(super) reason: Option<String>,
    /// Inputs ignored as late, duplicate, unknown or out of place.
    pub(super) ignored: u64,
}

impl Machine {
    /// A session in `Created`.
    pub fn new(config: Config) -> Machine {
        let LogSeqs { stdout, stderr } = config.log_seqs;
        Machine {
            config,
            phase: Phase::Created,
            timers: Timers::new(),
            ops: Counter::starting_at(1),
            stdout_seq: stdout,
            stderr_seq: stderr,
            tails: Vec::new(),
            connect_issued: false,
            join_minted: false,
            start_op: None,
            reason: None,
            ignored: 0,
        }
    }

    /// The session's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The stage.
    pub fn stage(&self) -> Step {
        self.phase.stage()
    }

    /// Whether the session is over.
    pub fn is_ended(&self) -> bool {
        matches!(self.phase, Phase::Ended { .. })
    }

    /// Inputs ignored as late, duplicate, unknown or out of place.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Why it failed, if it did.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Operations whose answers the session still awaits.
    pub fn live_ops(&self) -> impl Iterator<Item = OpId> + '_ {
        let current = match self.phase {
            Phase::Connecting { op, .. } => op,
            Phase::Closing { op, .. } => Some(op),
            phase => phase.command_op(),
        };
        current.into_iter().chain(self.tails.iter().copied())
    }

    /// Swaps the operation counter with the caller's (see
    /// [`crate::node::Machine::swap_ids`]).
    pub fn swap_ids(&mut self, ops: &mut Counter) {
        std::mem::swap(&mut self.ops, ops);
    }

    /// The most connect attempts the timeouts allow (B8).
    pub(super) fn connect_attempts_max(&self) -> u32 {
        let t = &self.config.boot.timeouts;
        let interval = t.ssh_retry_interval.as_millis().max(1);
        let attempts = t.ssh_connect_timeout.as_millis() / interval + 2;
        u32::try_from(attempts).unwrap_or(u32::MAX)
    }

    pub(super) fn owns_output(&self, op: OpId) -> bool {
        // A foreground start command keeps printing after the agent joined;
        // its lines are logged until SSH is closed (SPEC.md "Bootstrap session": flushed
        // before close).
        let start_live = self.start_op == Some(op) && !matches!(self.phase, Phase::Ended { .. });
        self.phase.command_op() == Some(op) || self.tails.contains(&op) || start_live
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        self.step(now, input, &mut out);
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    fn check_invariants(&self) {
        self.check_all();
    }
}

impl Machine {
    /// The one `match`: `handle`, pushing the effects onto `out`.
    fn step(&mut self, now: Instant, input: Input, out: &mut Vec<Effect>) {
        // By input, then phase: the input is matched where it lies, not
        // first copied into a pair with the phase.
        let phase = self.phase;
        match input {
            Input::Tick => self.on_tick(now, out),
            Input::Start => match phase {
                Phase::Created => self.connect(now, 1, out),
                _ => self.ignored += 1,
            },
            Input::SshConnected { op: got, result } => match phase {
                Phase::Connecting {
                    op: Some(op),
                    attempts,
                } if op == got => self.on_connected(now, attempts, result, out),
                _ => self.ignored += 1,
            },
            Input::SshOutput { op, stream, line } if self.owns_output(op) => {
                self.on_line(now, stream, line, out)
            }
            Input::SshOutput { .. } => self.ignored += 1,
            Input::SshExited { op: got, result } => match phase {
                Phase::Probing { op } if op == got => self.on_probe_exit(now, result, out),
                Phase::Verifying { index, op } if op == got => {
                    self.on_verify_exit(now, index, result, out)
                }
                Phase::Starting { op } if op == got => self.on_start_exit(now, result, out),
                _ if self.tails.contains(&got) => self.on_tail_exit(now, got, result, out),
                _ => self.ignored += 1,
            },
            // A start command that stays in the foreground may still be
            // running when the agent joins.
            Input::ConvergenceObserved { .. } => match phase {
                Phase::Starting { .. } | Phase::WaitingForJoin => {
                    self.close(now, End::Converged, out)
                }
                _ => self.ignored += 1,
            },
            Input::SshClosed { op: got } => match phase {
                Phase::Closing { op, end } if op == got => self.finish(end, out),
                _ => self.ignored += 1,
            },
            Input::Cancel => match phase {
                Phase::Created => self.finish(End::Cancelled, out),
                Phase::Connecting { .. }
                | Phase::Probing { .. }
                | Phase::Verifying { .. }
                | Phase::Starting { .. }
                | Phase::WaitingForJoin => {
                    self.revoke_join(out);
                    self.close(now, End::Cancelled, out)
                }
                Phase::Closing { .. } | Phase::Ended { .. } => self.ignored += 1,
            },
        }
    }

    /// Every invariant of this machine (see `spec/provisioning.md`).
    fn check_all(&self) {
        let s = self.config.session;
        let t = &self.timers;
        assert!(
            self.tails.len() <= TAILS_MAX,
            "B9 {s}: at most {TAILS_MAX} tails"
        );
        match self.phase {
            Phase::Created => assert!(
                t.is_empty() && !self.connect_issued,
                "B1 {s}: nothing before Start"
            ),
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
            Phase::WaitingForJoin => {
                assert!(
                    t.is_set(&TimerKind::Join) && t.len() == 1,
                    "B4 {s}: the join wait is bounded"
                );
                assert!(
                    self.join_minted,
                    "B4 {s}: waiting for a join only after the start command"
                );
            }
            Phase::Closing { .. } => assert!(
                t.is_set(&TimerKind::Close) && t.len() == 1,
                "B5 {s}: closing is bounded"
            ),
            Phase::Ended { .. } => assert!(
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
            ..
        }
        | Phase::Ended {
            end: End::Converged,
        } = self.phase
        {
            assert!(
                self.join_minted,
                "B10 {s}: convergence only after the start command"
            );
        }
        if let Phase::Closing {
            end: End::Failed(_),
            ..
        }
        | Phase::Ended {
            end: End::Failed(_),
        } = self.phase
        {
            assert!(self.reason.is_some(), "B11 {s}: a failure has a reason");
        }
        if matches!(self.phase, Phase::Closing { .. }) {
            assert!(
                self.connect_issued,
                "B12 {s}: only an opened connection is closed"
            );
        }
    }
}
