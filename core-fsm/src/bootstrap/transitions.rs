//! The session's transitions. Each sets the phase, then pushes effects; the
//! stage change is reported to the node manager as an observation. This
//! file holds connecting, log lines and the end; the commands are in
//! `commands.rs`, the `match` in `machine.rs`.

use super::machine::{End, Failure, Phase};
use super::{Effect, LOG_SOURCE, Observation, Outcome, TimerKind};
use crate::ids::OpId;
use crate::port::{LogRecord, LogStream, SshError, SshErrorKind};
use crate::time::{Duration, Instant};

impl super::Machine {
    /// One connect attempt; the first also arms the overall deadline.
    pub(super) fn connect(&mut self, now: Instant, attempts: u32, out: &mut Vec<Effect>) {
        let t = self.config.boot.timeouts;
        if attempts == 1 {
            self.timers
                .set(TimerKind::ConnectDeadline, now + t.ssh_connect_timeout);
        }
        self.timers.cancel(&TimerKind::ConnectRetry);
        self.timers
            .set(TimerKind::ConnectAttempt, now + t.command_timeout);
        let op = self.next_op();
        let first = attempts == 1;
        self.phase = Phase::Connecting {
            op: Some(op),
            attempts,
        };
        if first {
            out.push(Effect::Observed(
                self.observation(super::Step::SshConnecting),
            ));
        }
        let endpoint = self.config.endpoint.clone();
        let lease_id = self.config.lease_id.clone();
        out.push(Effect::SshConnect {
            op,
            endpoint,
            lease_id,
        });
    }

    pub(super) fn retry_connect(&mut self, now: Instant, attempts: u32) {
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
        out: &mut Vec<Effect>,
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

    pub(super) fn on_line(
        &mut self,
        now: Instant,
        stream: LogStream,
        line: String,
        out: &mut Vec<Effect>,
    ) {
        // Saturating: the numbers continue from a file a person can edit,
        // and one at the limit must not wrap to a number already used.
        let seq = match stream {
            LogStream::Stdout => {
                self.stdout_seq = self.stdout_seq.saturating_add(1);
                self.stdout_seq
            }
            LogStream::Stderr => {
                self.stderr_seq = self.stderr_seq.saturating_add(1);
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

    pub(super) fn fail(
        &mut self,
        now: Instant,
        failure: Failure,
        why: String,
        out: &mut Vec<Effect>,
    ) {
        self.revoke_join(out);
        let end = End::Failed(failure, why);
        if self.phase == Phase::Created {
            self.finish(end, out);
        } else {
            self.close(now, end, out);
        }
    }

    /// Revokes the join token of a start command that ran, since the
    /// session ends without using it.
    pub(super) fn revoke_join(&mut self, out: &mut Vec<Effect>) {
        if self.phase.start_op().is_some() {
            out.push(Effect::RevokeJoin(self.config.join_binding()));
        }
    }

    /// Closes SSH; every log line is already out, in order, so the
    /// datastream is flushed once the effects before this one are done.
    pub(super) fn close(&mut self, now: Instant, end: End, out: &mut Vec<Effect>) {
        self.timers.clear();
        let op = self.next_op();
        let start = self.phase.start_op();
        self.set_phase(Phase::Closing { op, end, start }, out);
        out.push(Effect::SshClose { op });
        let timeout = self.config.boot.timeouts.command_timeout;
        self.timers.set(TimerKind::Close, now + timeout);
    }

    pub(super) fn finish(&mut self, end: End, out: &mut Vec<Effect>) {
        self.timers.clear();
        self.tails.clear();
        let outcome = match &end {
            End::Converged => Outcome::Converged,
            End::Cancelled => Outcome::Cancelled,
            End::Failed(f, reason) => Outcome::Failed {
                stage: f.stage(),
                reason: reason.clone(),
            },
        };
        self.set_phase(Phase::Ended(end), out);
        out.push(Effect::Finished(outcome));
    }

    pub(super) fn set_phase(&mut self, phase: Phase, out: &mut Vec<Effect>) {
        // The new stage is known before the phase is stored, so the
        // observation need not read the phase back.
        let stage = phase.stage();
        let changed = self.phase.stage() != stage;
        self.phase = phase;
        if changed {
            out.push(Effect::Observed(self.observation(stage)));
        }
    }

    pub(super) fn observation(&self, stage: super::Step) -> Observation {
        let seq = |n: u64| if n == 0 { None } else { Some(n) };
        Observation {
            session: self.config.session,
            stage,
            last_stdout_seq: seq(self.stdout_seq),
            last_stderr_seq: seq(self.stderr_seq),
        }
    }

    pub(super) fn next_op(&mut self) -> OpId {
        OpId(self.ops.next())
    }
}
