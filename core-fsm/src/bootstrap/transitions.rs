//! The session's transitions. Each sets the phase, then pushes effects; the
//! stage change is reported to the node manager as an observation.

use super::machine::{End, Failure, Phase, TAILS_MAX};
use super::{Effect, LOG_SOURCE, Observation, Outcome, TimerKind, tail_command};
use crate::ids::OpId;
use crate::port::{CommandPurpose, LogRecord, LogStream, SshError, SshErrorKind};
use crate::time::{Duration, Instant};

type Out = Vec<Effect>;

impl super::Machine {
    pub(super) fn on_tick(&mut self, now: Instant, out: &mut Out) {
        for kind in self.timers.take_expired(now) {
            match (kind, self.phase) {
                (TimerKind::ConnectDeadline, Phase::Connecting { attempts, .. }) => {
                    let timeout = self.config.boot.timeouts.ssh_connect_timeout;
                    let why = format!("no SSH session within {timeout} ({attempts} attempts)");
                    self.fail(now, Failure::SshTimeout, why, out);
                }
                (
                    TimerKind::ConnectAttempt,
                    Phase::Connecting {
                        op: Some(_),
                        attempts,
                    },
                ) => {
                    // Abandon the attempt; its late answer is ignored.
                    self.retry_connect(now, attempts);
                }
                (TimerKind::ConnectRetry, Phase::Connecting { op: None, attempts }) => {
                    self.connect(now, attempts + 1, out);
                }
                (TimerKind::Command, Phase::Probing { .. }) => {
                    self.fail(
                        now,
                        Failure::BootCheckFailed,
                        "probe timed out".to_owned(),
                        out,
                    );
                }
                (TimerKind::Command, Phase::Verifying { index, .. }) => {
                    let why = format!("verify command {index} timed out");
                    self.fail(now, Failure::BootCheckFailed, why, out);
                }
                (TimerKind::Command, Phase::Starting { .. }) => {
                    self.fail(
                        now,
                        Failure::StartFailed,
                        "start command timed out".to_owned(),
                        out,
                    );
                }
                (TimerKind::Join, Phase::WaitingForJoin) => {
                    let timeout = self.config.boot.timeouts.join_timeout;
                    self.fail(
                        now,
                        Failure::JoinTimeout,
                        format!("agent did not join within {timeout}"),
                        out,
                    );
                }
                (TimerKind::Close, Phase::Closing { end, .. }) => {
                    // The port did not confirm the close. A handoff needs a
                    // confirmed close (seed 000 §12), so convergence turns
                    // into a stream error; other ends stay what they were.
                    let end = if end == End::Converged {
                        self.reason = Some("SSH close not confirmed".to_owned());
                        End::Failed(Failure::StreamError)
                    } else {
                        end
                    };
                    self.finish(end, out);
                }
                _ => {}
            }
        }
    }

    /// One connect attempt; the first also arms the overall deadline.
    pub(super) fn connect(&mut self, now: Instant, attempts: u32, out: &mut Out) {
        let t = self.config.boot.timeouts;
        if attempts == 1 {
            self.timers
                .set(TimerKind::ConnectDeadline, now + t.ssh_connect_timeout);
        }
        self.timers.cancel(&TimerKind::ConnectRetry);
        self.timers
            .set(TimerKind::ConnectAttempt, now + t.command_timeout);
        let op = self.next_op();
        self.connect_issued = true;
        let first = attempts == 1;
        self.phase = Phase::Connecting {
            op: Some(op),
            attempts,
        };
        if first {
            self.observe(out);
        }
        let endpoint = self.config.endpoint.clone();
        let lease_id = self.config.lease_id.clone();
        out.push(Effect::SshConnect {
            op,
            endpoint,
            lease_id,
        });
    }

    fn retry_connect(&mut self, now: Instant, attempts: u32) {
        self.timers.cancel(&TimerKind::ConnectAttempt);
        self.phase = Phase::Connecting { op: None, attempts };
        let interval = self.config.boot.timeouts.ssh_retry_interval;
        let interval = if interval == Duration::ZERO {
            Duration::from_millis(1)
        } else {
            interval
        };
        // Past the deadline the deadline timer fires first and fails.
        self.timers.set(TimerKind::ConnectRetry, now + interval);
    }

    pub(super) fn on_connected(
        &mut self,
        now: Instant,
        attempts: u32,
        result: Result<(), SshError>,
        out: &mut Out,
    ) {
        match result {
            Ok(()) => {
                self.timers.clear();
                self.run(now, Phase::Probing { op: OpId(0) }, out);
            }
            // A changed host key will not change back: retrying cannot help.
            Err(e) if e.kind == SshErrorKind::HostKeyMismatch => self.fail(
                now,
                Failure::SshTimeout,
                format!("host key mismatch: {}", e.message),
                out,
            ),
            // Refused, auth denied, timeouts, resets: the machine may still
            // be booting, so try again until the connect deadline.
            Err(_) => self.retry_connect(now, attempts),
        }
    }

    /// Runs the command of `step` (its `op` is replaced by a fresh one).
    fn run(&mut self, now: Instant, step: Phase, out: &mut Out) {
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
                self.join_minted = true;
                self.start_op = Some(op);
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
        out: &mut Out,
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
    fn start_tails(&mut self, out: &mut Out) {
        let boot = &self.config.boot;
        let sources = [
            (boot.stdout_sources.clone(), false),
            (boot.stderr_sources.clone(), true),
        ];
        let stage = super::Stage::StdoutStreaming;
        out.push(Effect::Observed(self.observation(stage)));
        for (list, to_stderr) in sources {
            if list.is_empty() {
                continue;
            }
            assert!(self.tails.len() < TAILS_MAX, "one tail per stream");
            let op = self.next_op();
            self.tails.push(op);
            let command = tail_command(&list, to_stderr);
            out.push(Effect::SshExec {
                op,
                command,
                purpose: CommandPurpose::Tail,
                join: None,
            });
        }
    }

    fn next_verify(&mut self, now: Instant, index: u32, out: &mut Out) {
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
        out: &mut Out,
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
        result: Result<i32, SshError>,
        out: &mut Out,
    ) {
        match result {
            Ok(0) => {
                self.timers.clear();
                let timeout = self.config.boot.timeouts.join_timeout;
                self.timers.set(TimerKind::Join, now + timeout);
                self.set_phase(Phase::WaitingForJoin, out);
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
        out: &mut Out,
    ) {
        self.tails.retain(|tail| *tail != op);
        let live = !matches!(self.phase, Phase::Closing { .. } | Phase::Ended { .. });
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

    fn command_error(
        &mut self,
        now: Instant,
        what: &str,
        failure: Failure,
        e: SshError,
        out: &mut Out,
    ) {
        let failure = if e.kind == SshErrorKind::Reset {
            Failure::StreamError
        } else {
            failure
        };
        self.fail(now, failure, format!("{what} failed: {}", e.message), out);
    }

    pub(super) fn on_line(&mut self, now: Instant, stream: LogStream, line: String, out: &mut Out) {
        let seq = match stream {
            LogStream::Stdout => {
                self.stdout_seq += 1;
                self.stdout_seq
            }
            LogStream::Stderr => {
                self.stderr_seq += 1;
                self.stderr_seq
            }
        };
        let c = &self.config;
        out.push(Effect::Log(LogRecord {
            run_id: c.run_id,
            node: c.node.clone(),
            lease_id: c.lease_id.clone(),
            source: LOG_SOURCE.to_owned(),
            stream,
            seq,
            at: now,
            line,
        }));
        out.push(Effect::Observed(self.observation(self.phase.stage())));
    }

    fn fail(&mut self, now: Instant, failure: Failure, why: String, out: &mut Out) {
        self.reason = Some(why);
        self.revoke_join(out);
        if self.connect_issued {
            self.close(now, End::Failed(failure), out);
        } else {
            self.finish(End::Failed(failure), out);
        }
    }

    pub(super) fn revoke_join(&mut self, out: &mut Out) {
        if self.join_minted {
            out.push(Effect::RevokeJoin(self.config.join_binding()));
        }
    }

    /// Closes SSH; every log line is already out, in order, so the
    /// datastream is flushed once the effects before this one are done.
    pub(super) fn close(&mut self, now: Instant, end: End, out: &mut Out) {
        self.timers.clear();
        let op = self.next_op();
        self.set_phase(Phase::Closing { op, end }, out);
        out.push(Effect::SshClose { op });
        let timeout = self.config.boot.timeouts.command_timeout;
        self.timers.set(TimerKind::Close, now + timeout);
    }

    pub(super) fn finish(&mut self, end: End, out: &mut Out) {
        self.timers.clear();
        self.tails.clear();
        self.set_phase(Phase::Ended { end }, out);
        let outcome = match end {
            End::Converged => Outcome::Converged,
            End::Cancelled => Outcome::Cancelled,
            End::Failed(f) => {
                let reason = self.reason.clone().unwrap_or_default();
                Outcome::Failed {
                    stage: f.stage(),
                    reason,
                }
            }
        };
        out.push(Effect::Finished(outcome));
    }

    fn set_phase(&mut self, phase: Phase, out: &mut Out) {
        let changed = self.phase.stage() != phase.stage();
        self.phase = phase;
        if changed {
            self.observe(out);
        }
    }

    fn observe(&self, out: &mut Out) {
        out.push(Effect::Observed(self.observation(self.phase.stage())));
    }

    fn observation(&self, stage: super::Stage) -> Observation {
        let seq = |n: u64| if n == 0 { None } else { Some(n) };
        Observation {
            session: self.config.session,
            stage,
            last_stdout_seq: seq(self.stdout_seq),
            last_stderr_seq: seq(self.stderr_seq),
        }
    }

    fn next_op(&mut self) -> OpId {
        OpId(self.ops.next())
    }
}
