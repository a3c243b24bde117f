//! Boot machine properties over generated fact sequences (duplicates,
//! failures, wrong identities, ticks, late facts): NodeAvailable never
//! precedes its facts, at most one boot outcome, nothing after a fault,
//! invariants after every step, same inputs give the same transcript.

mod boot_world;

use boot_world::{BOOT_TIMEOUT, config, ready};
use core_fsm::boot::{BootFault, Effect, Input, Machine, Membership, Resource, WorkerStartPolicy};
use core_fsm::ids::LogicalNodeId;
use core_fsm::{Instant, Machine as _};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn input() -> impl Strategy<Value = Input> {
    let reason = || Just("x".to_owned());
    prop_oneof![
        12 => proptest::sample::select(Resource::ALL.to_vec()).prop_map(ready),
        2 => Just(Input::Membership(Membership::Joining)),
        2 => Just(Input::Tick),
        1 => reason().prop_map(|reason| Input::TransportFailed { reason }),
        1 => reason().prop_map(|reason| Input::IdentityInvalid { reason }),
        1 => reason().prop_map(|reason| Input::ArenaFailed { reason }),
        1 => reason().prop_map(|reason| Input::WorkerFailed { reason }),
        1 => Just(Input::IdentityAssigned { node: LogicalNodeId::from("workers-9") }),
    ]
}

fn script() -> impl Strategy<Value = Vec<(u64, Input)>> {
    proptest::collection::vec((0u64..=4_000, input()), 0..40)
}

fn policy() -> impl Strategy<Value = WorkerStartPolicy> {
    prop_oneof![
        Just(WorkerStartPolicy::Required),
        Just(WorkerStartPolicy::Deferred)
    ]
}

/// The success fact an input reports, if any.
fn fact_of(input: &Input) -> Option<Resource> {
    Resource::ALL.into_iter().find(|r| {
        ready(*r) == *input || matches!((r, input), (Resource::Membership, Input::Membership(_)))
    })
}

/// Whether the input, arriving while booting, must fault the boot.
fn is_fatal(input: &Input, policy: WorkerStartPolicy) -> bool {
    match input {
        Input::TransportFailed { .. }
        | Input::IdentityInvalid { .. }
        | Input::ArenaFailed { .. } => true,
        Input::IdentityAssigned { node } => node.as_str() != "workers-0",
        Input::WorkerFailed { .. } => policy == WorkerStartPolicy::Required,
        _ => false,
    }
}

fn transcript(policy: WorkerStartPolicy, script: &[(u64, Input)]) -> Vec<String> {
    let mut m = Machine::new(config(policy), Instant::ZERO);
    let mut now = Instant::ZERO;
    script
        .iter()
        .map(|(gap, input)| {
            now = Instant(now.as_millis() + gap);
            let out = m.handle(now, input.clone());
            format!("{now} {input:?} -> {} {out:?}", m.phase())
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(1024)
    })]

    #[test]
    fn availability_follows_the_facts(policy in policy(), script in script()) {
        let mut m = Machine::new(config(policy), Instant::ZERO);
        // The oracle's own reading of SPEC.md "Node boot readiness", not the machine's.
        let required: Vec<Resource> = Resource::ALL
            .into_iter()
            .filter(|r| *r != Resource::Worker || policy == WorkerStartPolicy::Required)
            .collect();
        prop_assert_eq!(&m.required(), &required);
        let deadline = Instant::ZERO + BOOT_TIMEOUT;
        let mut now = Instant::ZERO;
        let mut facts = BTreeSet::new();
        let mut worker_failed = false;
        let mut fatal_seen = false;
        let (mut available, mut faulted, mut provisioning, mut unavailable) = (0, 0, 0, 0);
        for (gap, input) in &script {
            now = Instant(now.as_millis() + gap);
            let outcome_before = available + faulted;
            if outcome_before == 0 && now < deadline {
                fatal_seen |= is_fatal(input, policy);
                facts.extend(fact_of(input));
            }
            worker_failed |= matches!(input, Input::WorkerFailed { .. });
            let was_faulted = faulted > 0;
            let out = m.handle(now, input.clone());
            m.check_invariants();
            prop_assert!(!was_faulted || out.is_empty(), "effects after a fault: {out:?}");
            for effect in &out {
                match effect {
                    Effect::NodeAvailable { .. } => {
                        available += 1;
                        prop_assert!(now < deadline, "available after the deadline");
                        prop_assert!(!fatal_seen, "available after a fatal fact");
                        for r in &required {
                            prop_assert!(facts.contains(r), "available without {r}");
                        }
                    }
                    Effect::Faulted { fault, .. } => {
                        faulted += 1;
                        if let BootFault::Timeout { missing, .. } = fault {
                            prop_assert!(now >= deadline);
                            let expected: Vec<Resource> =
                                required.iter().copied().filter(|r| !facts.contains(r)).collect();
                            prop_assert_eq!(missing, &expected);
                        } else {
                            prop_assert!(is_fatal(input, policy), "fault without a fatal fact");
                        }
                    }
                    Effect::ProvisioningReady { .. } => {
                        provisioning += 1;
                        prop_assert!(available == 1, "provisioning before availability");
                        prop_assert!(!worker_failed, "provisioning after a worker failure");
                    }
                    Effect::WorkerUnavailable { .. } => {
                        unavailable += 1;
                        prop_assert!(available == 1 && worker_failed);
                    }
                }
            }
            prop_assert!(available + faulted <= 1, "two boot outcomes");
            prop_assert!(provisioning <= 1 && unavailable <= 1);
            prop_assert_eq!(m.may_accept_provisioning(), provisioning == 1 && unavailable == 0);
        }
        // Liveness within the script: every required fact in time and
        // nothing fatal means the node is available.
        if !fatal_seen && required.iter().all(|r| facts.contains(r)) {
            prop_assert!(m.is_available(), "all facts held, not available");
        }
    }

    #[test]
    fn same_inputs_same_transcript(policy in policy(), script in script()) {
        prop_assert_eq!(transcript(policy, &script), transcript(policy, &script));
    }
}
