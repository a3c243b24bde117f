//! The oracle has teeth: each invariant is broken on purpose by a short
//! script of observations, and the oracle names it.

use conformance::NodeView;
use conformance::oracle::{Observation, Oracle};
use core_fsm::ids::{AgentId, LeaseId, LogicalNodeId, Nonce, OpId, RunId, SessionId};
use core_fsm::node::Lifecycle;
use core_fsm::plan::{DesiredShape, ProviderKind};
use core_fsm::port::{
    CreateLeaseRequest, Effect, Input, JournalRecord, LeaseFacts, LeaseGranted, LogRecord, LogSeqs,
    LogStream,
};
use core_fsm::time::Instant;
use std::collections::BTreeMap;

fn node() -> LogicalNodeId {
    LogicalNodeId::from("g0-0")
}

fn lease(n: u64, nonce: u64) -> LeaseFacts {
    LeaseFacts {
        provider: ProviderKind::Vastai,
        lease_id: LeaseId::new(format!("vastai:{n}")),
        contract_id: n.to_string(),
        offer_id: None,
        host_id: Some("host-0".to_owned()),
        nonce: Nonce(nonce),
        metadata: BTreeMap::new(),
    }
}

fn intent(nonce: u64) -> JournalRecord {
    JournalRecord::LeaseIntent {
        node: node(),
        nonce: Nonce(nonce),
        attempt: 1,
    }
}

fn started() -> Oracle {
    let mut o = Oracle::new();
    o.observe(Observation::Started { inc: 1 }).expect("ok");
    o
}

fn granted(o: &mut Oracle, op: u64, l: &LeaseFacts) {
    o.observe(Observation::Synced(&intent(l.nonce.0)))
        .expect("ok");
    o.observe(Observation::CreateReceived {
        nonce: l.nonce,
        created: Some(l),
    })
    .expect("ok");
    let input = Input::LeaseCreated {
        op: OpId(op),
        result: Ok(LeaseGranted {
            lease: l.clone().into(),
            endpoint: None,
        }),
    };
    o.observe(Observation::Delivered(&input)).expect("ok");
}

#[test]
fn w4_create_before_its_intent_is_durable() {
    let mut o = started();
    let l = lease(1, 7);
    let v = o
        .observe(Observation::CreateReceived {
            nonce: l.nonce,
            created: Some(&l),
        })
        .expect_err("W4");
    assert_eq!(v.id, "W4");
}

#[test]
fn w1_two_leases_for_one_nonce() {
    let mut o = started();
    granted(&mut o, 1, &lease(1, 7));
    let second = lease(2, 7);
    let v = o
        .observe(Observation::CreateReceived {
            nonce: Nonce(7),
            created: Some(&second),
        })
        .expect_err("W1");
    assert_eq!(v.id, "W1");
}

#[test]
fn w2_destroy_of_a_lease_never_learned() {
    let mut o = started();
    let l = lease(1, 7);
    o.observe(Observation::Synced(&intent(7))).expect("ok");
    o.observe(Observation::CreateReceived {
        nonce: Nonce(7),
        created: Some(&l),
    })
    .expect("ok");
    let destroy = Effect::DestroyLease {
        op: OpId(2),
        lease: l.into(),
    };
    let v = o.observe(Observation::Emitted(&destroy)).expect_err("W2");
    assert_eq!(v.id, "W2");
}

#[test]
fn w3_abandoned_intent_whose_lease_exists() {
    let mut o = started();
    granted(&mut o, 1, &lease(1, 7));
    let abandon = JournalRecord::IntentAbandoned {
        node: node(),
        nonce: Nonce(7),
    };
    assert_eq!(
        o.observe(Observation::Synced(&abandon)).expect_err("W3").id,
        "W3"
    );
}

#[test]
fn w9_create_after_teardown_and_w10_reused_op() {
    let mut o = started();
    let request = CreateLeaseRequest {
        run_id: RunId(1),
        node: node(),
        nonce: Nonce(1),
        provider: ProviderKind::Vastai,
        shape: DesiredShape::default().into(),
        excluded_hosts: Vec::new(),
    };
    let create = Effect::CreateLease {
        op: OpId(1),
        request,
    };
    o.observe(Observation::Emitted(&create)).expect("ok");
    assert_eq!(
        o.observe(Observation::Emitted(&create))
            .expect_err("W10")
            .id,
        "W10"
    );
    o.observe(Observation::Delivered(&Input::Teardown))
        .expect("ok");
    assert_eq!(
        o.observe(Observation::Emitted(&create)).expect_err("W9").id,
        "W9"
    );
}

#[test]
fn w5_ready_without_a_join_or_outside_dormant() {
    let mut o = started();
    let l = lease(1, 7);
    granted(&mut o, 1, &l);
    let id = node();
    let agent = AgentId::from("agent-1");
    let view = NodeView {
        node: &id,
        stage: Lifecycle::Dormant,
        ready: true,
        lease: Some(&l),
        agent: Some(&agent),
        failed_reason: None,
    };
    assert_eq!(o.node(view).expect_err("no join").id, "W5");
    let not_dormant = NodeView {
        stage: Lifecycle::HandedOff,
        ..view
    };
    assert_eq!(
        o.node(not_dormant).expect_err("ready outside Dormant").id,
        "W5"
    );
    let join = Input::AgentJoined {
        node: id.clone(),
        lease_id: l.lease_id.clone(),
        agent: agent.clone(),
    };
    o.observe(Observation::Delivered(&join)).expect("ok");
    o.observe(Observation::ConnectionOpened {
        session: SessionId(1),
        lease: &l.lease_id,
    })
    .expect("ok");
    assert_eq!(o.node(view).expect_err("ssh still open").id, "W5");
    o.observe(Observation::ConnectionClosed(SessionId(1)))
        .expect("ok");
    o.node(view).expect("handoff complete");
}

#[test]
fn w6_log_sequence_gap() {
    let mut o = started();
    let record = |seq| {
        Effect::Log(LogRecord {
            run_id: RunId(1),
            node: node(),
            lease_id: LeaseId::from("vastai:1"),
            source: "ssh-bootstrap".to_owned(),
            stream: LogStream::Stdout,
            seq,
            at: Instant::ZERO,
            line: "x".to_owned(),
        })
    };
    o.observe(Observation::Emitted(&record(1))).expect("ok");
    assert_eq!(
        o.observe(Observation::Emitted(&record(3)))
            .expect_err("W6")
            .id,
        "W6"
    );
}

#[test]
fn w6_numbers_run_per_node_across_leases_and_restarts() {
    let mut o = started();
    let record = |lease: &str, seq| {
        Effect::Log(LogRecord {
            run_id: RunId(1),
            node: node(),
            lease_id: LeaseId::from(lease),
            source: "ssh-bootstrap".to_owned(),
            stream: LogStream::Stdout,
            seq,
            at: Instant::ZERO,
            line: "x".to_owned(),
        })
    };
    o.observe(Observation::Emitted(&record("vastai:1", 1)))
        .expect("ok");
    o.observe(Observation::Emitted(&record("vastai:1", 2)))
        .expect("ok");
    let failed = JournalRecord::NodeFailed {
        node: node(),
        reason: "verify".to_owned(),
        log_seqs: LogSeqs {
            stdout: 2,
            stderr: 0,
        },
    };
    o.observe(Observation::Synced(&failed)).expect("ok");
    let restart = record("vastai:2", 1);
    assert_eq!(
        o.observe(Observation::Emitted(&restart))
            .expect_err("a new lease does not restart the numbers")
            .id,
        "W6"
    );
    o.observe(Observation::Emitted(&record("vastai:2", 3)))
        .expect("a new lease continues them");
    o.observe(Observation::Crashed).expect("ok");
    o.observe(Observation::Started { inc: 2 }).expect("ok");
    o.observe(Observation::Emitted(&record("vastai:2", 3)))
        .expect("a restart continues from the synced journal's numbers");
    assert_eq!(
        o.observe(Observation::Emitted(&record("vastai:2", 5)))
            .expect_err("a gap")
            .id,
        "W6"
    );
}
