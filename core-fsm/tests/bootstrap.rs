//! The BootstrapSession alone: every stage, every failure stage, cancel from
//! each live stage, log sequencing, and late or unknown answers.

use core_fsm::Machine as _;
use core_fsm::bootstrap::{Config, Effect, Input, Machine, Step};
use core_fsm::ids::{AgentId, LeaseId, OpId, SessionId};
use core_fsm::plan::{LogicalNodeSpec, RunPlan, expand};
use core_fsm::port::{LogSeqs, LogStream, SshEndpoint, SshError, SshErrorKind};
use core_fsm::time::Instant;
use std::fmt::Write as _;
use std::sync::Arc;

struct Script {
    session: Machine,
    log: String,
    now: u64,
}

fn spec() -> LogicalNodeSpec {
    let mut spec = expand(&RunPlan::example_two_workers()).remove(0);
    Arc::make_mut(&mut spec.boot)
        .verify_commands
        .push("nvidia-smi".into());
    spec
}

fn endpoint() -> SshEndpoint {
    SshEndpoint {
        host: "203.0.113.10".into(),
        port: 22001,
        user: "root".into(),
    }
}

impl Script {
    fn new() -> Script {
        Script::with(spec())
    }

    fn with(spec: LogicalNodeSpec) -> Script {
        let config = Config::new(SessionId(1), &spec, LeaseId::from("vastai:123"), endpoint());
        Script {
            session: Machine::new(config),
            log: String::new(),
            now: 0,
        }
    }

    fn at(&mut self, ms: u64, input: Input) -> &mut Script {
        assert!(ms >= self.now, "time moves forward");
        self.now = ms;
        writeln!(self.log, "t={ms} {input:?}").unwrap();
        let effects = self.session.handle(Instant(ms), input);
        self.session.check_invariants();
        for effect in &effects {
            let line = match effect {
                Effect::Log(r) => format!(
                    "Log {} {} {:?} seq={} {:?}",
                    r.node, r.source, r.stream, r.seq, r.line
                ),
                other => format!("{other:?}"),
            };
            writeln!(self.log, "    {line}").unwrap();
        }
        let mut state = format!("    = {:?}", self.session.stage());
        if let Some(at) = self.session.next_deadline() {
            write!(state, " next={at}").unwrap();
        }
        if self.session.ignored() > 0 {
            write!(state, " ignored={}", self.session.ignored()).unwrap();
        }
        writeln!(self.log, "{state}").unwrap();
        self
    }

    /// The same instant, the next input.
    fn then(&mut self, input: Input) -> &mut Script {
        let now = self.now;
        self.at(now + 10, input)
    }

    fn tick(&mut self) -> &mut Script {
        let at = self.session.next_deadline().expect("a timer is armed");
        self.at(at.0, Input::Tick)
    }

    fn op(&self) -> OpId {
        self.session.live_ops().next().expect("a live operation")
    }

    fn exit(&mut self, result: Result<i32, SshError>) -> &mut Script {
        let op = self.op();
        self.then(Input::SshExited { op, result })
    }

    fn connect_error(&mut self, kind: SshErrorKind) -> &mut Script {
        let op = self.op();
        self.then(Input::SshConnected {
            op,
            result: Err(ssh_error(kind)),
        })
    }

    fn ok(&mut self) -> &mut Script {
        let op = self.op();
        self.then(Input::SshExited { op, result: Ok(0) })
    }

    fn connected(&mut self) -> &mut Script {
        let op = self.op();
        self.then(Input::SshConnected { op, result: Ok(()) })
    }

    fn closed(&mut self) -> &mut Script {
        let op = self.op();
        self.then(Input::SshClosed { op })
    }

    /// From Created to WaitingForJoin.
    fn run_to_waiting(&mut self) -> &mut Script {
        self.at(0, Input::Start).connected().ok().ok().ok().ok()
    }
}

fn ssh_error(kind: SshErrorKind) -> SshError {
    SshError {
        kind,
        message: format!("{kind:?}"),
    }
}

fn converged() -> Input {
    Input::ConvergenceObserved {
        agent: AgentId::from("agent-a7"),
    }
}

#[test]
fn happy_path_with_sources_and_gapless_sequences() {
    let mut spec = spec();
    Arc::make_mut(&mut spec.boot).stdout_sources = vec!["/var/log/boot.log".to_owned()];
    Arc::make_mut(&mut spec.boot).stderr_sources = vec!["/var/log/it's.err".to_owned()];
    let mut s = Script::with(spec);
    s.at(0, Input::Start).connected();
    let probe = s.op();
    s.then(Input::SshOutput {
        op: probe,
        stream: LogStream::Stdout,
        line: "drover-probe".to_owned(),
    });
    s.ok();
    let tails: Vec<OpId> = s.session.live_ops().skip(1).collect();
    assert_eq!(tails.len(), 2);
    for (i, line) in ["container boot entered", "swactor binary found"]
        .into_iter()
        .enumerate()
    {
        s.then(Input::SshOutput {
            op: tails[0],
            stream: LogStream::Stdout,
            line: line.to_owned(),
        });
        s.then(Input::SshOutput {
            op: tails[1],
            stream: LogStream::Stderr,
            line: format!("warn {i}"),
        });
    }
    s.ok().ok().ok().then(converged()).closed();
    assert_eq!(s.session.stage(), Step::Closed);
    insta::assert_snapshot!(s.log);
}

#[test]
fn connect_retries_until_success() {
    let mut s = Script::new();
    s.at(0, Input::Start);
    s.connect_error(SshErrorKind::Refused).tick();
    s.connect_error(SshErrorKind::AuthDenied).tick();
    let abandoned = s.op();
    s.tick().tick();
    s.then(Input::SshConnected {
        op: abandoned,
        result: Ok(()),
    });
    s.connected();
    assert_eq!(s.session.stage(), Step::SshReady);
    insta::assert_snapshot!(s.log);
}

#[test]
fn connect_gives_up_at_the_deadline_and_on_a_host_key_mismatch() {
    let mut spec = spec();
    Arc::make_mut(&mut spec.boot).timeouts.ssh_connect_timeout = core_fsm::Duration::from_secs(12);
    let mut s = Script::with(spec);
    s.at(0, Input::Start);
    while s.session.stage() == Step::SshConnecting {
        if s.session.live_ops().next().is_some() {
            s.connect_error(SshErrorKind::Refused);
        }
        if s.session.stage() == Step::SshConnecting {
            s.tick();
        }
    }
    assert_eq!(s.session.stage(), Step::SshTimeout);
    s.closed();
    let mut log = format!("## deadline\n{}", s.log);
    let mut s = Script::new();
    s.at(0, Input::Start)
        .connect_error(SshErrorKind::HostKeyMismatch);
    s.closed();
    write!(log, "## host key mismatch\n{}", s.log).unwrap();
    insta::assert_snapshot!(log);
}

#[test]
fn each_command_failure_has_its_stage() {
    let mut log = String::new();
    type Case = (&'static str, fn(&mut Script));
    let cases: [Case; 8] = [
        ("probe exits 1", |s| {
            s.at(0, Input::Start).connected().exit(Ok(1));
        }),
        ("probe times out", |s| {
            s.at(0, Input::Start).connected().tick();
        }),
        ("verify 1 exits 2", |s| {
            s.at(0, Input::Start).connected().ok().ok().exit(Ok(2));
        }),
        ("verify 0 times out", |s| {
            s.at(0, Input::Start).connected().ok().tick();
        }),
        ("reset mid verify", |s| {
            s.at(0, Input::Start)
                .connected()
                .ok()
                .exit(Err(ssh_error(SshErrorKind::Reset)));
        }),
        ("start exits 127", |s| {
            s.at(0, Input::Start)
                .connected()
                .ok()
                .ok()
                .ok()
                .exit(Ok(127));
        }),
        ("start times out", |s| {
            s.at(0, Input::Start).connected().ok().ok().ok().tick();
        }),
        ("join times out", |s| {
            s.run_to_waiting().tick();
        }),
    ];
    for (name, script) in cases {
        let mut s = Script::new();
        script(&mut s);
        s.closed();
        assert!(s.session.is_ended());
        writeln!(log, "## {name}\n{}", s.log).unwrap();
    }
    insta::assert_snapshot!(log);
}

#[test]
fn cancel_from_every_live_stage() {
    let mut log = String::new();
    type Case = (&'static str, fn(&mut Script));
    let cases: [Case; 7] = [
        ("Created", |_| {}),
        ("SshConnecting", |s| {
            s.at(0, Input::Start);
        }),
        ("SshConnecting between attempts", |s| {
            s.at(0, Input::Start).connect_error(SshErrorKind::Refused);
        }),
        ("SshReady", |s| {
            s.at(0, Input::Start).connected();
        }),
        ("BootChecking", |s| {
            s.at(0, Input::Start).connected().ok();
        }),
        ("AgentStarting", |s| {
            s.at(0, Input::Start).connected().ok().ok().ok();
        }),
        ("WaitingForJoin", |s| {
            s.run_to_waiting();
        }),
    ];
    for (name, script) in cases {
        let mut s = Script::new();
        script(&mut s);
        s.then(Input::Cancel).then(Input::Cancel);
        if !s.session.is_ended() {
            s.closed();
        }
        assert_eq!(s.session.stage(), Step::Cancelled);
        writeln!(log, "## {name}\n{}", s.log).unwrap();
    }
    insta::assert_snapshot!(log);
}

#[test]
fn convergence_during_a_foreground_start_and_an_unconfirmed_close() {
    let mut s = Script::new();
    s.at(0, Input::Start).connected().ok().ok().ok();
    s.then(converged());
    s.note("the close is never confirmed: no handoff without a closed SSH");
    s.tick();
    assert_eq!(s.session.stage(), Step::StreamError);
    insta::assert_snapshot!(s.log);
}

#[test]
fn late_unknown_and_early_inputs_are_ignored() {
    let mut s = Script::new();
    s.at(0, Input::Start);
    let connect = s.op();
    s.then(converged());
    s.then(Input::SshOutput {
        op: OpId(77),
        stream: LogStream::Stdout,
        line: "stray".to_owned(),
    });
    s.connected();
    s.then(Input::SshConnected {
        op: connect,
        result: Ok(()),
    });
    let probe = s.op();
    s.ok();
    s.then(Input::SshExited {
        op: probe,
        result: Ok(0),
    });
    s.then(Input::SshOutput {
        op: probe,
        stream: LogStream::Stdout,
        line: "after exit".to_owned(),
    });
    s.then(Input::SshClosed { op: OpId(78) });
    s.then(Input::Start);
    s.ok()
        .ok()
        .ok()
        .then(converged())
        .then(converged())
        .closed();
    s.then(Input::Cancel).then(Input::Tick);
    assert_eq!(s.session.stage(), Step::Closed);
    assert_eq!(s.session.ignored(), 9);
    insta::assert_snapshot!(s.log);
}

#[test]
fn a_broken_log_stream_is_a_stream_error() {
    let mut spec = spec();
    Arc::make_mut(&mut spec.boot).stdout_sources = vec!["/var/log/boot.log".to_owned()];
    let mut s = Script::with(spec);
    s.at(0, Input::Start).connected().ok();
    let tail = s.session.live_ops().nth(1).unwrap();
    s.then(Input::SshExited {
        op: tail,
        result: Err(ssh_error(SshErrorKind::Reset)),
    });
    s.closed();
    assert_eq!(s.session.stage(), Step::StreamError);
    insta::assert_snapshot!(s.log);
}

impl Script {
    fn note(&mut self, text: &str) {
        writeln!(self.log, "# {text}").unwrap();
    }
}

#[test]
fn a_foreground_start_command_is_logged_until_ssh_closes() {
    let mut s = Script::new();
    s.at(0, Input::Start).connected().ok().ok().ok();
    let start = s.op();
    s.then(converged());
    s.then(Input::SshOutput {
        op: start,
        stream: LogStream::Stdout,
        line: "agent running".to_owned(),
    });
    s.then(Input::SshExited {
        op: start,
        result: Ok(0),
    });
    s.closed();
    s.then(Input::SshOutput {
        op: start,
        stream: LogStream::Stdout,
        line: "after close".to_owned(),
    });
    assert_eq!(s.session.stage(), Step::Closed);
    assert_eq!(
        s.session.ignored(),
        2,
        "the exit during the close and the line after it"
    );
    insta::assert_snapshot!(s.log);
}

/// A second session of a node, its log numbers continuing from `seqs`,
/// connected.
fn later_session(seqs: LogSeqs) -> Script {
    let mut config = Config::new(
        SessionId(2),
        &spec(),
        LeaseId::from("vastai:124"),
        endpoint(),
    );
    config.log_seqs = seqs;
    let mut s = Script {
        session: Machine::new(config),
        log: String::new(),
        now: 0,
    };
    s.at(0, Input::Start).connected();
    s
}

#[test]
fn a_later_session_of_the_node_continues_its_log_numbers() {
    let mut s = later_session(LogSeqs {
        stdout: 7,
        stderr: 2,
    });
    for stream in [LogStream::Stdout, LogStream::Stderr, LogStream::Stdout] {
        let op = s.op();
        s.then(Input::SshOutput {
            op,
            stream,
            line: "line".to_owned(),
        });
    }
    insta::assert_snapshot!(s.log);
}

#[test]
fn log_numbers_at_their_limit_stay_there_instead_of_wrapping() {
    // Seqs continue from the datastream's file, which a person can edit:
    // a number at the limit must neither panic nor wrap to a used one.
    let mut s = later_session(LogSeqs {
        stdout: u64::MAX,
        stderr: u64::MAX - 1,
    });
    let mut seqs = vec![];
    for stream in [LogStream::Stdout, LogStream::Stderr, LogStream::Stderr] {
        let op = s.op();
        let effects = s.session.handle(
            Instant(1),
            Input::SshOutput {
                op,
                stream,
                line: "line".to_owned(),
            },
        );
        seqs.extend(effects.iter().filter_map(|e| match e {
            Effect::Log(r) => Some(r.seq),
            _ => None,
        }));
    }
    assert_eq!(seqs, vec![u64::MAX, u64::MAX, u64::MAX]);
}
