//! The supervisor: builds the madsim world of one case, plays its timed
//! faults (the kit's actions, this tier's partitions and reboots), kills
//! and restarts nodes, moves the run through its phases (fault, heal,
//! teardown) and judges liveness, exactly as tier 1 does.

use crate::chaos::{Chaos, Link};
use crate::orch::SimClock;
use crate::state::{Control, ORCHESTRATOR_IP, PROVIDER_IP, Phase, World};
use conformance::case::Action;
use conformance::oracle::Observation;
use conformance::{RunOptions, RunOutcome, System};
use core_fsm::ids::OpId;
use core_fsm::port::{EndpointStatus, Input, ProviderError, ProviderErrorKind};
use core_fsm::time::Instant;
use driver::Clock as _;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Something the supervisor does at a time.
#[derive(Clone, Debug)]
enum Event {
    Act(Action),
    Restart,
    PartitionStart(Link),
    PartitionEnd(Link),
    Reboot { machine: u32, down_ms: u64 },
    MachineUp(u32),
    MachineDown(u32),
    Heal,
    Deadline(Phase),
}

/// One simulated machine's node.
struct MachineNode {
    id: NodeId,
    /// Killed for good (destroyed, exited).
    gone: bool,
    /// Down for a reboot.
    rebooting: bool,
}

struct Supervisor {
    world: Arc<World>,
    handle: Handle,
    clock: SimClock,
    orch: NodeId,
    provider: NodeId,
    machines: BTreeMap<u32, MachineNode>,
    clogged: BTreeMap<Link, u32>,
    queue: BTreeMap<(u64, u64), Event>,
    seq: u64,
    unknown_answers: u64,
}

/// Runs `case` in a fresh madsim runtime on the current thread and returns
/// what the world saw. Call it on a thread of its own (madsim keeps its
/// context in thread locals).
pub fn run_case<S: System + 'static>(
    case: &conformance::Case,
    chaos: Chaos,
    options: RunOptions,
) -> RunOutcome {
    let mut config = madsim::Config::default();
    config.net.packet_loss_rate = f64::from(chaos.loss_per_mille) / 1000.0;
    config.net.send_latency =
        Duration::from_millis(chaos.hop_ms.0)..Duration::from_millis(chaos.hop_ms.1 + 1);
    let world = Arc::new(World::new(case, chaos, options.transcript));
    let runtime = madsim::runtime::Runtime::with_seed_and_config(case.seed, config);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(supervise::<S>(Arc::clone(&world)))
    }));
    drop(runtime);
    let mut w = world.lock();
    if let Err(panic) = run {
        let message = format!(
            "the world panicked: {}",
            conformance::backend::panic_text(&*panic)
        );
        let now = Instant(w.now_ms);
        w.violate(now, "M1", message);
    }
    let mut coverage = w.coverage.clone();
    coverage.faults.extend(
        w.chaos
            .names()
            .into_iter()
            .filter(|n| w.coverage.faults.contains(n)),
    );
    let mut stats = w.stats.clone();
    stats.end_ms = w.now_ms;
    stats.steps = w.step;
    stats.leases_created = w.provider.created_count();
    stats.nodes_ready = w.ready_count;
    stats.nodes_failed = w.failed_count;
    RunOutcome {
        violation: w.violation.clone(),
        digest: w.digest,
        step_digests: std::mem::take(&mut w.step_digests),
        coverage,
        transcript: w.transcript.take().unwrap_or_default(),
        stats,
    }
}

async fn supervise<S: System + 'static>(world: Arc<World>) {
    let handle = Handle::current();
    let clock = SimClock {
        epoch: madsim::time::Instant::now(),
    };
    let (control_tx, control_rx) = unbounded_channel();
    *world.control.lock().unwrap_or_else(|p| p.into_inner()) = Some(control_tx);
    let for_orch = Arc::clone(&world);
    let orch = handle
        .create_node()
        .name("orchestrator")
        .ip(ORCHESTRATOR_IP)
        .init(move || crate::orch::incarnation::<S>(Arc::clone(&for_orch), clock))
        .build();
    let for_provider = Arc::clone(&world);
    let provider = handle
        .create_node()
        .name("provider")
        .ip(PROVIDER_IP)
        .init(move || crate::provider::serve(Arc::clone(&for_provider), clock))
        .build();
    let mut sup = Supervisor {
        world,
        handle,
        clock,
        orch: orch.id(),
        provider: provider.id(),
        machines: BTreeMap::new(),
        clogged: BTreeMap::new(),
        queue: BTreeMap::new(),
        seq: 0,
        unknown_answers: 0,
    };
    sup.schedule_case();
    sup.run(control_rx).await;
}

impl Supervisor {
    fn schedule(&mut self, at_ms: u64, event: Event) {
        self.seq += 1;
        self.queue.insert((at_ms, self.seq), event);
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn schedule_case(&mut self) {
        let (timed, chaos, heal_at) = {
            let mut w = self.world.lock();
            let chaos = w.chaos.clone();
            w.note(Instant::ZERO, || format!("world: chaos {chaos:?}"));
            (
                w.faults.timed.clone(),
                w.chaos.clone(),
                w.case.profile.heal_at_ms,
            )
        };
        for (at, action) in timed {
            if at < heal_at {
                self.schedule(at, Event::Act(action));
            }
        }
        for p in &chaos.partitions {
            self.schedule(p.from_ms, Event::PartitionStart(p.link));
            self.schedule(p.until_ms, Event::PartitionEnd(p.link));
        }
        for r in &chaos.reboots {
            let (machine, down_ms) = (r.machine, r.down_ms);
            self.schedule(r.at_ms, Event::Reboot { machine, down_ms });
        }
        self.schedule(heal_at, Event::Heal);
    }

    async fn run(&mut self, mut control: UnboundedReceiver<Control>) {
        loop {
            self.advance_phase();
            if self.world.lock().phase == Phase::Done {
                return;
            }
            let Some((&(at_ms, _), _)) = self.queue.first_key_value() else {
                unreachable!("the heal or a phase deadline is always scheduled");
            };
            let sleep = madsim::time::sleep_until(self.clock.at(Instant(at_ms)));
            tokio::select! {
                biased;
                Some(c) = control.recv() => self.control(c),
                () = self.world.wake.notified() => {}
                () = sleep => {
                    if let Some((_, event)) = self.queue.pop_first() {
                        self.event(event);
                    }
                }
            }
        }
    }

    fn control(&mut self, control: Control) {
        match control {
            Control::Kill {
                why,
                restart_after_ms,
            } => self.crash(why, restart_after_ms),
            Control::Created { ordinal } => self.boot_machine(ordinal),
            Control::Destroyed { ordinal } => self.kill_machine(ordinal, true),
        }
    }

    fn event(&mut self, event: Event) {
        let now = self.now().as_millis();
        match event {
            Event::Act(action) => self.act(action),
            Event::Restart => self.handle.restart(self.orch),
            // Faults stop at the heal, whatever was still scheduled.
            Event::PartitionStart(link) if self.world.lock().faulty() => self.clog(link, true),
            Event::PartitionStart(_) => {}
            Event::PartitionEnd(link) if self.clogged.contains_key(&link) => self.clog(link, false),
            Event::PartitionEnd(_) => {}
            Event::Reboot { machine, down_ms } => {
                let live = self
                    .machines
                    .get(&machine)
                    .is_some_and(|m| !m.gone && !m.rebooting);
                if live && self.world.lock().faulty() {
                    let mut w = self.world.lock();
                    w.injected("machine-reboot");
                    w.note(self.now(), || format!("machine-{machine}: rebooting"));
                    drop(w);
                    self.kill_machine(machine, false);
                    if let Some(m) = self.machines.get_mut(&machine) {
                        m.rebooting = true;
                    }
                    self.schedule(now + down_ms, Event::MachineUp(machine));
                }
            }
            Event::MachineUp(machine) => {
                if let Some(m) = self.machines.get_mut(&machine).filter(|m| !m.gone) {
                    m.rebooting = false;
                    self.handle.restart(m.id);
                }
            }
            Event::MachineDown(machine) => self.kill_machine(machine, true),
            Event::Heal => self.heal(),
            Event::Deadline(phase) => self.out_of_time(phase),
        }
    }

    fn act(&mut self, action: Action) {
        let now = self.now();
        match action {
            Action::Crash { restart_after_ms } => {
                let up = {
                    let mut w = self.world.lock();
                    let up = w.faulty() && w.orch_up && !w.dying;
                    w.dying |= up;
                    up
                };
                if up {
                    self.crash("crash", restart_after_ms);
                }
            }
            Action::Storm { ms } => {
                let mut w = self.world.lock();
                w.injected("storm-429");
                w.storm_until = w
                    .storm_until
                    .max(now + core_fsm::time::Duration::from_millis(ms));
            }
            Action::Teardown => {
                let mut w = self.world.lock();
                w.injected("early-teardown");
                w.teardown_wanted = true;
                drop(w);
                self.world.input(Input::Teardown);
            }
            Action::Destroy { node } => {
                let ids = sim::plan::node_ids(&self.world.lock().case.profile);
                if !ids.is_empty() {
                    let node = ids[node as usize % ids.len()].clone();
                    if self.world.input(Input::Destroy { node }) {
                        self.world.lock().injected("operator-destroy");
                    }
                }
            }
            Action::Scale { group, count } => {
                let plan = sim::plan::run_plan(&self.world.lock().case.profile);
                if let Some(input) = sim::plan::scale(&plan, group, count)
                    && self.world.input(input)
                {
                    self.world.lock().injected("operator-scale");
                }
            }
            Action::UnknownAnswer => {
                self.unknown_answers += 1;
                let op = OpId(9_000_000 + self.unknown_answers);
                if self.world.input(unknown_answer(op, self.unknown_answers)) {
                    self.world.lock().injected("unknown-answer");
                }
            }
        }
    }

    /// Kills the orchestrator: its unsynced write and its connections die
    /// with it; it restarts from its journal after `restart_after_ms`.
    fn crash(&mut self, why: &'static str, restart_after_ms: u64) {
        let now = self.now();
        self.handle.kill(self.orch);
        *self.world.inbox.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let mut w = self.world.lock();
        w.injected(why);
        w.orch_up = false;
        w.journal.pending = None;
        for session in std::mem::take(&mut w.open_sessions).into_keys() {
            w.observe(now, Observation::ConnectionClosed(session));
        }
        w.observe(now, Observation::Crashed);
        w.op_node.clear();
        w.session_node.clear();
        w.stats.restarts += 1;
        w.settle.settled = false;
        w.settle.nodes_settled = false;
        w.event(now, &format!("killed ({why})"));
        drop(w);
        self.schedule(now.as_millis() + restart_after_ms, Event::Restart);
    }
}

/// An answer to an operation nobody asked for (as tier 1 makes them).
fn unknown_answer(op: OpId, n: u64) -> Input {
    let transient = ProviderError {
        kind: ProviderErrorKind::Transient,
        message: "unknown".to_owned(),
    };
    match n % 6 {
        0 => Input::LeaseDestroyed { op, result: Ok(()) },
        1 => Input::SshExited { op, result: Ok(0) },
        2 => Input::LeaseCreated {
            op,
            result: Err(transient),
        },
        3 => Input::EndpointLooked {
            op,
            result: Ok(EndpointStatus::Gone),
        },
        4 => Input::SshClosed { op },
        _ => Input::SshConnected { op, result: Ok(()) },
    }
}

mod network;
mod phases;
