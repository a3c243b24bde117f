//! Properties of the composite under random input sequences: no panic,
//! invariants after every step (the harness checks them), byte-identical
//! transcripts for identical inputs, and the journal rule: an intent is
//! persisted before its create, a nonce is created at most once, and only
//! leases the world granted are ever destroyed. Half the runs have a
//! pipeline host (membership): random heartbeats and lost connections then
//! reach it, and O11 is checked after every step.

mod orchestrator_harness;

use core_fsm::Machine as _;
use core_fsm::ids::{LeaseId, LogicalNodeId, OpId};
use core_fsm::plan::{ReplacementPolicy, RunPlan};
use core_fsm::port::{
    Effect, EndpointStatus, Input, JournalRecord, LeaseGranted, LogStream, ProviderErrorKind,
    SshErrorKind,
};
use core_fsm::time::Duration;
use orchestrator_harness::{Harness, endpoint, lease, provider_error, ssh_error};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// One abstract step: what to do, and two numbers that pick among choices.
type Step = (u8, u8, u16);

fn plan(bounded: bool) -> RunPlan {
    let mut plan = RunPlan::example_two_workers();
    if bounded {
        plan.replacement = ReplacementPolicy::Bounded {
            attempts_max: 3,
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(30),
            quarantine_after_failures: 2,
        };
    }
    plan
}

/// Turns abstract steps into inputs against what the composite asked for.
struct World {
    h: Harness,
    pending: Vec<Effect>,
    granted: BTreeSet<LeaseId>,
    /// `Transient` answers given to creates, by intent nonce.
    transient: std::collections::BTreeMap<core_fsm::ids::Nonce, u32>,
    contracts: u32,
}

/// The membership of watched runs: short bounds, so random time jumps
/// reach Suspect and Dead.
fn membership() -> core_fsm::membership::Config {
    core_fsm::membership::Config {
        suspect_after: Duration::from_secs(2),
        dead_after: Duration::from_secs(5),
        ..core_fsm::membership::Config::default()
    }
}

impl World {
    fn new(plan: RunPlan, watched: bool) -> World {
        let h = match watched {
            true => Harness::with_pipeline(plan, membership()),
            false => Harness::new(plan),
        };
        World {
            h,
            pending: Vec::new(),
            granted: BTreeSet::new(),
            transient: std::collections::BTreeMap::new(),
            contracts: 100,
        }
    }

    fn send(&mut self, dt: u64, input: Input) {
        let now = self.h.now.0 + dt;
        for effect in self.h.at(now, input) {
            if op_of(&effect).is_some() {
                self.pending.push(effect);
            }
        }
    }

    fn step(&mut self, (what, pick, n): Step) {
        let dt = u64::from(n % 2_000);
        match what % 16 {
            0 => self.send(dt, Input::Start),
            1 if pick.is_multiple_of(8) => self.send(dt, Input::Teardown),
            2 => {
                let node = LogicalNodeId::new(format!("workers-{}", pick % 3));
                self.send(dt, Input::Destroy { node });
            }
            3 => {
                let later = u64::from(n) * 100;
                self.send(later, Input::Tick);
            }
            4 => {
                if let Some(at) = self.h.orchestrator.next_deadline() {
                    let dt = at.0.saturating_sub(self.h.now.0);
                    self.send(dt, Input::Tick);
                }
            }
            5 => self.join(pick, dt),
            6 => self.garbage(pick, n, dt),
            7 => self.output(pick, dt),
            8 | 9 if self.h.orchestrator.pipeline().is_some() => {
                self.membership(what % 16 == 8, pick, dt)
            }
            _ => self.answer(pick, n, dt),
        }
    }

    fn take(&mut self, pick: u8) -> Option<Effect> {
        if self.pending.is_empty() {
            return None;
        }
        let i = usize::from(pick) % self.pending.len();
        Some(self.pending.remove(i))
    }

    fn answer(&mut self, pick: u8, n: u16, dt: u64) {
        let Some(effect) = self.take(pick) else {
            return;
        };
        let fail = n.is_multiple_of(5);
        let input = match effect {
            Effect::CreateLease { op, request } => {
                self.contracts += 1;
                let result = match (fail, n % 3) {
                    (true, 0) => Err(provider_error(ProviderErrorKind::Ambiguous, "lost")),
                    (true, 1) => {
                        *self.transient.entry(request.nonce).or_default() += 1;
                        Err(provider_error(ProviderErrorKind::Transient, "429"))
                    }
                    (true, _) => Err(provider_error(ProviderErrorKind::Rejected, "no offer")),
                    (false, k) => {
                        let lease = lease(self.contracts, request.nonce);
                        self.granted.insert(lease.lease_id.clone());
                        Ok(LeaseGranted {
                            lease,
                            endpoint: (k != 0).then(|| endpoint(self.contracts)),
                        })
                    }
                };
                Input::LeaseCreated { op, result }
            }
            Effect::LookupEndpoint { op, lease } => {
                let status = match n % 4 {
                    0 if fail => EndpointStatus::Gone,
                    0 | 1 => EndpointStatus::Pending {
                        detail: "loading".to_owned(),
                    },
                    _ => EndpointStatus::Ready(endpoint(lease.contract_id.parse().unwrap_or(1))),
                };
                Input::EndpointLooked {
                    op,
                    result: Ok(status),
                }
            }
            Effect::DestroyLease { op, .. } => {
                let result = if fail {
                    Err(provider_error(ProviderErrorKind::Transient, "503"))
                } else {
                    Ok(())
                };
                Input::LeaseDestroyed { op, result }
            }
            Effect::ListLeases { op, .. } => {
                let leases: Vec<_> = self
                    .h
                    .journal()
                    .into_iter()
                    .filter_map(|r| match r {
                        JournalRecord::LeaseIntent { nonce, .. } if n.is_multiple_of(2) => {
                            Some(lease(u32::from(n) + 5_000, nonce))
                        }
                        _ => None,
                    })
                    .collect();
                for l in &leases {
                    self.granted.insert(l.lease_id.clone());
                }
                let result = if fail {
                    Err(provider_error(ProviderErrorKind::Transient, "503"))
                } else {
                    Ok(leases)
                };
                Input::LeasesListed { op, result }
            }
            Effect::SshConnect { op, .. } => {
                let result = if fail {
                    Err(ssh_error(SshErrorKind::Refused, "refused"))
                } else {
                    Ok(())
                };
                Input::SshConnected { op, result }
            }
            Effect::SshExec { op, .. } => {
                let result = match n % 7 {
                    0 => Err(ssh_error(SshErrorKind::Reset, "reset")),
                    1 if fail => Ok(1),
                    _ => Ok(0),
                };
                Input::SshExited { op, result }
            }
            Effect::SshClose { op, .. } => Input::SshClosed { op },
            _ => return,
        };
        self.send(dt, input);
    }

    fn output(&mut self, pick: u8, dt: u64) {
        let execs: Vec<OpId> = self
            .pending
            .iter()
            .filter_map(|e| match e {
                Effect::SshExec { op, .. } => Some(*op),
                _ => None,
            })
            .collect();
        if let Some(op) = execs.get(usize::from(pick) % execs.len().max(1)) {
            let stream = if pick.is_multiple_of(2) {
                LogStream::Stdout
            } else {
                LogStream::Stderr
            };
            self.send(
                dt,
                Input::SshOutput {
                    op: *op,
                    stream,
                    line: format!("line {pick}"),
                },
            );
        }
    }

    fn join(&mut self, pick: u8, dt: u64) {
        let node = LogicalNodeId::new(format!("workers-{}", pick % 2));
        let lease_id = match self
            .h
            .orchestrator
            .node(&node)
            .and_then(|m| m.record().lease_id().cloned())
        {
            Some(lease) if !pick.is_multiple_of(5) => lease,
            _ => LeaseId::from("vastai:0"),
        };
        let agent = core_fsm::ids::AgentId::new(format!("agent-{pick}"));
        self.send(
            dt,
            Input::AgentJoined {
                node,
                lease_id,
                agent,
            },
        );
    }

    /// A heartbeat (or a lost connection) of a node's recorded agent, or of
    /// one the join steps may use.
    fn membership(&mut self, beat: bool, pick: u8, dt: u64) {
        let node = LogicalNodeId::new(format!("workers-{}", pick % 2));
        let recorded = (self.h.orchestrator.node(&node))
            .and_then(|m| m.record().agent.as_ref().map(|a| a.agent.clone()));
        let agent = match recorded {
            Some(agent) if !pick.is_multiple_of(4) => agent,
            _ => core_fsm::ids::AgentId::new(format!("agent-{pick}")),
        };
        let input = match beat {
            true => core_fsm::membership::Input::Heartbeat { node, agent },
            false => core_fsm::membership::Input::ConnectionLost { node, agent },
        };
        let input = core_fsm::pipeline::Input::Membership(input);
        self.send(dt, Input::Pipeline(Box::new(input)));
    }

    /// Answers with operation ids nobody issued, or issued long ago.
    fn garbage(&mut self, pick: u8, n: u16, dt: u64) {
        let op = OpId(u64::from(n % 64));
        let input = match pick % 6 {
            0 => Input::LeaseCreated {
                op,
                result: Ok(LeaseGranted {
                    lease: lease(9_000 + u32::from(n), core_fsm::ids::Nonce(u64::from(n))),
                    endpoint: None,
                }),
            },
            1 => Input::LeaseDestroyed { op, result: Ok(()) },
            2 => Input::SshExited { op, result: Ok(0) },
            3 => Input::SshClosed { op },
            4 => Input::EndpointLooked {
                op,
                result: Ok(EndpointStatus::Gone),
            },
            _ => Input::LeasesListed {
                op,
                result: Ok(vec![]),
            },
        };
        if let Input::LeaseCreated { result: Ok(g), .. } = &input {
            self.granted.insert(g.lease.lease_id.clone());
        }
        self.send(dt, input);
    }
}

fn op_of(effect: &Effect) -> Option<OpId> {
    match effect {
        Effect::CreateLease { op, .. }
        | Effect::LookupEndpoint { op, .. }
        | Effect::DestroyLease { op, .. }
        | Effect::ListLeases { op, .. }
        | Effect::SshConnect { op, .. }
        | Effect::SshExec { op, .. }
        | Effect::SshClose { op, .. } => Some(*op),
        _ => None,
    }
}

fn run(bounded: bool, watched: bool, steps: &[Step]) -> World {
    let mut world = World::new(plan(bounded), watched);
    for step in steps {
        world.step(*step);
    }
    world
}

fn check_journal_rule(world: &World) {
    let mut intents = BTreeSet::new();
    let mut created = std::collections::BTreeMap::new();
    for effect in &world.h.effects {
        match effect {
            Effect::Persist(JournalRecord::LeaseIntent { nonce, .. }) => {
                intents.insert(*nonce);
            }
            Effect::CreateLease { request, .. } => {
                assert!(
                    intents.contains(&request.nonce),
                    "O9: the intent is persisted before its create"
                );
                // A create answered `Transient` provably did nothing, so
                // its intent may be sent again; any other may not.
                let creates = created.entry(request.nonce).or_insert(0u32);
                *creates += 1;
                let transient = world.transient.get(&request.nonce).copied().unwrap_or(0);
                assert!(
                    *creates <= 1 + transient,
                    "O9: one create per intent, but for transient failures"
                );
            }
            Effect::DestroyLease { lease, .. } => {
                assert!(
                    world.granted.contains(&lease.lease_id),
                    "N3: only a lease the world granted is destroyed"
                );
            }
            _ => {}
        }
    }
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u16>()), 0..160)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn random_inputs_keep_every_invariant(bounded in any::<bool>(), watched in any::<bool>(), steps in steps()) {
        let world = run(bounded, watched, &steps);
        check_journal_rule(&world);
    }

    #[test]
    fn same_inputs_same_transcript(bounded in any::<bool>(), watched in any::<bool>(), steps in steps()) {
        let a = run(bounded, watched, &steps);
        let b = run(bounded, watched, &steps);
        prop_assert_eq!(a.h.transcript, b.h.transcript);
    }

    #[test]
    fn a_restart_at_any_point_keeps_every_invariant(steps in steps(), cut in any::<u16>(), more in steps()) {
        let plan = plan(false);
        let world = run(false, false, &steps[..usize::from(cut) % (steps.len() + 1)]);
        let journal = world.h.journal();
        let mut restored = World { h: Harness::restore(plan, &journal), pending: Vec::new(), granted: world.granted, transient: world.transient, contracts: 500 };
        restored.h.now = world.h.now;
        for step in &more {
            restored.step(*step);
        }
        check_journal_rule(&restored);
    }
}

/// The random runs above are only worth something if they reach the deep
/// stages: a fixed set of seeded runs must see every node stage and every
/// bootstrap failure stage at least once.
#[test]
fn random_runs_reach_every_stage() {
    use core_fsm::node::Lifecycle;
    let mut rng = core_fsm::rng::DetRng::new(2024);
    let mut seen = BTreeSet::new();
    let mut session_stages = BTreeSet::new();
    let mut dead_failed = 0u32;
    for case in 0..400u32 {
        let steps: Vec<Step> = (0..200)
            .map(|_| {
                (
                    rng.below(256) as u8,
                    rng.below(256) as u8,
                    rng.below(65_536) as u16,
                )
            })
            .collect();
        let world = run(case.is_multiple_of(2), case % 4 < 2, &steps);
        for effect in &world.h.effects {
            if let Effect::NodeChanged {
                stage,
                failed_reason,
                ..
            } = effect
            {
                seen.insert(*stage);
                if failed_reason.as_deref() == Some(core_fsm::orchestrator::DEAD_REASON) {
                    dead_failed += 1;
                }
            }
        }
        let mut destroying_step = false;
        for line in world.h.transcript.lines() {
            if line.starts_with("t=") {
                destroying_step = line.contains(" teardown") || line.contains(" destroy ");
            } else if destroying_step && line.contains("ssh-close") {
                session_stages.insert("Cancelled".to_owned());
            }
        }
        for line in world.h.transcript.lines().filter(|l| l.contains("ledger:")) {
            for word in line.split(' ').filter_map(|w| w.split_once('/')) {
                session_stages.insert(word.1.to_owned());
            }
        }
    }
    assert!(
        dead_failed > 0,
        "no watched run failed a node its membership held Dead"
    );
    use Lifecycle::*;
    for stage in [
        LeaseRequested,
        LeaseCreated,
        EndpointKnown,
        BootstrapRunning,
        AgentJoined,
        HandedOff,
        Dormant,
        Failed,
        Destroying,
        Destroyed,
    ] {
        assert!(
            seen.contains(&stage),
            "no random run reached {stage:?}; seen {seen:?}"
        );
    }
    for stage in [
        "SshConnecting",
        "SshReady",
        "BootChecking",
        "AgentStarting",
        "WaitingForJoin",
        "SshTimeout",
        "BootCheckFailed",
        "StreamError",
        "Cancelled",
    ] {
        assert!(
            session_stages.contains(stage),
            "no random run reached session stage {stage}; seen {session_stages:?}"
        );
    }
}
