//! How many node lifecycles (New -> Dormant -> Destroyed) the orchestrator
//! composite drives per second on one thread, effects included: every
//! effect is answered at once by a minimal in-memory world, and
//! `next_deadline` is read after every step, as every effect loop does.
//! Prints `node lifecycles/s: N`. Run with `cargo xtask bench fsm` (an
//! example, so that it is built as the release profile builds drover).

use core_fsm::Machine;
use core_fsm::ids::{AgentId, LeaseId};
use core_fsm::orchestrator::{Config, Orchestrator};
use core_fsm::plan::RunPlan;
use core_fsm::port::{CommandPurpose, Effect, Input, LeaseFacts, LeaseGranted, SshEndpoint};
use core_fsm::time::Instant;
use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::sync::Arc;

/// Nodes per orchestrator: one run plan with one group this large.
const NODES: u32 = 1_000;
/// How long to measure, in milliseconds of wall time.
const MEASURE_MS: u128 = 3_000;
/// Windows the measuring time is cut into, each rated on its own.
const WINDOWS: u128 = 6;

/// The world's side: a queue of answers, and what it answers with, made
/// once (op ids restart with each orchestrator, so lease ids repeat).
struct World {
    queue: VecDeque<Input>,
    effects: Vec<Effect>,
    lease_ids: Vec<LeaseId>,
    agent: AgentId,
    endpoint: SshEndpoint,
}

impl World {
    fn new() -> World {
        World {
            queue: VecDeque::new(),
            effects: Vec::new(),
            lease_ids: Vec::new(),
            agent: AgentId::from("agent"),
            endpoint: SshEndpoint {
                host: "127.0.0.1".into(),
                port: 22,
                user: "root".into(),
            },
        }
    }
}

/// The lease id for the create of `op`: `bench:{op}`.
fn lease_id(lease_ids: &mut Vec<LeaseId>, op: u64) -> LeaseId {
    let at = op as usize;
    while lease_ids.len() <= at {
        let n = lease_ids.len();
        lease_ids.push(LeaseId::new(format!("bench:{n}")));
    }
    lease_ids[at].clone()
}

/// Answers every effect that starts I/O at once, successfully; then drops
/// the effects (read in place: an effect is not moved to be answered).
fn answer(world: &mut World) {
    let World {
        queue,
        effects,
        lease_ids,
        agent,
        endpoint,
    } = world;
    for effect in effects.iter() {
        match effect {
            Effect::CreateLease { op, request } => {
                let lease = LeaseFacts {
                    provider: request.provider,
                    lease_id: lease_id(lease_ids, op.0),
                    contract_id: String::new(),
                    offer_id: None,
                    host_id: None,
                    nonce: request.nonce,
                    metadata: BTreeMap::new(),
                };
                queue.push_back(Input::LeaseCreated {
                    op: *op,
                    result: Ok(LeaseGranted {
                        lease: Arc::new(lease),
                        endpoint: Some(endpoint.clone()),
                    }),
                });
            }
            Effect::SshConnect { op, .. } => queue.push_back(Input::SshConnected {
                op: *op,
                result: Ok(()),
            }),
            Effect::SshExec {
                op,
                purpose: CommandPurpose::Start,
                join: Some(binding),
                ..
            } => {
                queue.push_back(Input::SshExited {
                    op: *op,
                    result: Ok(0),
                });
                queue.push_back(Input::AgentJoined {
                    node: binding.node.clone(),
                    lease_id: binding.lease_id.clone(),
                    agent: agent.clone(),
                });
            }
            Effect::SshExec { op, .. } => queue.push_back(Input::SshExited {
                op: *op,
                result: Ok(0),
            }),
            Effect::SshClose { op, .. } => queue.push_back(Input::SshClosed { op: *op }),
            Effect::DestroyLease { op, .. } => queue.push_back(Input::LeaseDestroyed {
                op: *op,
                result: Ok(()),
            }),
            other => {
                black_box(other);
            }
        }
    }
    effects.clear();
}

/// Drives `input` and everything it causes until the world is quiet.
fn drive(orchestrator: &mut Orchestrator, now: &mut u64, input: Input, world: &mut World) {
    world.queue.push_back(input);
    while let Some(input) = world.queue.pop_front() {
        *now += 1;
        world.effects = orchestrator.handle(Instant(*now), input);
        // Every effect loop reads the next deadline after each step.
        black_box(orchestrator.next_deadline());
        answer(world);
    }
}

/// One orchestrator's full run: returns the lifecycles completed.
fn run(plan: &RunPlan, seed: u64, world: &mut World) -> u64 {
    let mut orchestrator = Orchestrator::new(Config {
        plan: plan.clone(),
        seed,
        membership: None,
    });
    let mut now = 0;
    drive(&mut orchestrator, &mut now, Input::Start, world);
    assert!(
        orchestrator.is_settled() && orchestrator.nodes().all(|m| m.is_ready()),
        "every node Dormant"
    );
    drive(&mut orchestrator, &mut now, Input::Teardown, world);
    assert!(orchestrator.is_torn_down(), "every lease destroyed");
    orchestrator.nodes().count() as u64
}

// A benchmark measures wall time; this file is not part of the pure core.
#[allow(clippy::disallowed_methods)]
fn main() {
    let mut plan = RunPlan::example_two_workers();
    plan.groups[0].count = NODES;
    let mut world = World::new();
    // Warm up allocator and caches.
    run(&plan, 0, &mut world);
    // The rate over the whole time, and over each of its windows: their
    // spread says how far a single figure can be trusted.
    let started = std::time::Instant::now();
    let (mut lifecycles, mut seed) = (0u64, 1);
    let mut rates = Vec::with_capacity(WINDOWS as usize);
    for window in 1..=WINDOWS {
        let (at, before) = (started.elapsed().as_secs_f64(), lifecycles);
        while started.elapsed().as_millis() < MEASURE_MS * window / WINDOWS {
            lifecycles += run(&plan, seed, &mut world);
            seed += 1;
        }
        let seconds = started.elapsed().as_secs_f64() - at;
        rates.push((lifecycles - before) as f64 / seconds);
    }
    let seconds = started.elapsed().as_secs_f64();
    rates.sort_by(f64::total_cmp);
    let (low, high) = (rates[0], rates[rates.len() - 1]);
    println!("node lifecycles/s: {:.0}", lifecycles as f64 / seconds);
    println!(
        "({lifecycles} lifecycles in {seconds:.2}s, {NODES} nodes per run, single thread; \
         {WINDOWS} windows from {low:.0} to {high:.0}/s)"
    );
}
