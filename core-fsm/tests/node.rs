//! The NodeManager alone: scripts of timed inputs, transcripts of stage and
//! effects, invariants after every step. Covers every stage and failure,
//! the journal records, destroy retries, ambiguity resolution by listing,
//! restore, replacement, and late, duplicate and unknown answers.

use core_fsm::Machine as _;
use core_fsm::bootstrap::{self, Observation};
use core_fsm::ids::{AgentId, LeaseId, Nonce, OpId, SessionId};
use core_fsm::node::{self, Effect, Input, Journaled, Machine};
use core_fsm::plan::{LogicalNodeSpec, ProviderKind, RunPlan, expand};
use core_fsm::port::{
    EndpointStatus, JournalRecord, LeaseFacts, LeaseGranted, LogSeqs, ProviderError,
    ProviderErrorKind, SshEndpoint,
};
use core_fsm::rng::DetRng;
use core_fsm::time::{Duration, Instant};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

struct Script {
    node: Machine,
    log: String,
    effects: Vec<Effect>,
}

fn spec() -> LogicalNodeSpec {
    expand(&RunPlan::example_two_workers()).remove(0)
}

impl Script {
    fn new() -> Script {
        Script::of(Machine::new(
            node::Config::default(),
            spec(),
            DetRng::new(1),
        ))
    }

    fn of(node: Machine) -> Script {
        node.check_invariants();
        let mut s = Script {
            node,
            log: String::new(),
            effects: Vec::new(),
        };
        s.state();
        s
    }

    fn at(&mut self, ms: u64, input: Input) -> &mut Script {
        writeln!(self.log, "t={ms} {}", input_line(&input)).unwrap();
        let effects = self.node.handle(Instant(ms), input);
        self.node.check_invariants();
        for e in &effects {
            writeln!(self.log, "    {}", effect_line(e)).unwrap();
        }
        self.state();
        self.effects.extend(effects);
        self
    }

    /// The answer to the last destroy, at `ms`.
    fn destroy_answered(&mut self, ms: u64, result: Result<(), ProviderError>) -> &mut Script {
        let op = self.last_op();
        self.at(ms, Input::LeaseDestroyed { op, result })
    }

    fn tick(&mut self) -> &mut Script {
        let at = self.node.next_deadline().expect("a timer is armed");
        self.at(at.0, Input::Tick)
    }

    fn state(&mut self) {
        let r = self.node.record();
        let mut line = format!(
            "    = {:?} ready={} attempt={}",
            self.node.stage(),
            self.node.is_ready(),
            r.attempt
        );
        if let Some(reason) = &r.failed_reason {
            write!(line, " failed={reason:?}").unwrap();
        }
        if let Some(e) = &r.destroy_error {
            write!(line, " destroy_error={e:?}").unwrap();
        }
        if let Some(at) = self.node.next_deadline() {
            write!(line, " next={at}").unwrap();
        }
        if self.node.ignored() > 0 {
            write!(line, " ignored={}", self.node.ignored()).unwrap();
        }
        writeln!(self.log, "{line}").unwrap();
    }

    fn note(&mut self, text: &str) {
        writeln!(self.log, "# {text}").unwrap();
    }

    fn last_op(&self) -> OpId {
        self.effects
            .iter()
            .rev()
            .find_map(|e| match e {
                Effect::CreateLease { op, .. }
                | Effect::LookupEndpoint { op, .. }
                | Effect::ListLeases { op, .. }
                | Effect::DestroyLease { op, .. } => Some(*op),
                _ => None,
            })
            .expect("an operation")
    }

    fn nonce(&self) -> Nonce {
        self.node.record().nonce.expect("an intent")
    }

    fn session(&self) -> SessionId {
        self.node
            .record()
            .bootstrap
            .as_ref()
            .expect("a session")
            .session
    }

    /// Answers the last create with lease `contract`.
    fn granted(&mut self, ms: u64, contract: u32, with_endpoint: bool) -> &mut Script {
        let op = self
            .effects
            .iter()
            .rev()
            .find_map(|e| match e {
                Effect::CreateLease { op, .. } => Some(*op),
                _ => None,
            })
            .expect("a create");
        let endpoint = with_endpoint.then(endpoint);
        let lease = lease(contract, self.nonce());
        self.at(
            ms,
            Input::LeaseCreated {
                op,
                result: Ok(LeaseGranted { lease, endpoint }),
            },
        )
    }

    /// Answers the last list with `leases`.
    fn listed(&mut self, ms: u64, leases: Vec<Arc<LeaseFacts>>) -> &mut Script {
        let op = self.last_op();
        self.at(
            ms,
            Input::LeasesListed {
                op,
                result: Ok(leases),
            },
        )
    }

    /// From `New` to `Dormant`.
    fn run_to_dormant(&mut self) -> &mut Script {
        self.at(0, start()).granted(1_000, 123, true);
        let session = self.session();
        self.at(
            1_100,
            observed(session, bootstrap::Step::WaitingForJoin, None),
        )
        .at(1_200, joined(123))
        .at(1_300, Input::BootstrapClosed)
    }
}

fn start() -> Input {
    Input::Start {
        excluded_hosts: Vec::new(),
    }
}

fn lease(contract: u32, nonce: Nonce) -> Arc<LeaseFacts> {
    Arc::new(LeaseFacts {
        provider: ProviderKind::Vastai,
        lease_id: LeaseId::new(format!("vastai:{contract}")),
        contract_id: contract.to_string(),
        offer_id: None,
        host_id: Some("host-a".to_owned()),
        nonce,
        metadata: BTreeMap::new(),
    })
}

fn endpoint() -> SshEndpoint {
    SshEndpoint {
        host: "203.0.113.10".into(),
        port: 22001,
        user: "root".into(),
    }
}

fn err(kind: ProviderErrorKind, message: &str) -> ProviderError {
    ProviderError {
        kind,
        message: message.to_owned(),
    }
}

fn joined(contract: u32) -> Input {
    Input::AgentJoined {
        lease_id: LeaseId::new(format!("vastai:{contract}")),
        agent: AgentId::from("agent-a7"),
    }
}

fn observed(session: SessionId, stage: bootstrap::Step, stdout: Option<u64>) -> Input {
    Input::BootstrapObserved(Observation {
        session,
        stage,
        last_stdout_seq: stdout,
        last_stderr_seq: None,
    })
}

fn input_line(input: &Input) -> String {
    match input {
        Input::LeaseCreated { op, result: Ok(g) } => {
            format!(
                "LeaseCreated {op} ok {} {} endpoint={}",
                g.lease.lease_id,
                g.lease.nonce,
                g.endpoint.is_some()
            )
        }
        Input::LeasesListed {
            op,
            result: Ok(leases),
        } => {
            let found: Vec<String> = leases
                .iter()
                .map(|l| format!("{} {}", l.lease_id, l.nonce))
                .collect();
            format!("LeasesListed {op} ok {found:?}")
        }
        other => format!("{other:?}"),
    }
}

fn effect_line(e: &Effect) -> String {
    match e {
        Effect::Persist(JournalRecord::LeaseKnown { node, lease }) => {
            format!(
                "Persist(LeaseKnown {node} {} {})",
                lease.lease_id, lease.nonce
            )
        }
        Effect::Persist(record) => format!("Persist({record:?})"),
        Effect::CreateLease { op, request } => {
            format!(
                "CreateLease {op} {} {} excluded={:?}",
                request.node, request.nonce, request.excluded_hosts
            )
        }
        Effect::LookupEndpoint { op, lease } => format!("LookupEndpoint {op} {}", lease.lease_id),
        Effect::DestroyLease { op, lease } => format!("DestroyLease {op} {}", lease.lease_id),
        other => format!("{other:?}"),
    }
}

#[test]
fn lease_with_endpoint_to_dormant_then_destroyed() {
    let mut s = Script::new();
    s.run_to_dormant();
    let r = s.node.record();
    assert!(s.node.is_ready() && r.agent.as_ref().unwrap().handed_off_at == Some(Instant(1_300)));
    assert_eq!(
        r.bootstrap.as_ref().unwrap().last_stage,
        bootstrap::Step::WaitingForJoin
    );
    s.at(2_000, Input::Destroy);
    let op = s.last_op();
    s.at(2_100, Input::LeaseDestroyed { op, result: Ok(()) });
    assert_eq!(s.node.record().destroyed_at, Some(Instant(2_100)));
    insta::assert_snapshot!(s.log);
}

#[test]
fn endpoint_polled_until_ready() {
    let mut s = Script::new();
    s.at(0, start()).granted(1_000, 123, false);
    let pending = || {
        Ok(EndpointStatus::Pending {
            detail: "loading".to_owned(),
        })
    };
    s.at(
        1_100,
        Input::EndpointLooked {
            op: s.last_op(),
            result: pending(),
        },
    )
    .tick();
    let transient = Err(err(ProviderErrorKind::Transient, "503"));
    s.at(
        6_200,
        Input::EndpointLooked {
            op: s.last_op(),
            result: transient,
        },
    )
    .tick();
    s.at(
        11_300,
        Input::EndpointLooked {
            op: s.last_op(),
            result: Ok(EndpointStatus::Ready(endpoint())),
        },
    );
    insta::assert_snapshot!(s.log);
}

#[test]
fn endpoint_failures_fail_the_node_and_destroy_still_works() {
    let mut log = String::new();
    let cases: Vec<(&str, Result<EndpointStatus, ProviderError>)> = vec![
        (
            "failed",
            Ok(EndpointStatus::Failed {
                reason: "exited".to_owned(),
            }),
        ),
        ("gone", Ok(EndpointStatus::Gone)),
        ("rejected", Err(err(ProviderErrorKind::Rejected, "bad id"))),
    ];
    for (name, result) in cases {
        let mut s = Script::new();
        s.at(0, start()).granted(1_000, 123, false);
        s.at(
            1_100,
            Input::EndpointLooked {
                op: s.last_op(),
                result,
            },
        );
        s.at(2_000, Input::Destroy);
        s.destroy_answered(2_100, Err(err(ProviderErrorKind::NotFound, "gone")));
        writeln!(log, "## {name}\n{}", s.log).unwrap();
    }
    writeln!(log, "## endpoint timeout (12s, polled every 5s)").unwrap();
    let mut spec = spec();
    Arc::make_mut(&mut spec.boot).timeouts.endpoint_timeout = Duration::from_secs(12);
    let mut s = Script::of(Machine::new(node::Config::default(), spec, DetRng::new(1)));
    s.at(0, start()).granted(1_000, 123, false);
    while s.node.stage() == node::Lifecycle::LeaseCreated {
        if let Some(Effect::LookupEndpoint { op, .. }) = s.effects.last().cloned() {
            let pending = Ok(EndpointStatus::Pending {
                detail: "loading".to_owned(),
            });
            s.at(
                last_time(&s.log),
                Input::EndpointLooked {
                    op,
                    result: pending,
                },
            );
        }
        s.tick();
    }
    assert_eq!(s.node.stage(), node::Lifecycle::Failed);
    log.push_str(&s.log);
    insta::assert_snapshot!(log);
}

/// The time of the last step of a transcript.
fn last_time(log: &str) -> u64 {
    let line = log.lines().rev().find(|l| l.starts_with("t=")).unwrap();
    line[2..].split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn create_rejected_fails_and_destroy_needs_no_provider_call() {
    let mut s = Script::new();
    s.at(0, start());
    s.at(
        500,
        Input::LeaseCreated {
            op: s.last_op(),
            result: Err(err(ProviderErrorKind::Rejected, "no offer fits")),
        },
    );
    s.at(600, Input::Destroy);
    assert!(
        !s.effects
            .iter()
            .any(|e| matches!(e, Effect::DestroyLease { .. }))
    );
    insta::assert_snapshot!(s.log);
}

#[test]
fn create_timeout_is_resolved_by_listing_and_adopting() {
    let mut s = Script::new();
    s.at(0, start()).tick();
    let other = lease(999, Nonce(5));
    let ours = lease(123, s.nonce());
    s.at(
        120_100,
        Input::LeasesListed {
            op: s.last_op(),
            result: Ok(vec![other, ours]),
        },
    );
    assert_eq!(s.node.record().lease_id().unwrap().as_str(), "vastai:123");
    insta::assert_snapshot!(s.log);
}

#[test]
fn ambiguous_create_list_failures_then_abandon_then_stray_grant_is_destroyed() {
    let mut s = Script::new();
    s.at(0, start());
    let first_create = s.last_op();
    let first_nonce = s.nonce();
    s.at(
        500,
        Input::LeaseCreated {
            op: first_create,
            result: Err(err(ProviderErrorKind::Ambiguous, "timeout")),
        },
    );
    s.at(
        600,
        Input::LeasesListed {
            op: s.last_op(),
            result: Err(err(ProviderErrorKind::Transient, "503")),
        },
    );
    s.tick();
    s.at(
        2_700,
        Input::LeasesListed {
            op: s.last_op(),
            result: Ok(vec![]),
        },
    );
    assert_eq!(s.nonce(), first_nonce, "one empty list proves nothing");
    s.note("a lease may be listed late (F4): two more lists, a create timeout apart");
    s.tick().listed(122_800, vec![]);
    s.tick().listed(242_900, vec![]);
    assert_ne!(s.nonce(), first_nonce, "a new intent has a new nonce");
    s.note("the first create's answer arrives after all: a real lease nobody tracks");
    let stray = LeaseGranted {
        lease: lease(77, first_nonce),
        endpoint: None,
    };
    s.at(
        243_000,
        Input::LeaseCreated {
            op: first_create,
            result: Ok(stray),
        },
    );
    assert_eq!(s.node.stray_leases(), 1);
    s.granted(243_200, 123, true);
    insta::assert_snapshot!(s.log);
}

#[test]
fn a_lease_missing_from_the_first_lists_is_adopted_by_a_later_one() {
    let mut s = Script::new();
    s.at(0, start());
    s.at(
        500,
        Input::LeaseCreated {
            op: s.last_op(),
            result: Err(err(ProviderErrorKind::Ambiguous, "reset after send")),
        },
    );
    s.note("created but not listed yet (Vast.ai F4): no abandonment, no second create");
    s.listed(600, vec![]);
    s.tick().listed(120_700, vec![lease(999, Nonce(5))]);
    let ours = lease(123, s.nonce());
    s.tick().listed(240_800, vec![lease(999, Nonce(5)), ours]);
    assert_eq!(s.node.record().lease_id().unwrap().as_str(), "vastai:123");
    let creates = s
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::CreateLease { .. }))
        .count();
    assert_eq!(creates, 1, "one intent, one create");
    assert!(
        !s.effects
            .iter()
            .any(|e| matches!(e, Effect::Persist(JournalRecord::IntentAbandoned { .. })))
    );
    insta::assert_snapshot!(s.log);
}

#[test]
fn late_grant_during_resolution_is_adopted() {
    let mut s = Script::new();
    s.at(0, start());
    let create = s.last_op();
    s.tick();
    let granted = LeaseGranted {
        lease: lease(123, s.nonce()),
        endpoint: Some(endpoint()),
    };
    s.at(
        120_050,
        Input::LeaseCreated {
            op: create,
            result: Ok(granted),
        },
    );
    assert_eq!(s.node.stage(), node::Lifecycle::BootstrapRunning);
    s.note("the list answer is now late");
    s.at(
        120_100,
        Input::LeasesListed {
            op: s.last_op(),
            result: Ok(vec![]),
        },
    );
    insta::assert_snapshot!(s.log);
}

#[test]
fn list_failures_are_bounded_and_never_read_as_empty() {
    let mut s = Script::new();
    s.at(0, start()).tick();
    for _ in 0..5 {
        let op = s.last_op();
        let now = last_time(&s.log);
        s.at(
            now,
            Input::LeasesListed {
                op,
                result: Err(err(ProviderErrorKind::Transient, "503")),
            },
        );
        if s.node.stage() == node::Lifecycle::Failed {
            break;
        }
        s.tick();
    }
    assert_eq!(s.node.stage(), node::Lifecycle::Failed);
    assert!(
        !s.node.holds_no_lease(),
        "an unresolved intent may hold a lease"
    );
    s.note("an explicit Destroy tries to resolve the intent again");
    let now = last_time(&s.log) + 1;
    s.at(now, Input::Destroy);
    let ours = lease(123, s.nonce());
    s.at(
        now + 1,
        Input::LeasesListed {
            op: s.last_op(),
            result: Ok(vec![ours]),
        },
    );
    s.destroy_answered(now + 2, Ok(()));
    assert_eq!(s.node.stage(), node::Lifecycle::Destroyed);
    insta::assert_snapshot!(s.log);
}

#[test]
fn destroy_failures_retry_with_backoff_then_wait_for_a_new_destroy() {
    let mut s = Script::new();
    s.run_to_dormant();
    s.at(2_000, Input::Destroy);
    s.destroy_answered(2_100, Err(err(ProviderErrorKind::Transient, "503")));
    s.tick();
    s.note("no answer: the destroy times out and is retried");
    s.tick().tick();
    for _ in 0..2 {
        let now = last_time(&s.log);
        s.destroy_answered(now, Err(err(ProviderErrorKind::Transient, "503")));
        s.tick();
    }
    let now = last_time(&s.log);
    s.destroy_answered(now, Err(err(ProviderErrorKind::Rejected, "locked")));
    assert!(s.node.next_deadline().is_none(), "retries are bounded");
    assert!(s.node.record().destroy_error.is_some());
    s.at(now + 60_000, Input::Destroy);
    s.destroy_answered(now + 60_100, Ok(()));
    assert_eq!(s.node.stage(), node::Lifecycle::Destroyed);
    insta::assert_snapshot!(s.log);
}

#[test]
fn a_destroy_while_the_last_destroy_attempt_is_in_flight_renews_the_retries() {
    let mut s = Script::new();
    s.run_to_dormant();
    s.at(2_000, Input::Destroy);
    // Every attempt but the last fails; the last is in flight.
    loop {
        let now = last_time(&s.log);
        s.destroy_answered(now + 100, Err(err(ProviderErrorKind::Transient, "429")));
        s.tick();
        if s.log.matches("DestroyLease").count() == 5 {
            break;
        }
    }
    s.note("the operator asks again while the last attempt is in flight");
    let (now, ignored) = (last_time(&s.log), s.node.ignored());
    s.at(now + 10, Input::Destroy);
    assert_eq!(
        s.node.ignored(),
        ignored,
        "the request is taken, not ignored"
    );
    s.destroy_answered(now + 100, Err(err(ProviderErrorKind::Transient, "429")));
    assert!(
        s.node.next_deadline().is_some(),
        "a retry is armed: the request was not lost"
    );
    s.tick();
    let now = last_time(&s.log);
    s.destroy_answered(now + 100, Ok(()));
    assert_eq!(s.node.stage(), node::Lifecycle::Destroyed);
    insta::assert_snapshot!(s.log);
}

#[test]
fn destroy_while_the_create_is_in_flight() {
    let mut log = String::new();
    let mut s = Script::new();
    s.at(0, start())
        .at(100, Input::Destroy)
        .at(150, Input::Destroy)
        .granted(1_000, 123, true);
    let op = s.last_op();
    s.at(1_100, Input::LeaseDestroyed { op, result: Ok(()) });
    writeln!(
        log,
        "## the lease arrives and is destroyed at once\n{}",
        s.log
    )
    .unwrap();
    let mut s = Script::new();
    s.at(0, start()).at(100, Input::Destroy);
    s.at(
        200,
        Input::LeaseCreated {
            op: s.last_op(),
            result: Err(err(ProviderErrorKind::Rejected, "no offer")),
        },
    );
    writeln!(log, "## the create fails: nothing to destroy\n{}", s.log).unwrap();
    insta::assert_snapshot!(log);
}

#[test]
fn destroy_during_bootstrap_cancels_the_session_first() {
    let mut s = Script::new();
    s.at(0, start()).granted(1_000, 123, true);
    let session = s.session();
    s.at(
        1_100,
        observed(session, bootstrap::Step::BootChecking, Some(3)),
    );
    s.at(1_200, Input::Destroy);
    s.note("the session's own ending is no longer news");
    s.at(
        1_300,
        Input::BootstrapFailed {
            reason: "cancelled".to_owned(),
        },
    );
    s.destroy_answered(1_400, Ok(()));
    assert_eq!(
        s.node.record().bootstrap.as_ref().unwrap().last_stdout_seq,
        Some(3)
    );
    insta::assert_snapshot!(s.log);
}

#[test]
fn late_duplicate_unknown_and_out_of_place_inputs_are_ignored() {
    let mut s = Script::new();
    s.at(0, start());
    s.at(10, start());
    s.at(
        20,
        Input::LeaseDestroyed {
            op: OpId(99),
            result: Ok(()),
        },
    );
    s.at(
        30,
        Input::EndpointLooked {
            op: OpId(98),
            result: Ok(EndpointStatus::Gone),
        },
    );
    s.at(40, joined(123));
    s.granted(1_000, 123, true);
    s.note("a duplicate of the create answer");
    s.granted(1_010, 123, true);
    s.at(1_020, Input::BootstrapClosed);
    s.note("a join before the start command ran is not expected");
    s.at(1_025, joined(123));
    let session = s.session();
    s.at(
        1_028,
        observed(session, bootstrap::Step::WaitingForJoin, None),
    );
    s.at(1_030, joined(124));
    s.at(1_040, joined(123));
    s.at(1_050, joined(123));
    s.at(1_060, Input::BootstrapClosed);
    s.at(1_070, Input::BootstrapClosed);
    s.at(1_080, joined(123));
    s.at(
        1_090,
        Input::Replace {
            attempt: 2,
            excluded_hosts: vec![],
        },
    );
    assert!(s.node.is_ready());
    assert_eq!(s.node.ignored(), 12);
    insta::assert_snapshot!(s.log);
}

#[test]
fn bootstrap_failure_then_replacement_destroys_first() {
    let mut s = Script::new();
    s.at(0, start()).granted(1_000, 123, true);
    s.at(
        2_000,
        Input::BootstrapFailed {
            reason: "bootstrap BootCheckFailed: verify command 0 exited with 1".to_owned(),
        },
    );
    s.at(
        30_000,
        Input::Replace {
            attempt: 2,
            excluded_hosts: vec!["host-a".to_owned()],
        },
    );
    s.destroy_answered(30_100, Ok(()));
    assert_eq!(s.node.record().attempt, 2);
    assert!(s.node.record().failed_reason.is_none());
    s.granted(31_000, 124, false);
    insta::assert_snapshot!(s.log);
}

#[test]
fn restore_resumes_from_each_journal_shape() {
    let spec = spec();
    let node = spec.node_id.clone();
    let nonce = Nonce(42);
    let intent = JournalRecord::LeaseIntent {
        node: node.clone(),
        nonce,
        attempt: 1,
    };
    let known = JournalRecord::LeaseKnown {
        node: node.clone(),
        lease: lease(123, nonce),
    };
    let ready = JournalRecord::NodeReady {
        node: node.clone(),
        agent: AgentId::from("agent-a7"),
        log_seqs: LogSeqs {
            stdout: 4,
            stderr: 1,
        },
    };
    let failed = JournalRecord::NodeFailed {
        node: node.clone(),
        reason: "join timeout".to_owned(),
        log_seqs: LogSeqs::default(),
    };
    let destroy = JournalRecord::DestroyRequested { node: node.clone() };
    let released = JournalRecord::LeaseReleased {
        node: node.clone(),
        lease_id: LeaseId::from("vastai:123"),
    };
    let abandoned = JournalRecord::IntentAbandoned {
        node: node.clone(),
        nonce,
    };
    let cases: Vec<(&str, Vec<JournalRecord>)> = vec![
        ("nothing", vec![]),
        ("open intent", vec![intent.clone()]),
        ("abandoned intent", vec![intent.clone(), abandoned]),
        (
            "known lease, not ready",
            vec![intent.clone(), known.clone()],
        ),
        ("ready", vec![intent.clone(), known.clone(), ready]),
        (
            "failed with lease",
            vec![intent.clone(), known.clone(), failed.clone()],
        ),
        ("failed, intent unresolved", vec![intent.clone(), failed]),
        (
            "destroy requested",
            vec![intent.clone(), known.clone(), destroy.clone()],
        ),
        (
            "destroy requested, intent open",
            vec![intent.clone(), destroy.clone()],
        ),
        ("released", vec![intent, known, destroy, released]),
    ];
    let mut log = String::new();
    for (name, journal) in cases {
        let mut fold = Journaled::default();
        for record in &journal {
            fold.apply(record);
        }
        let machine =
            Machine::restore(node::Config::default(), spec.clone(), DetRng::new(9), &fold);
        let mut s = Script::of(machine);
        s.at(0, start());
        s.at(10, joined(123));
        writeln!(log, "## {name}\n{}", s.log).unwrap();
    }
    insta::assert_snapshot!(log);
}

#[test]
fn transient_create_errors_retry_the_same_intent_with_jittered_backoff() {
    let mut log = String::new();
    let transient = || Err(err(ProviderErrorKind::Transient, "429 too many requests"));
    let mut s = Script::new();
    s.at(0, start());
    let nonce = s.nonce();
    s.note("429 twice: the same intent (same nonce) is sent again, no new journal record");
    for _ in 0..2 {
        let now = last_time(&s.log) + 100;
        s.at(
            now,
            Input::LeaseCreated {
                op: s.last_op(),
                result: transient(),
            },
        );
        s.tick();
    }
    s.granted(last_time(&s.log) + 100, 123, true);
    assert_eq!(s.nonce(), nonce);
    let intents = s
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::Persist(JournalRecord::LeaseIntent { .. })))
        .count();
    assert_eq!(intents, 1, "one intent for every try");
    writeln!(log, "## retried until granted\n{}", s.log).unwrap();

    let mut s = Script::new();
    s.at(0, start());
    while s.node.stage() == node::Lifecycle::LeaseRequested {
        let now = last_time(&s.log) + 100;
        s.at(
            now,
            Input::LeaseCreated {
                op: s.last_op(),
                result: transient(),
            },
        );
        if s.node.next_deadline().is_some() {
            s.tick();
        }
    }
    let creates = s
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::CreateLease { .. }))
        .count();
    assert_eq!(creates, 4, "create_attempts_max bounds the tries");
    assert_eq!(s.node.stage(), node::Lifecycle::Failed);
    assert!(s.node.holds_no_lease(), "nothing was created");
    writeln!(log, "## tries spent: the intent is abandoned\n{}", s.log).unwrap();

    let mut s = Script::new();
    s.at(0, start());
    s.at(
        100,
        Input::LeaseCreated {
            op: s.last_op(),
            result: transient(),
        },
    );
    s.at(200, Input::Destroy);
    assert!(s.node.next_deadline().is_none());
    writeln!(log, "## a destroy while waiting to retry\n{}", s.log).unwrap();

    let mut s = Script::new();
    s.at(0, start()).at(100, Input::Destroy);
    s.at(
        200,
        Input::LeaseCreated {
            op: s.last_op(),
            result: transient(),
        },
    );
    writeln!(log, "## a destroy during the create: no retry\n{}", s.log).unwrap();
    insta::assert_snapshot!(log);
}

/// From `Start` to an abandoned first intent (three empty lists), with the
/// first create's op returned.
fn abandon_first_intent(s: &mut Script) -> (OpId, Nonce) {
    s.at(0, start());
    let create = s.last_op();
    let nonce = s.nonce();
    s.tick().listed(120_100, vec![]);
    s.tick().listed(240_200, vec![]);
    s.tick().listed(360_300, vec![]);
    assert_ne!(s.nonce(), nonce);
    (create, nonce)
}

#[test]
fn a_stray_lease_is_journaled_destroyed_with_retries_and_restored() {
    let mut s = Script::new();
    let (create, first_nonce) = abandon_first_intent(&mut s);
    s.note("the abandoned create's answer: a real lease no intent owns");
    let stray = LeaseGranted {
        lease: lease(77, first_nonce),
        endpoint: None,
    };
    s.at(
        360_400,
        Input::LeaseCreated {
            op: create,
            result: Ok(stray),
        },
    );
    let journal: Vec<JournalRecord> = s
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    s.destroy_answered(360_500, Err(err(ProviderErrorKind::Transient, "429")));
    s.note("retried after the backoff; that destroy times out and is retried too");
    s.tick().tick().tick();
    let now = last_time(&s.log);
    s.destroy_answered(now + 100, Ok(()));
    assert!(
        s.node.next_deadline().is_some(),
        "the node's own create waits"
    );
    let mut log = s.log.clone();
    log.push_str("## a restart before the stray was destroyed\n");
    let mut fold = Journaled::default();
    for record in &journal {
        fold.apply(record);
    }
    assert_eq!(fold.strays.len(), 1);
    let machine = Machine::restore(node::Config::default(), spec(), DetRng::new(9), &fold);
    let mut s = Script::of(machine);
    s.at(400_000, start());
    s.at(
        400_100,
        Input::LeaseDestroyed {
            op: OpId(1),
            result: Err(err(ProviderErrorKind::NotFound, "gone")),
        },
    );
    assert!(s.node.record().lease.is_none());
    log.push_str(&s.log);
    insta::assert_snapshot!(log);
}

#[test]
fn replace_of_an_unresolved_failure_resolves_the_intent_first() {
    let mut log = String::new();
    for found in [true, false] {
        let mut s = Script::new();
        s.at(0, start()).tick();
        for _ in 0..5 {
            let now = last_time(&s.log);
            s.at(
                now,
                Input::LeasesListed {
                    op: s.last_op(),
                    result: Err(err(ProviderErrorKind::Transient, "503")),
                },
            );
            if s.node.stage() == node::Lifecycle::Failed {
                break;
            }
            s.tick();
        }
        s.note("Replace: list first, never a second lease beside one that may exist");
        let now = last_time(&s.log) + 1_000;
        s.at(
            now,
            Input::Replace {
                attempt: 2,
                excluded_hosts: vec![],
            },
        );
        if found {
            let ours = lease(123, s.nonce());
            s.listed(now + 100, vec![ours]);
            s.destroy_answered(now + 200, Ok(()));
        } else {
            s.listed(now + 100, vec![]);
            s.tick().listed(now + 120_200, vec![]);
            s.tick().listed(now + 240_300, vec![]);
        }
        assert_eq!(s.node.record().attempt, 2);
        assert_eq!(s.node.stage(), node::Lifecycle::LeaseRequested);
        let name = if found {
            "the lease existed: destroyed, then the replacement"
        } else {
            "no lease: the intent is abandoned, then the replacement"
        };
        writeln!(log, "## {name}\n{}", s.log).unwrap();
    }
    insta::assert_snapshot!(log);
}

#[test]
fn restore_resumes_an_interrupted_replacement() {
    let spec = spec();
    let node = spec.node_id.clone();
    let nonce = Nonce(42);
    let base = [
        JournalRecord::LeaseIntent {
            node: node.clone(),
            nonce,
            attempt: 1,
        },
        JournalRecord::LeaseKnown {
            node: node.clone(),
            lease: lease(123, nonce),
        },
        JournalRecord::NodeFailed {
            node: node.clone(),
            reason: "join timeout".to_owned(),
            log_seqs: LogSeqs::default(),
        },
        JournalRecord::ReplaceRequested {
            node: node.clone(),
            attempt: 2,
        },
    ];
    let released = JournalRecord::LeaseReleased {
        node: node.clone(),
        lease_id: LeaseId::from("vastai:123"),
    };
    let destroy = JournalRecord::DestroyRequested { node: node.clone() };
    let cases: Vec<(&str, Vec<JournalRecord>, Input)> = vec![
        ("replace requested, lease standing", vec![], start()),
        (
            "replace requested, lease released, no new intent yet",
            vec![released.clone()],
            start(),
        ),
        (
            "a destroy after the replace request cancels it",
            vec![destroy],
            start(),
        ),
        (
            "teardown before Start cancels a restored replacement",
            vec![released],
            Input::Destroy,
        ),
    ];
    let mut log = String::new();
    for (name, tail, first) in cases {
        let mut fold = Journaled::default();
        for record in base.iter().chain(&tail) {
            fold.apply(record);
        }
        let machine =
            Machine::restore(node::Config::default(), spec.clone(), DetRng::new(9), &fold);
        let mut s = Script::of(machine);
        s.at(0, first);
        if let Some(Effect::DestroyLease { op, .. }) = s.effects.last().cloned() {
            s.at(100, Input::LeaseDestroyed { op, result: Ok(()) });
        }
        writeln!(log, "## {name}\n{}", s.log).unwrap();
    }
    insta::assert_snapshot!(log);
}

#[test]
fn a_dormant_node_whose_agent_is_lost_fails_keeping_its_lease_and_can_be_replaced() {
    let mut s = Script::new();
    s.run_to_dormant();
    assert_eq!(s.node.stage(), node::Lifecycle::Dormant);
    // Another identity's death says nothing of this node.
    s.at(
        2_000,
        Input::AgentLost {
            agent: AgentId::from("agent-other"),
            reason: "dead".into(),
        },
    );
    assert_eq!(s.node.stage(), node::Lifecycle::Dormant);
    let agent = s
        .node
        .record()
        .agent
        .as_ref()
        .expect("joined")
        .agent
        .clone();
    s.at(
        2_100,
        Input::AgentLost {
            agent,
            reason: "its agent stopped heartbeating".into(),
        },
    );
    assert_eq!(s.node.stage(), node::Lifecycle::Failed);
    assert!(s.log.contains("NodeFailed"), "{}", s.log);
    assert_eq!(
        s.node.record().lease_id().map(ToString::to_string),
        Some("vastai:123".to_owned()),
        "the lease is kept for teardown or replacement"
    );
    // A replacement destroys the held lease first.
    s.at(
        2_200,
        Input::Replace {
            attempt: 2,
            excluded_hosts: Vec::new(),
        },
    );
    assert!(s.log.contains("DestroyLease"), "{}", s.log);
}
