//! Agent properties over random inputs: determinism, every invariant after
//! every step (boot's, each stage controller's and the agent's own), one
//! worker per life, and readiness never reported before boot allows it.

use core_fsm::Machine as _;
use core_fsm::agent::{Config, Effect, Input, Machine, Report};
use core_fsm::boot;
use core_fsm::ids::{AgentId, LogicalNodeId, OpId, RunId};
use core_fsm::stage::{self, Edge, EdgeKind, LayerRange, Provision};
use core_fsm::time::{Duration, Instant};
use proptest::prelude::*;

fn config(deferred: bool) -> Config {
    Config {
        boot: boot::Config {
            node: LogicalNodeId::from("workers-1"),
            worker_start: if deferred {
                boot::WorkerStartPolicy::Deferred
            } else {
                boot::WorkerStartPolicy::Required
            },
            boot_timeout: Duration::from_secs(30),
        },
        run_id: RunId(7),
        agent: AgentId::from("agent-1"),
        orchestrator: AgentId::from("orch"),
        stage: 1,
        stages_max: 2,
        ready_resend_interval: Duration::from_millis(1_000),
        ready_reports_max: 3,
        heartbeat_interval: Duration::from_millis(2_000),
        stop_step_timeout: Duration::from_millis(500),
        stage_ring: 0,
    }
}

fn provision(stage: u32, from: &str) -> Input {
    Input::Provision {
        from: AgentId::from(from),
        provision: Provision {
            run_id: RunId(7),
            orchestrator: AgentId::from(from),
            node: LogicalNodeId::from("workers-1"),
            stage,
            stage_count: 3,
            layers: LayerRange {
                start: 0,
                end_exclusive: 3,
            },
            inbound: Edge {
                id: stage,
                kind: EdgeKind::Activation,
            },
            outbound: Edge {
                id: stage + 1,
                kind: EdgeKind::Activation,
            },
            model_id: "m".into(),
        },
    }
}

fn input() -> impl Strategy<Value = Input> {
    let boot_fact = prop_oneof![
        Just(boot::Input::TransportReady),
        Just(boot::Input::IdentityAssigned {
            node: LogicalNodeId::from("workers-1")
        }),
        Just(boot::Input::ArenaCreated),
        Just(boot::Input::Membership(boot::Membership::Joined)),
        Just(boot::Input::CanAcceptProvisioning),
        Just(boot::Input::WorkerReady),
    ];
    let stage_fact = prop_oneof![
        Just(stage::Input::WorkerReady),
        Just(stage::Input::WeightsReady),
        Just(stage::Input::InboundReady),
        Just(stage::Input::OutboundReady),
        (0u64..3).prop_map(|seq| stage::Input::StepArrived { seq }),
        (0u64..3).prop_map(|seq| stage::Input::StepCompleted { seq }),
        Just(stage::Input::LocalEdgesStopped),
        Just(stage::Input::RingsQuiesced),
        Just(stage::Input::DeviceObjectsReleased),
        Just(stage::Input::WorkerRoleReset),
    ];
    prop_oneof![
        2 => Just(Input::Start),
        1 => Just(Input::Tick),
        8 => boot_fact.prop_map(Input::Boot),
        2 => (1u64..3).prop_map(|op| Input::WorkerSpawned { op: OpId(op), result: Ok(()) }),
        1 => Just(Input::WorkerSpawned { op: OpId(1), result: Err("x".into()) }),
        3 => (1u64..3).prop_map(|op| Input::WorkerReady { op: OpId(op) }),
        1 => Just(Input::WorkerExited { op: OpId(1), reason: "crash".into() }),
        2 => (1u64..4).prop_map(|id| Input::ReadyAck { from: AgentId::from("orch"), run_id: RunId(7), readiness_id: id }),
        3 => (0u32..3).prop_map(|s| provision(s, "orch")),
        1 => Just(provision(1, "mallory")),
        6 => (0u32..3, stage_fact).prop_map(|(stage, input)| Input::Stage { stage, input }),
        1 => (0u32..3).prop_map(|stage| Input::StopStage { from: AgentId::from("orch"), run_id: RunId(7), stage }),
    ]
}

fn run(deferred: bool, steps: &[(u64, Input)]) -> Vec<Vec<Effect>> {
    run_seen(deferred, steps)
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

/// Each step's effects, with whether the worker was gone before it.
fn run_seen(deferred: bool, steps: &[(u64, Input)]) -> Vec<(bool, Vec<Effect>)> {
    let mut m = Machine::new(config(deferred), Instant(0));
    let mut now = 0;
    let mut log = Vec::new();
    for (dt, input) in steps {
        now += dt;
        let gone = matches!(m.phase(), core_fsm::agent::Phase::Gone { .. });
        log.push((gone, m.handle(Instant(now), input.clone())));
        m.check_invariants();
    }
    log
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn deterministic_bounded_and_never_ready_early(
        deferred in any::<bool>(),
        steps in prop::collection::vec((0u64..1_500, input()), 0..80),
    ) {
        let a = run(deferred, &steps);
        let b = run(deferred, &steps);
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let effects: Vec<&Effect> = a.iter().flatten().collect();
        // A worker is asked for at the start, and again only when a
        // provision finds the last one gone (a repair's respawn, AG1).
        let spawn = |e: &Vec<Effect>| e.iter().filter(|e| matches!(e, Effect::SpawnWorker { .. })).count();
        for (i, (gone, effects)) in run_seen(deferred, &steps).iter().enumerate() {
            let n = spawn(effects);
            match &steps[i].1 {
                Input::Start => prop_assert!(n <= 1),
                Input::Provision { .. } => prop_assert!(n == 0 || (*gone && n == 1), "step {i}: respawn while the worker was not gone"),
                _ => prop_assert_eq!(n, 0, "step {}: a worker spawned", i),
            }
        }
        let starts = a.iter().zip(&steps).filter(|(e, (_, i))| matches!(i, Input::Start) && spawn(e) > 0).count();
        prop_assert!(starts <= 1, "Start spawned {starts} workers");
        let ready_at = effects.iter().position(|e| matches!(e, Effect::Report(Report::RuntimeReady { .. })));
        let allowed_at = effects.iter().position(|e| matches!(e, Effect::Boot(boot::Effect::ProvisioningReady { .. })));
        if let Some(ready) = ready_at {
            prop_assert!(allowed_at.is_some_and(|allowed| allowed < ready), "ready reported before boot allowed it");
        }
        let reports = effects.iter().filter(|e| matches!(e, Effect::Report(Report::RuntimeReady { .. }))).count();
        prop_assert!(reports <= 3, "{reports} readiness reports");
    }
}
