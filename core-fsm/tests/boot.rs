//! The boot readiness machine (SPEC.md "Node boot readiness"), driven through public resource
//! outcomes: transcripts of typical boots, one failed resource at a time,
//! the deferred worker policy, the timeout and late facts; and exhaustive
//! checks over every order of the readiness facts.

mod boot_world;

use boot_world::{Run, config, ready, run, spaced};
use core_fsm::boot::{BootFault, Effect, Input, Membership, Resource, WorkerStartPolicy};
use core_fsm::ids::LogicalNodeId;
use std::fmt::Write as _;

const REQUIRED: WorkerStartPolicy = WorkerStartPolicy::Required;
const DEFERRED: WorkerStartPolicy = WorkerStartPolicy::Deferred;

fn all_ready(order: &[Resource]) -> Vec<Input> {
    order.iter().copied().map(ready).collect()
}

fn failure(resource: Resource) -> Input {
    let reason = "injected".to_owned();
    match resource {
        Resource::Transport => Input::TransportFailed { reason },
        Resource::Identity => Input::IdentityInvalid { reason },
        Resource::Arena => Input::ArenaFailed { reason },
        Resource::Worker => Input::WorkerFailed { reason },
        other => panic!("{other} has no failure input"),
    }
}

const FAILABLE: [Resource; 4] = [
    Resource::Transport,
    Resource::Identity,
    Resource::Arena,
    Resource::Worker,
];

fn permutations(items: &[Resource]) -> Vec<Vec<Resource>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            all.push(tail);
        }
    }
    all
}

fn kinds(run: &Run) -> Vec<(usize, &'static str)> {
    run.effects
        .iter()
        .map(|(step, e)| {
            let kind = match e {
                Effect::NodeAvailable { .. } => "available",
                Effect::Faulted { .. } => "faulted",
                Effect::ProvisioningReady { .. } => "provisioning",
                Effect::WorkerUnavailable { .. } => "worker-unavailable",
            };
            (*step, kind)
        })
        .collect()
}

#[test]
fn boots_in_spec_order_and_in_reverse() {
    let mut out = String::new();
    writeln!(out, "## spec order, worker required").unwrap();
    out += &run(config(REQUIRED), &spaced(all_ready(&Resource::ALL))).transcript;
    writeln!(
        out,
        "## reverse order, membership joining then joined, duplicates"
    )
    .unwrap();
    let mut inputs = vec![
        Input::CanAcceptProvisioning,
        Input::Membership(Membership::Joining),
    ];
    inputs.push(Input::CanAcceptProvisioning);
    inputs.extend(all_ready(&[Resource::Worker, Resource::Arena]));
    inputs.push(Input::Membership(Membership::Joined));
    inputs.push(Input::Membership(Membership::Joining));
    inputs.extend(all_ready(&[
        Resource::Identity,
        Resource::Transport,
        Resource::Process,
    ]));
    inputs.extend(all_ready(&[Resource::Arena, Resource::Process]));
    out += &run(config(REQUIRED), &spaced(inputs)).transcript;
    insta::assert_snapshot!(out);
}

#[test]
fn every_readiness_order_is_available_exactly_at_its_last_fact() {
    for order in permutations(&Resource::ALL) {
        let required = run(config(REQUIRED), &spaced(all_ready(&order)));
        assert_eq!(
            kinds(&required),
            [(6, "available"), (6, "provisioning")],
            "{order:?}"
        );
        // Deferred: available at the last fact other than the worker; the
        // worker gates provisioning only.
        let deferred = run(config(DEFERRED), &spaced(all_ready(&order)));
        let worker_at = order.iter().position(|r| *r == Resource::Worker).unwrap();
        let last_other = if worker_at == 6 { 5 } else { 6 };
        let expected = [
            (last_other, "available"),
            (last_other.max(worker_at), "provisioning"),
        ];
        assert_eq!(kinds(&deferred), expected, "{order:?}");
    }
}

#[test]
fn one_failed_resource_at_a_time_in_every_order() {
    for failed in FAILABLE {
        let others: Vec<Resource> = Resource::ALL.into_iter().filter(|r| *r != failed).collect();
        for order in permutations(&others) {
            for at in 0..=order.len() {
                let mut inputs = all_ready(&order);
                inputs.insert(at, failure(failed));
                // The failed resource's own success arrives late: ignored.
                inputs.push(ready(failed));
                let r = run(config(REQUIRED), &spaced(inputs));
                assert_eq!(
                    kinds(&r),
                    [(at, "faulted")],
                    "{failed} at {at} in {order:?}"
                );
                let fault = r.machine.fault().expect("faulted");
                assert_eq!(fault.resources(), [failed]);
                assert_eq!(
                    r.machine.counters().after_fault,
                    (order.len() - at + 1) as u64
                );
            }
        }
    }
}

#[test]
fn each_failed_resource_gives_its_typed_fault() {
    let mut out = String::new();
    let first = [Resource::Process, Resource::Transport, Resource::Arena];
    let mut cases: Vec<(&str, Input)> = FAILABLE
        .iter()
        .map(|r| ("", failure(*r)))
        .collect::<Vec<_>>();
    let names = [
        "transport fails",
        "identity invalid",
        "arena fails",
        "worker fails (required)",
    ];
    for (case, name) in cases.iter_mut().zip(names) {
        case.0 = name;
    }
    let wrong_node = Input::IdentityAssigned {
        node: LogicalNodeId::from("workers-1"),
    };
    cases.push(("identity assigned to another node", wrong_node));
    for (name, bad) in cases {
        writeln!(out, "## {name}").unwrap();
        let mut inputs: Vec<Input> = first.iter().copied().map(ready).collect();
        if matches!(
            bad,
            Input::TransportFailed { .. } | Input::ArenaFailed { .. }
        ) {
            inputs.retain(|i| *i != Input::TransportReady && *i != Input::ArenaCreated);
        }
        inputs.push(bad);
        inputs.extend(all_ready(&Resource::ALL));
        inputs.push(Input::Tick);
        out += &run(config(REQUIRED), &spaced(inputs)).transcript;
    }
    insta::assert_snapshot!(out);
}

#[test]
fn deferred_worker_start() {
    let mut out = String::new();
    let others: Vec<Resource> = Resource::ALL
        .into_iter()
        .filter(|r| *r != Resource::Worker)
        .collect();
    writeln!(
        out,
        "## available without the worker; provisioning once it is ready"
    )
    .unwrap();
    let mut inputs = all_ready(&others);
    inputs.push(Input::WorkerReady);
    inputs.push(Input::WorkerReady);
    out += &run(config(DEFERRED), &spaced(inputs)).transcript;
    writeln!(
        out,
        "## worker ready first: provisioning together with availability"
    )
    .unwrap();
    out += &run(config(DEFERRED), &spaced(all_ready(&Resource::ALL))).transcript;
    writeln!(
        out,
        "## worker fails while booting: available, never provisioned"
    )
    .unwrap();
    let mut inputs = vec![
        Input::WorkerReady,
        Input::WorkerFailed {
            reason: "exit 1".into(),
        },
    ];
    inputs.extend(all_ready(&others));
    inputs.push(Input::WorkerReady);
    out += &run(config(DEFERRED), &spaced(inputs)).transcript;
    writeln!(out, "## worker fails after availability").unwrap();
    let mut inputs = all_ready(&others);
    inputs.push(Input::WorkerFailed {
        reason: "cuda init".into(),
    });
    inputs.push(Input::WorkerReady);
    out += &run(config(DEFERRED), &spaced(inputs)).transcript;
    insta::assert_snapshot!(out);
}

#[test]
fn boot_timeout_names_what_is_missing() {
    let mut out = String::new();
    writeln!(
        out,
        "## a spurious tick, then the deadline (30s) with three facts missing"
    )
    .unwrap();
    let mut script = spaced(all_ready(&[
        Resource::Process,
        Resource::Transport,
        Resource::Worker,
    ]));
    script.push((5_000, Input::Tick));
    script.push((30_000, Input::Tick));
    script.push((30_010, Input::ArenaCreated));
    out += &run(config(REQUIRED), &script).transcript;
    writeln!(
        out,
        "## the last fact arrives after the deadline, before its tick: timeout first"
    )
    .unwrap();
    let others: Vec<Resource> = Resource::ALL
        .into_iter()
        .filter(|r| *r != Resource::Arena)
        .collect();
    let mut script = spaced(all_ready(&others));
    script.push((30_000, Input::ArenaCreated));
    out += &run(config(REQUIRED), &script).transcript;
    writeln!(out, "## deferred: the worker is never missing").unwrap();
    let mut script = spaced(vec![Input::ProcessAlive]);
    script.push((30_000, Input::Tick));
    let r = run(config(DEFERRED), &script);
    let Some(BootFault::Timeout { missing, .. }) = r.machine.fault() else {
        panic!("no timeout")
    };
    assert!(!missing.contains(&Resource::Worker));
    out += &r.transcript;
    insta::assert_snapshot!(out);
}

#[test]
fn late_facts_after_availability_are_ignored_and_counted() {
    let mut inputs = all_ready(&Resource::ALL);
    inputs.push(Input::ArenaFailed {
        reason: "late".into(),
    });
    inputs.push(Input::TransportFailed {
        reason: "late".into(),
    });
    inputs.push(Input::ProcessAlive);
    inputs.push(Input::Tick);
    // A worker crash after availability withdraws provisioning readiness
    // (even with a required start), and a later "ready" does not restore it.
    inputs.push(Input::WorkerFailed {
        reason: "crash".into(),
    });
    inputs.push(Input::WorkerReady);
    inputs.push(Input::WorkerFailed {
        reason: "again".into(),
    });
    let r = run(config(REQUIRED), &spaced(inputs));
    assert!(r.machine.is_available());
    assert!(!r.machine.may_accept_provisioning());
    insta::assert_snapshot!(r.transcript);
}
