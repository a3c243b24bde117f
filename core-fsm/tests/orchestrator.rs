//! The composite: routing by operation id, joins by (node, lease), teardown,
//! restart from the journal (adoption by nonce, list retries, abandonment),
//! and replacement with the reconciler.

mod orchestrator_harness;

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, Nonce, OpId};
use core_fsm::node::Lifecycle;
use core_fsm::plan::RunPlan;
use core_fsm::port::{Input, JournalRecord, LogStream, ProviderErrorKind, SshErrorKind};
use orchestrator_harness::{Harness, bounded_plan, joined, lease, provider_error, ssh_error};

fn id(node: &str) -> LogicalNodeId {
    LogicalNodeId::from(node)
}

#[test]
fn unknown_duplicate_and_misrouted_answers_are_counted() {
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    h.at(10, Input::Start);
    h.at(
        20,
        Input::LeaseDestroyed {
            op: OpId(999),
            result: Ok(()),
        },
    );
    h.at(30, Input::SshClosed { op: OpId(1) });
    h.grant(1_000, "workers-0", 123, true);
    let (op, _) = h.create("workers-0");
    h.note("the same answer again: its route is gone");
    h.grant(1_010, "workers-0", 123, true);
    h.at(
        1_020,
        Input::LeasesListed {
            op,
            result: Ok(vec![]),
        },
    );
    h.at(
        1_030,
        Input::Destroy {
            node: id("workers-9"),
        },
    );
    h.at(
        1_040,
        Input::SshOutput {
            op: OpId(998),
            stream: LogStream::Stdout,
            line: "stray".to_owned(),
        },
    );
    let c = h.orchestrator.counters();
    assert_eq!(
        (c.unknown_ops, c.unknown_nodes, c.ignored_commands),
        (5, 1, 1)
    );
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn joins_are_routed_by_node_and_lease() {
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    h.grant(1_000, "workers-0", 123, true);
    h.at(1_100, joined("workers-0", 123, "agent-early"));
    h.at(1_150, joined("workers-1", 124, "agent-nobody"));
    h.at(1_160, joined("workers-7", 123, "agent-unknown"));
    h.bootstrap_to_join(2_000, "workers-0");
    h.at(3_000, joined("workers-0", 999, "agent-wrong-lease"));
    h.at(3_100, joined("workers-0", 123, "agent-a7"));
    h.at(3_200, joined("workers-0", 123, "agent-second"));
    let session = h.session("workers-0");
    h.at(3_300, Input::SshClosed { op: h.ssh(session) });
    h.at(3_400, joined("workers-0", 123, "agent-after-handoff"));
    let record = h.orchestrator.node(&id("workers-0")).unwrap().record();
    assert_eq!(record.agent.as_ref().unwrap().agent.as_str(), "agent-a7");
    assert_eq!(h.orchestrator.counters().ignored_joins, 6);
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn a_failed_session_fails_the_node_and_mvp_policy_never_replaces() {
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    h.grant(1_000, "workers-0", 123, true);
    let session = h.session("workers-0");
    h.at(
        1_100,
        Input::SshConnected {
            op: h.ssh(session),
            result: Ok(()),
        },
    );
    h.at(
        1_200,
        Input::SshExited {
            op: h.ssh(session),
            result: Ok(0),
        },
    );
    h.at(
        1_300,
        Input::SshExited {
            op: h.ssh(session),
            result: Ok(1),
        },
    );
    h.at(1_400, Input::SshClosed { op: h.ssh(session) });
    assert_eq!(
        h.orchestrator.node(&id("workers-0")).unwrap().stage(),
        Lifecycle::Failed
    );
    h.note("an answer to the ended session's probe is unknown now");
    h.at(
        1_500,
        Input::SshExited {
            op: OpId(5),
            result: Ok(0),
        },
    );
    h.at(900_000, Input::Tick);
    assert_eq!(
        h.orchestrator.node(&id("workers-0")).unwrap().stage(),
        Lifecycle::Failed
    );
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn teardown_cancels_sessions_and_waits_for_creates_in_flight() {
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    h.grant(1_000, "workers-0", 123, true);
    let session = h.session("workers-0");
    h.at(
        1_100,
        Input::SshConnected {
            op: h.ssh(session),
            result: Ok(()),
        },
    );
    h.at(2_000, Input::Teardown);
    assert!(!h.orchestrator.is_torn_down());
    h.at(
        2_100,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:123"),
            result: Ok(()),
        },
    );
    h.note("the session's close answer arrives after the lease is gone");
    h.at(2_200, Input::SshClosed { op: h.ssh(session) });
    h.note("workers-1's create answers only now: its lease is destroyed at once");
    h.grant(2_300, "workers-1", 124, true);
    h.at(
        2_400,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:124"),
            result: Ok(()),
        },
    );
    assert!(h.orchestrator.is_torn_down());
    h.at(2_500, Input::Start);
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn spent_destroy_retries_settle_but_the_lease_still_stands() {
    // sim KB3: a 429 storm outlasts the automatic destroy retries.
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    h.grant(1_000, "workers-0", 123, false);
    h.grant(1_000, "workers-1", 124, false);
    h.at(2_000, Input::Teardown);
    h.at(
        2_100,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:124"),
            result: Ok(()),
        },
    );
    h.note("every destroy of vastai:123 is refused until the retries are spent");
    loop {
        h.at(
            h.now.0 + 100,
            Input::LeaseDestroyed {
                op: h.destroy("vastai:123"),
                result: Err(provider_error(ProviderErrorKind::Transient, "429")),
            },
        );
        if h.orchestrator.next_deadline().is_none() {
            break;
        }
        h.tick();
    }
    let m = h.orchestrator.node(&id("workers-0")).unwrap();
    let r = m.record();
    assert_eq!(m.stage(), Lifecycle::Destroying);
    assert_eq!(r.lease_id().map(LeaseId::as_str), Some("vastai:123"));
    assert!(
        r.destroyed_at.is_none(),
        "the ledger shows the lease standing"
    );
    assert!(r.destroy_error.is_some(), "and says why");
    assert!(
        h.orchestrator.is_settled(),
        "nothing more happens by itself"
    );
    assert!(!h.orchestrator.is_torn_down(), "a known lease still stands");
    h.note("a second teardown (drover down) tries again");
    h.at(h.now.0 + 60_000, Input::Teardown);
    h.at(
        h.now.0 + 100,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:123"),
            result: Ok(()),
        },
    );
    assert!(h.orchestrator.is_torn_down());
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn restart_adopts_an_ambiguous_create_by_nonce_and_rebootstraps() {
    let plan = RunPlan::example_two_workers();
    let mut first = Harness::new(plan.clone());
    first.at(0, Input::Start);
    first.grant(1_000, "workers-1", 124, true);
    let (_, nonce) = first.create("workers-0");
    let journal = first.journal();
    let mut h = Harness::restore(plan, &journal);
    h.at(5_000, Input::Start);
    h.note("the first list fails: it is retried, never read as empty");
    h.at(
        5_100,
        Input::LeasesListed {
            op: h.list(),
            result: Err(provider_error(ProviderErrorKind::Transient, "503")),
        },
    );
    h.tick();
    let list = h.list();
    let now = h.now.0;
    h.at(
        now + 100,
        Input::LeasesListed {
            op: list,
            result: Ok(vec![lease(777, Nonce(1)), lease(123, nonce)]),
        },
    );
    let lookup = h.lookup("vastai:123");
    let ready = core_fsm::port::EndpointStatus::Ready(orchestrator_harness::endpoint(123));
    h.at(
        now + 200,
        Input::EndpointLooked {
            op: lookup,
            result: Ok(ready),
        },
    );
    let creates = h
        .effects
        .iter()
        .filter(|e| matches!(e, core_fsm::port::Effect::CreateLease { .. }))
        .count();
    assert_eq!(creates, 0, "never create twice for one intent");
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn restart_abandons_an_intent_the_list_proves_void_and_keeps_ready_nodes() {
    let plan = RunPlan::example_two_workers();
    let mut first = Harness::new(plan.clone());
    first.at(0, Input::Start);
    first.grant(1_000, "workers-1", 124, true);
    first.bootstrap_to_join(1_100, "workers-1");
    first.join_and_close(1_200, "workers-1", 124, "agent-b2");
    let journal = first.journal();
    let mut h = Harness::restore(plan, &journal);
    assert!(h.orchestrator.node(&id("workers-1")).unwrap().is_ready());
    h.at(5_000, Input::Start);
    for ms in [5_100, 125_200, 245_300] {
        h.at(
            ms,
            Input::LeasesListed {
                op: h.list(),
                result: Ok(vec![lease(124, Nonce(3))]),
            },
        );
        if ms < 245_300 {
            h.note("no lease with the nonce yet: list again after the create timeout");
            h.tick();
        }
    }
    h.note("the restarted agent of the ready node reconnects once");
    h.at(
        245_400,
        Input::AgentJoined {
            node: id("workers-1"),
            lease_id: LeaseId::from("vastai:124"),
            agent: AgentId::from("agent-b2"),
        },
    );
    h.at(245_500, joined("workers-1", 124, "agent-b2"));
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn restart_adopts_a_lease_the_first_list_did_not_show() {
    // sim KB2: the create took effect but the lease is not listed yet (F4)
    // when the restarted orchestrator first looks.
    let plan = RunPlan::example_two_workers();
    let mut first = Harness::new(plan.clone());
    first.at(0, Input::Start);
    let (_, nonce) = first.create("workers-0");
    first.grant(1_000, "workers-1", 124, true);
    let journal = first.journal();
    let mut h = Harness::restore(plan, &journal);
    h.at(5_000, Input::Start);
    let visible = vec![lease(124, first.create("workers-1").1)];
    h.at(
        5_100,
        Input::LeasesListed {
            op: h.list(),
            result: Ok(visible.clone()),
        },
    );
    h.note("one empty list proves nothing: no abandonment, no second create");
    h.tick();
    let mut both = visible;
    both.push(lease(123, nonce));
    h.at(
        125_200,
        Input::LeasesListed {
            op: h.list(),
            result: Ok(both),
        },
    );
    let r = h.orchestrator.node(&id("workers-0")).unwrap().record();
    assert_eq!(r.lease_id().map(LeaseId::as_str), Some("vastai:123"));
    let abandoned = h
        .journal()
        .iter()
        .any(|r| matches!(r, JournalRecord::IntentAbandoned { .. }));
    assert!(!abandoned, "the intent is never abandoned");
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn restart_finishes_a_requested_destroy() {
    let plan = RunPlan::example_two_workers();
    let mut first = Harness::new(plan.clone());
    first.at(0, Input::Start);
    first.grant(1_000, "workers-0", 123, true);
    first.at(2_000, Input::Teardown);
    let journal = first.journal();
    assert!(matches!(
        journal.last(),
        Some(JournalRecord::DestroyRequested { .. })
    ));
    let mut h = Harness::restore(plan.clone(), &journal);
    assert!(
        !h.orchestrator.holds_no_lease(),
        "a lease and an open intent stand: the run is not over"
    );
    h.at(5_000, Input::Teardown);
    h.at(
        5_100,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:123"),
            result: Ok(()),
        },
    );
    h.note("the other node's open intent: three empty lists a create timeout apart");
    for ms in [5_200, 125_300, 245_400] {
        assert!(!h.orchestrator.is_torn_down());
        h.at(
            ms,
            Input::LeasesListed {
                op: h.list(),
                result: Ok(vec![]),
            },
        );
        if ms < 245_400 {
            h.tick();
        }
    }
    assert!(h.orchestrator.is_torn_down());
    // Restored from the journal of this finished teardown, the run holds
    // nothing: a runtime may start a new one instead.
    let whole: Vec<JournalRecord> = journal.iter().cloned().chain(h.journal()).collect();
    let ended = Harness::restore(plan, &whole);
    assert!(ended.orchestrator.holds_no_lease());
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn bounded_replacement_destroys_the_failed_lease_then_tries_once_more() {
    let mut h = Harness::new(bounded_plan());
    h.at(0, Input::Start);
    h.grant(1_000, "workers-0", 123, true);
    let session = h.session("workers-0");
    h.at(
        1_100,
        Input::SshConnected {
            op: h.ssh(session),
            result: Err(ssh_error(SshErrorKind::HostKeyMismatch, "changed")),
        },
    );
    h.at(1_200, Input::SshClosed { op: h.ssh(session) });
    h.note("the backoff expires: destroy the failed lease, then a new intent avoiding host-123");
    h.tick();
    let now = h.now.0;
    h.at(
        now + 100,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:123"),
            result: Ok(()),
        },
    );
    h.at(
        now + 200,
        Input::LeaseCreated {
            op: h.create("workers-0").0,
            result: Err(provider_error(ProviderErrorKind::Rejected, "no offer")),
        },
    );
    assert_eq!(
        h.orchestrator
            .node(&id("workers-0"))
            .unwrap()
            .record()
            .attempt,
        2
    );
    assert!(
        h.orchestrator.is_settled(),
        "attempts are spent: it stays failed"
    );
    insta::assert_snapshot!(h.transcript);
}

/// Output lines on the session's last command.
fn output(h: &mut Harness, ms: u64, node: &str, lines: &[(LogStream, &str)]) {
    let session = h.session(node);
    for (stream, line) in lines {
        h.at(
            ms,
            Input::SshOutput {
                op: h.ssh(session),
                stream: *stream,
                line: (*line).to_owned(),
            },
        );
    }
}

#[test]
fn log_sequence_numbers_continue_across_a_replacement_and_a_restart() {
    let plan = bounded_plan();
    let mut h = Harness::new(plan.clone());
    h.at(0, Input::Start);
    h.grant(1_000, "workers-0", 123, true);
    let session = h.session("workers-0");
    h.at(
        1_100,
        Input::SshConnected {
            op: h.ssh(session),
            result: Ok(()),
        },
    );
    let (out, err) = (LogStream::Stdout, LogStream::Stderr);
    output(&mut h, 1_200, "workers-0", &[(out, "probe"), (err, "warn")]);
    h.at(
        1_300,
        Input::SshExited {
            op: h.ssh(session),
            result: Ok(0),
        },
    );
    output(&mut h, 1_400, "workers-0", &[(out, "verify says no")]);
    h.at(
        1_500,
        Input::SshExited {
            op: h.ssh(session),
            result: Ok(1),
        },
    );
    h.note("the failure journals the last numbers: stdout 2, stderr 1");
    h.at(1_600, Input::SshClosed { op: h.ssh(session) });
    h.tick();
    let now = h.now.0;
    h.at(
        now + 100,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:123"),
            result: Ok(()),
        },
    );
    h.grant(now + 200, "workers-0", 124, true);
    let session = h.session("workers-0");
    h.at(
        now + 300,
        Input::SshConnected {
            op: h.ssh(session),
            result: Ok(()),
        },
    );
    h.note("the replacement's session continues: stdout 3, stderr 2");
    output(
        &mut h,
        now + 400,
        "workers-0",
        &[(out, "probe"), (err, "warn")],
    );
    let seqs = h
        .orchestrator
        .node(&id("workers-0"))
        .unwrap()
        .record()
        .log_seqs;
    assert_eq!((seqs.stdout, seqs.stderr), (3, 2));
    h.note("a crash now: the journal's last numbers are those of the failure");
    let journal = h.journal();
    let first_life = std::mem::take(&mut h.transcript);
    let mut h = Harness::restore(plan, &journal);
    h.at(now + 10_000, Input::Start);
    let ready = core_fsm::port::EndpointStatus::Ready(orchestrator_harness::endpoint(124));
    h.at(
        now + 10_100,
        Input::EndpointLooked {
            op: h.lookup("vastai:124"),
            result: Ok(ready),
        },
    );
    let session = h.session("workers-0");
    h.at(
        now + 10_200,
        Input::SshConnected {
            op: h.ssh(session),
            result: Ok(()),
        },
    );
    h.note(
        "numbering continues from the journal: the interrupted session's stdout 3 is used again",
    );
    output(&mut h, now + 10_300, "workers-0", &[(out, "probe")]);
    let logs: Vec<u64> = h
        .effects
        .iter()
        .filter_map(|e| match e {
            core_fsm::port::Effect::Log(r) => Some(r.seq),
            _ => None,
        })
        .collect();
    assert_eq!(logs, vec![3]);
    let second_life = std::mem::take(&mut h.transcript);
    let mut h = Harness::restore(bounded_plan(), &journal);
    h.note("a runtime that read 3/2 from its datastream raises the numbers first");
    let seqs = core_fsm::port::LogSeqs {
        stdout: 3,
        stderr: 2,
    };
    h.orchestrator.raise_log_seqs(&id("workers-0"), seqs);
    h.at(now + 20_000, Input::Start);
    let ready = core_fsm::port::EndpointStatus::Ready(orchestrator_harness::endpoint(124));
    h.at(
        now + 20_100,
        Input::EndpointLooked {
            op: h.lookup("vastai:124"),
            result: Ok(ready),
        },
    );
    let session = h.session("workers-0");
    h.at(
        now + 20_200,
        Input::SshConnected {
            op: h.ssh(session),
            result: Ok(()),
        },
    );
    output(
        &mut h,
        now + 20_300,
        "workers-0",
        &[(out, "probe"), (err, "warn")],
    );
    insta::assert_snapshot!(format!(
        "{first_life}## restarted\n{second_life}## restarted, numbers raised\n{}",
        h.transcript
    ));
}

#[test]
fn restart_between_the_replacement_destroy_and_its_intent_resumes_it() {
    let plan = bounded_plan();
    let mut first = Harness::new(plan.clone());
    first.at(0, Input::Start);
    first.grant(1_000, "workers-0", 123, true);
    let session = first.session("workers-0");
    first.at(
        1_100,
        Input::SshConnected {
            op: first.ssh(session),
            result: Err(ssh_error(SshErrorKind::HostKeyMismatch, "changed")),
        },
    );
    first.at(
        1_200,
        Input::SshClosed {
            op: first.ssh(session),
        },
    );
    first.tick();
    let now = first.now.0;
    first.at(
        now + 100,
        Input::LeaseDestroyed {
            op: first.destroy("vastai:123"),
            result: Ok(()),
        },
    );
    let mut journal = first.journal();
    let cut = journal
        .iter()
        .position(|r| matches!(r, JournalRecord::LeaseReleased { .. }))
        .expect("released");
    journal.truncate(cut + 1);
    let mut h = Harness::restore(plan, &journal);
    h.note("killed after LeaseReleased was synced, before the new intent was");
    h.at(now + 5_000, Input::Start);
    let m = h.orchestrator.node(&id("workers-0")).unwrap();
    assert_eq!(
        (m.stage(), m.record().attempt),
        (Lifecycle::LeaseRequested, 2)
    );
    assert!(
        h.effects
            .iter()
            .any(|e| matches!(e, core_fsm::port::Effect::CreateLease { request, .. } if request.excluded_hosts == ["host-123"])),
        "the quarantine survives the restart"
    );
    insta::assert_snapshot!(h.transcript);
}

#[test]
fn journaled_nodes_the_plan_lost_are_restored_to_be_destroyed() {
    let plan = RunPlan::example_two_workers();
    let mut first = Harness::new(plan.clone());
    first.at(0, Input::Start);
    first.grant(1_000, "workers-0", 123, true);
    first.grant(1_000, "workers-1", 124, true);
    let journal = first.journal();
    let mut smaller = plan;
    smaller.groups[0].count = 1;
    let mut h = Harness::restore(smaller.clone(), &journal);
    assert_eq!(h.orchestrator.counters().unplanned_journal_nodes, 1);
    h.note("workers-1 is no longer planned: drover down must still destroy its lease");
    h.at(5_000, Input::Teardown);
    for lease in ["vastai:123", "vastai:124"] {
        h.at(
            5_100,
            Input::LeaseDestroyed {
                op: h.destroy(lease),
                result: Ok(()),
            },
        );
    }
    assert!(h.orchestrator.is_torn_down());
    let down = std::mem::take(&mut h.transcript);
    let mut h = Harness::restore(smaller, &journal);
    h.note("up again with the smaller plan: the lost node's lease goes at Start");
    h.at(5_000, Input::Start);
    h.at(
        5_100,
        Input::LeaseDestroyed {
            op: h.destroy("vastai:124"),
            result: Ok(()),
        },
    );
    let m = h.orchestrator.node(&id("workers-1")).unwrap();
    assert_eq!(m.stage(), Lifecycle::Destroyed);
    insta::assert_snapshot!(format!("{down}## up\n{}", h.transcript));
}
