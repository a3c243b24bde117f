//! The session's commands: the probe, the log tails, each verify command
//! and the start command, each under its own timeout, and their exits.

use super::machine::{Failure, Phase, TAILS_MAX};
use super::{Effect, TimerKind, tail_command};
use crate::ids::OpId;
use crate::port::{CommandPurpose, SshError, SshErrorKind};
use crate::time::Instant;

impl super::Machine {
    /// Runs the command of `step` (its `op` is replaced by a fresh one).
    pub(super) fn run(&mut self, now: Instant, step: Phase, out: &mut Vec<Effect>) {
        let t = self.config.boot.timeouts;
        let op = self.next_op();
        let (phase, command, purpose, join, timeout) = match step {
            Phase::Probing { .. } => (
                Phase::Probing { op },
                self.config.probe_command.clone(),
                CommandPurpose::Probe,
                None,
                t.command_timeout,
            ),
            Phase::Verifying { index, .. } => {
                let command = self.config.boot.verify_commands[index as usize].clone();
                (
                    Phase::Verifying { index, op },
                    command,
                    CommandPurpose::Verify(index),
                    None,
                    t.command_timeout,
                )
            }
            Phase::Starting { .. } => {
                let join = Some(self.config.join_binding());
                let command = self.config.boot.start_command.clone();
                (
                    Phase::Starting { op },
                    command,
                    CommandPurpose::Start,
                    join,
                    t.start_timeout,
                )
            }
            other => unreachable!("run: {other:?} is not a command step"),
        };
        self.timers.cancel(&TimerKind::Command);
        self.timers.set(TimerKind::Command, now + timeout);
        self.set_phase(phase, out);
        out.push(Effect::SshExec {
            op,
            command,
            purpose,
            join,
        });
    }

    pub(super) fn on_probe_exit(
        &mut self,
        now: Instant,
        result: Result<i32, SshError>,
        out: &mut Vec<Effect>,
    ) {
        match result {
            Ok(0) => {
                self.start_tails(out);
                self.next_verify(now, 0, out);
            }
            Ok(code) => self.fail(
                now,
                Failure::BootCheckFailed,
                format!("probe exited with {code}"),
                out,
            ),
            Err(e) => self.command_error(now, "probe", Failure::BootCheckFailed, e, out),
        }
    }

    /// Follows the configured sources; a pass through `StdoutStreaming`.
    pub(super) fn start_tails(&mut self, out: &mut Vec<Effect>) {
        let stage = super::Step::StdoutStreaming;
        out.push(Effect::Observed(self.observation(stage)));
        for to_stderr in [false, true] {
            let boot = &self.config.boot;
            let list = match to_stderr {
                false => &boot.stdout_sources,
                true => &boot.stderr_sources,
            };
            if list.is_empty() {
                continue;
            }
            let command = tail_command(list, to_stderr);
            assert!(self.tails.len() < TAILS_MAX, "one tail per stream");
            let op = self.next_op();
            self.tails.push(op);
            out.push(Effect::SshExec {
                op,
                command: command.into(),
                purpose: CommandPurpose::Tail,
                join: None,
            });
        }
    }

    pub(super) fn next_verify(&mut self, now: Instant, index: u32, out: &mut Vec<Effect>) {
        if (index as usize) < self.config.boot.verify_commands.len() {
            self.run(now, Phase::Verifying { index, op: OpId(0) }, out);
        } else {
            self.run(now, Phase::Starting { op: OpId(0) }, out);
        }
    }

    pub(super) fn on_verify_exit(
        &mut self,
        now: Instant,
        index: u32,
        result: Result<i32, SshError>,
        out: &mut Vec<Effect>,
    ) {
        match result {
            Ok(0) => self.next_verify(now, index + 1, out),
            Ok(code) => {
                let why = format!("verify command {index} exited with {code}");
                self.fail(now, Failure::BootCheckFailed, why, out)
            }
            Err(e) => self.command_error(
                now,
                &format!("verify command {index}"),
                Failure::BootCheckFailed,
                e,
                out,
            ),
        }
    }

    pub(super) fn on_start_exit(
        &mut self,
        now: Instant,
        start: OpId,
        result: Result<i32, SshError>,
        out: &mut Vec<Effect>,
    ) {
        match result {
            Ok(0) => {
                self.timers.clear();
                let timeout = self.config.boot.timeouts.join_timeout;
                self.timers.set(TimerKind::Join, now + timeout);
                self.set_phase(Phase::WaitingForJoin { start }, out);
            }
            Ok(code) => self.fail(
                now,
                Failure::StartFailed,
                format!("start command exited with {code}"),
                out,
            ),
            Err(e) => self.command_error(now, "start command", Failure::StartFailed, e, out),
        }
    }

    pub(super) fn on_tail_exit(
        &mut self,
        now: Instant,
        op: OpId,
        result: Result<i32, SshError>,
        out: &mut Vec<Effect>,
    ) {
        self.tails.retain(|tail| *tail != op);
        let live = !matches!(self.phase, Phase::Closing { .. } | Phase::Ended(_));
        if let (true, Err(e)) = (live, result)
            && e.kind == SshErrorKind::Reset
        {
            self.fail(
                now,
                Failure::StreamError,
                format!("log stream broke: {}", e.message),
                out,
            );
        }
    }

    pub(super) fn command_error(
        &mut self,
        now: Instant,
        what: &str,
        failure: Failure,
        e: SshError,
        out: &mut Vec<Effect>,
    ) {
        let failure = if e.kind == SshErrorKind::Reset {
            Failure::StreamError
        } else {
            failure
        };
        self.fail(now, failure, format!("{what} failed: {}", e.message), out);
    }
}
