//! Seed 000 §15, end to end through the composite: the two workers of run 42
//! are leased, bootstrapped (probe, one verify, the start command with a join
//! binding), joined by their agents, handed off (SSH closed before ready),
//! found Dormant and ready, and then torn down, each destroying only its own
//! recorded lease.

mod orchestrator_harness;

use core_fsm::ids::LogicalNodeId;
use core_fsm::plan::RunPlan;
use core_fsm::port::{Input, LogStream};
use orchestrator_harness::Harness;

#[test]
fn worked_example() {
    let mut h = Harness::new(RunPlan::example_two_workers());
    h.at(0, Input::Start);
    h.note("the provider answers workers-0 with contract 123 and its endpoint");
    h.grant(1_000, "workers-0", 123, true);
    h.grant(1_100, "workers-1", 124, true);
    let s0 = h.session("workers-0");
    h.at(
        2_000,
        Input::SshConnected {
            op: h.ssh(s0),
            result: Ok(()),
        },
    );
    let probe = h.ssh(s0);
    for (ms, line) in [
        (2_100, "container boot entered"),
        (2_200, "swactor binary found"),
    ] {
        h.at(
            ms,
            Input::SshOutput {
                op: probe,
                stream: LogStream::Stdout,
                line: line.to_owned(),
            },
        );
    }
    h.at(
        2_300,
        Input::SshExited {
            op: probe,
            result: Ok(0),
        },
    );
    h.note("the verify command `test -x` passes, then the start command runs");
    h.at(
        2_400,
        Input::SshExited {
            op: h.ssh(s0),
            result: Ok(0),
        },
    );
    h.at(
        2_500,
        Input::SshExited {
            op: h.ssh(s0),
            result: Ok(0),
        },
    );
    h.note("workers-1 runs the same sequence independently");
    h.bootstrap_to_join(2_600, "workers-1");
    h.note("the agents join through the control plane; SSH closes; the nodes go Dormant");
    h.join_and_close(3_000, "workers-0", 123, "agent-a7");
    h.join_and_close(3_100, "workers-1", 124, "agent-b2");
    for node in ["workers-0", "workers-1"] {
        let machine = h.orchestrator.node(&LogicalNodeId::from(node)).unwrap();
        assert!(machine.is_ready(), "{node} is ready");
        assert!(
            machine
                .record()
                .agent
                .as_ref()
                .unwrap()
                .handed_off_at
                .is_some()
        );
    }
    let w0 = h
        .orchestrator
        .node(&LogicalNodeId::from("workers-0"))
        .unwrap()
        .record();
    assert_eq!(w0.agent.as_ref().unwrap().agent.as_str(), "agent-a7");
    assert_eq!(w0.lease_id().unwrap().as_str(), "vastai:123");
    assert_eq!(w0.bootstrap.as_ref().unwrap().last_stdout_seq, Some(2));
    assert!(h.orchestrator.is_settled());
    h.note("run completion: teardown destroys exactly the two recorded leases");
    h.at(10_000, Input::Teardown);
    let d0 = h.destroy("vastai:123");
    let d1 = h.destroy("vastai:124");
    h.at(
        10_500,
        Input::LeaseDestroyed {
            op: d0,
            result: Ok(()),
        },
    );
    assert!(!h.orchestrator.is_torn_down());
    h.at(
        10_600,
        Input::LeaseDestroyed {
            op: d1,
            result: Ok(()),
        },
    );
    assert!(h.orchestrator.is_torn_down());
    assert_eq!(
        *h.orchestrator.counters(),
        Default::default(),
        "nothing was ignored"
    );
    insta::assert_snapshot!(h.transcript);
}
