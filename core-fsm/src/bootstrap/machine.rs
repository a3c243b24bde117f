//! The session's state and its one `match (phase, event)`; the invariants
//! are in `invariants.rs`.
//! The transitions live in `transitions.rs` and `commands.rs`.

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum End {
    Converged,
    /// The failure and why, for people and the node record.
    Failed(Failure, String),
    Cancelled,
}

/// The session's phase; each variant holds only what is valid in it. A
/// connection is open (or being opened) in every phase between `Created`
/// and `Ended`; a join token may exist from `Starting` on, and `start` is
/// the start command whose lines are still logged until SSH is closed.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    WaitingForJoin {
        start: OpId,
    },
    Closing {
        op: OpId,
        end: End,
        start: Option<OpId>,
    },
    Ended(End),
}

impl Phase {
    pub(super) fn stage(&self) -> Step {
        match self {
            Phase::Created => Step::Created,
            Phase::Connecting { .. } => Step::SshConnecting,
            Phase::Probing { .. } => Step::SshReady,
            Phase::Verifying { .. } => Step::BootChecking,
            Phase::Starting { .. } => Step::AgentStarting,
            Phase::WaitingForJoin { .. } => Step::WaitingForJoin,
            Phase::Closing {
                end: End::Converged,
                ..
            } => Step::Converged,
            Phase::Ended(End::Converged) => Step::Closed,
            Phase::Closing {
                end: End::Failed(f, _),
                ..
            }
            | Phase::Ended(End::Failed(f, _)) => f.stage(),
            Phase::Closing {
                end: End::Cancelled,
                ..
            }
            | Phase::Ended(End::Cancelled) => Step::Cancelled,
        }
    }

    /// The command whose output and exit belong to the current step.
    fn command_op(&self) -> Option<OpId> {
        match *self {
            Phase::Probing { op } | Phase::Verifying { op, .. } | Phase::Starting { op } => {
                Some(op)
            }
            _ => None,
        }
    }

    /// The start command, once it ran and until SSH is closed: its token
    /// may be unused, and a foreground one keeps printing after the join.
    pub(super) fn start_op(&self) -> Option<OpId> {
        match *self {
            Phase::Starting { op } | Phase::WaitingForJoin { start: op } => Some(op),
            Phase::Closing { start, .. } => start,
            _ => None,
        }
    }

    /// Why the session failed, if it did.
    pub(super) fn reason(&self) -> Option<&str> {
        match self {
            Phase::Closing {
                end: End::Failed(_, reason),
                ..
            }
            | Phase::Ended(End::Failed(_, reason)) => Some(reason),
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
        matches!(self.phase, Phase::Ended(_))
    }

    /// Inputs ignored as late, duplicate, unknown or out of place.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Why it failed, if it did.
    pub fn reason(&self) -> Option<&str> {
        self.phase.reason()
    }

    /// Operations whose answers the session still awaits.
    pub fn live_ops(&self) -> impl Iterator<Item = OpId> + '_ {
        let current = match &self.phase {
            Phase::Connecting { op, .. } => *op,
            Phase::Closing { op, .. } => Some(*op),
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
        self.phase.command_op() == Some(op)
            || self.tails.contains(&op)
            || self.phase.start_op() == Some(op)
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

/// An input, or a timer of the session's own that fired.
enum Event {
    In(Input),
    Fire(TimerKind),
}

impl Machine {
    /// `handle`, pushing the effects onto `out`: a tick becomes one event
    /// per expired timer.
    fn step(&mut self, now: Instant, input: Input, out: &mut Vec<Effect>) {
        match input {
            Input::Tick => {
                for kind in self.timers.take_expired(now) {
                    self.dispatch(now, Event::Fire(kind), out);
                }
            }
            input => self.dispatch(now, Event::In(input), out),
        }
    }

    /// The one `match (phase, event)`. Each arm's transition sets the next
    /// phase itself (announcing a stage change to the node manager at the
    /// point it happens); an input out of place is counted and dropped, a
    /// timer out of place does nothing.
    fn dispatch(&mut self, now: Instant, event: Event, out: &mut Vec<Effect>) {
        use Event::{Fire, In};
        match (self.phase.clone(), event) {
            (Phase::Created, In(Input::Start)) => self.connect(now, 1, out),
            (
                Phase::Connecting {
                    op: Some(op),
                    attempts,
                },
                In(Input::SshConnected { op: got, result }),
            ) if op == got => self.on_connected(now, attempts, result, out),
            (_, In(Input::SshOutput { op, stream, line })) if self.owns_output(op) => {
                self.on_line(now, stream, line, out)
            }
            (Phase::Probing { op }, In(Input::SshExited { op: got, result })) if op == got => {
                self.on_probe_exit(now, result, out)
            }
            (Phase::Verifying { index, op }, In(Input::SshExited { op: got, result }))
                if op == got =>
            {
                self.on_verify_exit(now, index, result, out)
            }
            (Phase::Starting { op }, In(Input::SshExited { op: got, result })) if op == got => {
                self.on_start_exit(now, op, result, out)
            }
            (_, In(Input::SshExited { op, result })) if self.tails.contains(&op) => {
                self.on_tail_exit(now, op, result, out)
            }
            // A start command that stays in the foreground may still be
            // running when the agent joins.
            (
                Phase::Starting { .. } | Phase::WaitingForJoin { .. },
                In(Input::ConvergenceObserved { .. }),
            ) => self.close(now, End::Converged, out),
            (Phase::Closing { op, end, .. }, In(Input::SshClosed { op: got })) if op == got => {
                self.finish(end, out)
            }
            (Phase::Created, In(Input::Cancel)) => self.finish(End::Cancelled, out),
            (
                Phase::Connecting { .. }
                | Phase::Probing { .. }
                | Phase::Verifying { .. }
                | Phase::Starting { .. }
                | Phase::WaitingForJoin { .. },
                In(Input::Cancel),
            ) => {
                self.revoke_join(out);
                self.close(now, End::Cancelled, out)
            }
            (_, In(_)) => self.ignored += 1,

            (Phase::Connecting { attempts, .. }, Fire(TimerKind::ConnectDeadline)) => {
                let timeout = self.config.boot.timeouts.ssh_connect_timeout;
                let why = format!("no SSH session within {timeout} ({attempts} attempts)");
                self.fail(now, Failure::SshTimeout, why, out);
            }
            // Abandon the attempt; its late answer is ignored.
            (
                Phase::Connecting {
                    op: Some(_),
                    attempts,
                },
                Fire(TimerKind::ConnectAttempt),
            ) => self.retry_connect(now, attempts),
            (Phase::Connecting { op: None, attempts }, Fire(TimerKind::ConnectRetry)) => {
                self.connect(now, attempts + 1, out)
            }
            (Phase::Probing { .. }, Fire(TimerKind::Command)) => {
                let why = "probe timed out".to_owned();
                self.fail(now, Failure::BootCheckFailed, why, out)
            }
            (Phase::Verifying { index, .. }, Fire(TimerKind::Command)) => {
                let why = format!("verify command {index} timed out");
                self.fail(now, Failure::BootCheckFailed, why, out);
            }
            (Phase::Starting { .. }, Fire(TimerKind::Command)) => {
                let why = "start command timed out".to_owned();
                self.fail(now, Failure::StartFailed, why, out)
            }
            (Phase::WaitingForJoin { .. }, Fire(TimerKind::Join)) => {
                let timeout = self.config.boot.timeouts.join_timeout;
                let why = format!("agent did not join within {timeout}");
                self.fail(now, Failure::JoinTimeout, why, out);
            }
            // The port did not confirm the close. A handoff needs a
            // confirmed close (SPEC.md "Bootstrap session"), so convergence
            // turns into a stream error; other ends stay what they were.
            (Phase::Closing { end, .. }, Fire(TimerKind::Close)) => {
                let end = match end {
                    End::Converged => {
                        let why = "SSH close not confirmed".to_owned();
                        End::Failed(Failure::StreamError, why)
                    }
                    end => end,
                };
                self.finish(end, out)
            }
            (_, Fire(_)) => {}
        }
    }
}
