//! How many node lifecycles (New -> Dormant -> Destroyed) the orchestrator
//! composite drives per second on one thread, effects included: every
//! effect is answered by a minimal in-memory world, and every answer goes
//! back through `handle_into`, and `next_deadline` is read after every step, as
//! every effect loop does. A plain timed loop; prints
//! `node lifecycles/s: N`. Run with `cargo xtask bench fsm`, which runs
//! `cargo run --release -p core-fsm --example lifecycle`: an example, so
//! that it is built as the release profile builds drover (`panic =
//! "abort"`; cargo builds `cargo bench` targets with unwinding whatever
//! the profile says).
//!
//! Measured on shared 2-core machines (noisy, and machines differ: the
//! same build read ~580k/s on one and ~400k/s on another; callgrind's
//! instruction counts are the repeatable figure), 1,000 nodes per
//! orchestrator:
//! - 171k/s (~62k instructions per lifecycle) with `String` ids and specs,
//!   leases and boot specs copied into every effect, tree-based routes,
//!   sessions and deadline index, and a fresh effect vector per step;
//! - ~575k/s (~22k instructions; ~400k/s on the slower machine) with
//!   `Text` ids (inline, no reference count), shared (`Arc`) specs, leases
//!   and commands, sessions by slot, routes in an id window, a tournament
//!   tree of deadlines, timer tables that allocate nothing, and
//!   `handle_into` with a reused buffer;
//! - ~650k/s on the slower machine (~16k instructions) with children
//!   emitting through a sink (`machine::Emit`: each effect routed as it is
//!   made, no collecting and re-wrapping; a session's observations noted
//!   on its node at once), deadlines in per-timeout queues, session op
//!   lists inline, a ring of routes, planned ids parsed to their slot,
//!   core-fsm in one codegen unit, rare paths (a reconcile pass, deferred
//!   child effects) out of line, and this world reading effects in place.
//!   Pools of 100 to 1,000 nodes give about the same rate (10: ~580k/s,
//!   building the composite weighs more; 10,000: ~380k/s, bound by the
//!   cache).
//! - ~870-905k/s on a third, faster machine (the previous build read
//!   ~855-895k/s there; ~16k instructions) with `Text` keeping its length
//!   plus one so that zero marks shared text (no tag byte: +3% to +5%),
//!   and this benchmark keeping glibc's heap between runs (`keep_heap`:
//!   without it the figure swung between ~625k/s and ~870k/s with
//!   unrelated allocation sizes);
//! - ~930-965k/s there with `Text`'s clone written out, its shared case
//!   out of line (+7% to +11%: the derived clone spilled the inline bytes
//!   in odd pieces that every effect holding an id then read back before
//!   they had left the store buffer). The VM's speed drifts by ~5% over an
//!   hour, so only interleaved runs compare.
//! - On a fourth, slower machine (a Zen 3 VM at ~2.6 GHz with busy
//!   neighbours: runs of one build read from ~340k/s to ~590k/s, and two
//!   builds run side by side on its two cores no steadier) the build above
//!   read run medians of 425k-490k/s and best 0.5 s windows up to ~571k/s
//!   over 32 interleaved rounds, and this one 446k-535k/s and up to
//!   ~627k/s (+5% to +10%), with the composite writing each effect where
//!   it is kept (`orchestrator/out.rs`: room is made before the effect is
//!   made, so the compiler no longer builds it on the stack and copies it
//!   in; a node's stage change went from ~7.8% of the samples to ~3.4%). The
//!   same ~16k instructions per lifecycle run there at ~3.5 per cycle, so
//!   the figure follows the clock: 1,000,000/s on that machine would need
//!   ~9k instructions per lifecycle.
//! - There, another +4% to +12% (run medians and best windows, 24 rounds
//!   in two sets) with the release profile's `panic = "abort"`, measured
//!   as this example: without landing pads no value has to be kept aside
//!   in case it must be dropped while unwinding, so more of them are built
//!   where they are kept (loads of 16 bytes from the stack ~5% of the
//!   samples -> ~2.4%). Best windows of ~700k/s, runs of ~550k-570k/s.
//! - On a fifth machine (a 2-core AMD EPYC Zen 4 VM at ~2.6 GHz, where the
//!   ~14.6k instructions per lifecycle ran at more than 3.5 per cycle, so
//!   that instruction counts mattered again), the build above read
//!   ~905-935k/s, and this one ~1.01-1.04M/s (interleaved, 5 rounds: run
//!   medians +9.9%, ~13.7k instructions). A node's and a session's step
//!   match the input where it lies, then the phase (`match (self.phase,
//!   input)` copied the input into the pair first, with loads that read
//!   back words still in the store buffer, before the jump on its kind:
//!   ~+5%); a session observes the stage it already knows instead of
//!   reading back the phase it has just stored (~+1%); its observations go
//!   to the node through `bootstrap::Sink::observed` without being made
//!   into an effect (~+1.5%); the composite is built from specs expanded
//!   in id order, so sorting them finds a one-group plan sorted, and
//!   planned ids are not checked again (~+1%); then a session's route
//!   names its slot only, halving the route ring's entries (+1-2%; ~13.6k
//!   instructions, `cargo xtask bench fsm` 1.011-1.038M/s over five
//!   runs). Tried there and no help: removing a session's duplicate
//!   timer cancel (neutral), inlining the answer paths into `handle_into`
//!   (-4%), deadline queues whose fronts are always live (more
//!   instructions, not fewer), a first-live scan that checks only the
//!   least front (-4%). `Rc` for `Arc` read +1.5%; removing the deadline
//!   index outright +6.6% (an upper bound for any cheaper index).
//!
//! Runs of one build differ by about 2%, windows within a run by ~1%:
//! compare builds interleaved, and again with functions aligned
//! (`RUSTFLAGS="-C llvm-args=-align-all-functions=6"`, and `=5`), each
//! build in its own target dir (cargo takes a copy of the tree at another
//! path for fresh and keeps the first one's binary), before believing a
//! change of a few percent. Measured that way, none of these helped:
//! deadlines as intrusive lists, sorting build positions instead of specs,
//! aligning the machines, boxing the log record or the join binding in
//! effects, a compact answer queue in this world, inlining the route
//! window's insert, dropping one `Arc` per node. On the slower machine,
//! also none of: fat or thin LTO and `-C target-cpu=native` (within 1-2%),
//! `opt-level = 2` (same) or `"s"` (-35%), a larger
//! `-x86-sfb-inspection-limit` (no change to the code), answering this
//! world's effects in rounds instead of through a queue (-6%), inlined fast
//! paths for the route window's insert and remove, making a node's and a
//! session's own effects after room is made too (the copies left are
//! spread thin), and removing the deadline index outright. Pools of 20 to
//! 3,000 nodes read the same there too.
//!
//! Where the time goes, from `perf record -e cpu-clock` on that machine
//! (instruction counts no longer predict it: removing the deadline index
//! outright, ~10% of the instructions, changed nothing): stalls, not
//! work. The `Arc` count changes (about 23 per lifecycle: the three group
//! specs each node holds, a session's boot spec and probe, each command,
//! the shape of a create, the lease in two effects) cost ~9% in all
//! (measured by building with `Rc`), though no single one is measurable;
//! effects were built on the stack and copied into the effect vector
//! whole, a copy that read back words still in the store buffer (fixed,
//! see above: loads of 16 bytes from the stack fell from ~11% of the
//! samples to ~5-6%, the rest spread over many sites); a node's input is
//! copied the same way as its step begins (~3%); this world's own queue
//! and drops ~13%; building and dropping the composite ~8%.

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
        orchestrator.handle_into(Instant(*now), input, &mut world.effects);
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
    });
    let mut now = 0;
    drive(&mut orchestrator, &mut now, Input::Start, world);
    assert!(
        orchestrator.is_settled() && orchestrator.nodes().all(|r| r.ready),
        "every node Dormant"
    );
    drive(&mut orchestrator, &mut now, Input::Teardown, world);
    assert!(orchestrator.is_torn_down(), "every lease destroyed");
    orchestrator.nodes().count() as u64
}

/// Keeps glibc's allocator from handing memory back to the system between
/// runs. Each run builds and drops a composite of about a megabyte; with
/// glibc's dynamic thresholds, whether that memory is trimmed (or mapped
/// afresh) every run depends on the sizes of unrelated allocations, and
/// when it is, every run pays for page faults: the same code read 625k or
/// 870k lifecycles/s depending only on that. A long-lived composite is
/// built once, so the figure is taken with the heap kept, as it is there.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn keep_heap() {
    // glibc's `mallopt` (malloc.h): parameter numbers and the largest
    // mapping threshold it accepts on 64-bit targets.
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    const MMAP_THRESHOLD_MAX: i32 = 32 << 20;
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    // SAFETY: `mallopt` only sets allocator parameters; it is called
    // first thing in `main`, before anything else allocates on another
    // thread (there is no other thread).
    let set = unsafe {
        mallopt(M_TRIM_THRESHOLD, i32::MAX) == 1
            && mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1
    };
    assert!(set, "mallopt took the parameters");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_heap() {}

// A benchmark measures wall time; this file is not part of the pure core.
#[allow(clippy::disallowed_methods)]
fn main() {
    keep_heap();
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
