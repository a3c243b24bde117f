//! The run world's supervisor: builds the madsim world of one case (the
//! orchestrator's node, then a node per agent each start command starts),
//! plays its timed events (clients' submits, partitions, the heal), kills
//! the nodes the world asks it to, starts the agents and the restarted
//! orchestrator, and judges the end exactly as tier 1 does. No node is
//! replaced here: the composite replaces a failed one (`Bounded`) through
//! its provisioning effects.

use super::shared::{Control, ORCHESTRATOR_IP, Shared, agent_ip};
use crate::orch::SimClock;
use core_fsm::ids::LeaseId;
use core_fsm::pipeline;
use core_fsm::rng::DetRng;
use core_fsm::run::{self, RequestId};
use core_fsm::time::Instant;
use driver::Clock as _;
use madsim::net::NetSim;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use sim::run_world::model;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc::unbounded_channel;

/// How long the world runs on after the run ended, for stop facts to land.
const DRAIN_MS: u64 = 30_000;
/// How long after the fault phase the run may take to end.
const LIVENESS_MS: u64 = 40_000;
/// How long a crashed orchestrator stays down.
const RESTART_MS: u64 = 1_000;
/// The longest partition. madsim retransmits a message on a clogged link
/// after 1, 3, 7, .. 2047, 4095 ms, so one longer than 2047 ms can hold a
/// heartbeat past membership's `dead_after`: a partition alone never
/// makes a node Dead (or a request time out).
const PARTITION_MAX_MS: u64 = 2_000;
/// The least time between two partitions.
const PARTITION_GAP_MS: u64 = 5_000;

#[derive(Clone, Debug)]
enum Event {
    Submit { inc: u32, index: u32 },
    RestartOrchestrator,
    Clog(u32),
    Unclog(u32),
    Heal,
}

struct Supervisor {
    shared: Arc<Shared>,
    handle: Handle,
    clock: SimClock,
    orch: NodeId,
    nodes: BTreeMap<u32, NodeId>,
    clogged: BTreeMap<u32, NodeId>,
    queue: BTreeMap<(u64, u64), Event>,
    seq: u64,
}

/// Runs the world of the shared state's case to its end.
pub(super) async fn supervise(shared: Arc<Shared>) {
    let handle = Handle::current();
    let clock = SimClock {
        epoch: madsim::time::Instant::now(),
    };
    let (control_tx, mut control) = unbounded_channel();
    shared.lock().control = Some(control_tx);
    let for_orch = Arc::clone(&shared);
    let orch = handle
        .create_node()
        .name("orchestrator")
        .ip(ORCHESTRATOR_IP)
        .init(move || super::host::incarnation(Arc::clone(&for_orch), clock))
        .build();
    let mut sup = Supervisor {
        shared,
        handle,
        clock,
        orch: orch.id(),
        nodes: BTreeMap::new(),
        clogged: BTreeMap::new(),
        queue: BTreeMap::new(),
        seq: 0,
    };
    sup.schedule_case();
    loop {
        if let Some(end) = sup.verdict_due() {
            if end {
                sup.final_checks();
            }
            return;
        }
        let next = sup.queue.keys().next().map(|(at, _)| *at);
        let wake = next.unwrap_or(u64::MAX).min(sup.deadline());
        let sleep = madsim::time::sleep_until(clock.at(Instant(wake)));
        tokio::select! {
            biased;
            Some(c) = control.recv() => sup.control(c),
            () = sup.shared.wake.notified() => {}
            () = sleep => {
                if next.is_some_and(|at| at <= sup.clock.now().as_millis())
                    && let Some((_, event)) = sup.queue.pop_first()
                {
                    sup.event(event);
                }
            }
        }
    }
}

impl Supervisor {
    fn schedule(&mut self, at_ms: u64, event: Event) {
        self.seq += 1;
        self.queue.insert((at_ms, self.seq), event);
    }

    fn now_ms(&self) -> u64 {
        self.clock.now().as_millis()
    }

    /// The heal, and this tier's partitions: a stage's node cut off from
    /// everything for a while, drawn from the case's seed.
    fn schedule_case(&mut self) {
        let (seed, heal_at, stages) = {
            let w = self.shared.lock();
            let p = &w.case.profile;
            (w.case.seed, p.heal_at_ms, p.stages.max(1))
        };
        let mut rng = DetRng::new(seed).derive(0x7061_7274);
        if rng.ratio(1, 2) {
            // One after another, apart: a message's retransmission backoff
            // restarts with each, so overlapping ones would add up.
            let mut at = rng.below(heal_at / 4);
            for _ in 0..rng.between(1, 3) {
                let stage = rng.below(u64::from(stages)) as u32;
                let ms = rng.between(300, PARTITION_MAX_MS);
                self.schedule(at, Event::Clog(stage));
                self.schedule(at + ms, Event::Unclog(stage));
                at += ms + rng.between(PARTITION_GAP_MS, heal_at / 4);
            }
        }
        self.schedule(heal_at, Event::Heal);
    }

    /// Some(true) when the run is over and drained (judge it), Some(false)
    /// when a violation ended it; None while it goes on.
    fn verdict_due(&mut self) -> Option<bool> {
        let now = self.now_ms();
        let mut w = self.shared.lock();
        if w.violation.is_some() {
            return Some(false);
        }
        if let Some(ended) = w.ended_at
            && now >= ended + DRAIN_MS
        {
            return Some(true);
        }
        let limit = w.case.profile.heal_at_ms + LIVENESS_MS;
        if w.ended_at.is_none() && now > limit {
            w.now_ms = now;
            let what = format!("the run is not over {LIVENESS_MS} ms after the fault phase");
            w.violate("RW8", what);
            return Some(false);
        }
        None
    }

    fn deadline(&self) -> u64 {
        let w = self.shared.lock();
        match w.ended_at {
            Some(ended) => ended + DRAIN_MS,
            None => w.case.profile.heal_at_ms + LIVENESS_MS + 1,
        }
    }

    /// Starts stage `stage`'s agent on `lease`: a new generation on a new
    /// node (a live one of the stage is killed first).
    fn boot(&mut self, stage: u32, lease: LeaseId) {
        let now = self.now_ms();
        let generation = {
            let w = self.shared.lock();
            let slot = &w.slots[stage as usize];
            slot.alive.then_some(slot.generation)
        };
        if let Some(generation) = generation {
            self.control(Control::Kill { stage, generation });
        }
        let generation = {
            let mut w = self.shared.lock();
            let slot = &mut w.slots[stage as usize];
            slot.generation = slot.starts;
            slot.starts += 1;
            slot.incarnation = 0;
            slot.alive = true;
            slot.agent = None;
            slot.stage_steps = 0;
            slot.lease = Some(lease.clone());
            let generation = slot.generation;
            let line = format!("world: stage {stage}'s agent {generation} starts on {lease}");
            w.note(now, &line);
            generation
        };
        let (shared, clock) = (Arc::clone(&self.shared), self.clock);
        let node = self
            .handle
            .create_node()
            .name(format!("stage-{stage}.{generation}"))
            .ip(agent_ip(stage, generation))
            .init(move || {
                super::agent::serve(Arc::clone(&shared), clock, stage, generation, lease.clone())
            })
            .build();
        self.nodes.insert(stage, node.id());
    }

    fn control(&mut self, control: Control) {
        let now = self.now_ms();
        match control {
            Control::Kill { stage, generation } => {
                {
                    let mut w = self.shared.lock();
                    let slot = &mut w.slots[stage as usize];
                    if !slot.alive || slot.generation != generation {
                        return;
                    }
                    slot.alive = false;
                    slot.agent = None;
                    w.note(
                        now,
                        &format!("world: stage {stage}'s node {generation} is killed"),
                    );
                }
                if let Some(id) = self.nodes.get(&stage) {
                    self.handle.kill(*id);
                }
            }
            Control::Boot { stage, lease } => self.boot(stage, lease),
            Control::CrashOrchestrator => {
                self.handle.kill(self.orch);
                let mut w = self.shared.lock();
                w.inbox = None;
                w.host = None;
                w.note(now, "world: the orchestrator is killed");
                drop(w);
                self.schedule(now + RESTART_MS, Event::RestartOrchestrator);
            }
            Control::Serving { inc } => {
                let w = self.shared.lock();
                let p = &w.case.profile;
                let (from, to, gap, latency) =
                    (w.submitted, p.requests, p.submit_gap_ms, p.latency_ms);
                drop(w);
                for index in from..to {
                    let at = now + 2 + latency + u64::from(index) * gap;
                    self.schedule(at, Event::Submit { inc, index });
                }
            }
        }
    }

    fn event(&mut self, event: Event) {
        let now = self.now_ms();
        match event {
            Event::Submit { inc, index } => {
                let mut w = self.shared.lock();
                if inc != w.inc || w.inbox.is_none() || index < w.submitted {
                    return;
                }
                let p = &w.case.profile;
                let (prompt, max_tokens) = model::request(
                    p.prompt_seed,
                    index,
                    p.prompt_max,
                    p.max_tokens_max,
                    p.context,
                );
                w.submitted = index + 1;
                let request = RequestId(u64::from(index) + 1);
                w.oracle
                    .submitted(request, prompt.clone(), max_tokens, None);
                w.to_host(pipeline::Input::Run(run::Input::Submit {
                    request,
                    prompt,
                    max_tokens,
                }));
            }
            Event::RestartOrchestrator => self.handle.restart(self.orch),
            Event::Clog(stage) => {
                let mut w = self.shared.lock();
                if w.healed || self.clogged.contains_key(&stage) {
                    return;
                }
                w.oracle.injected.insert("partition");
                w.note(now, &format!("world: stage {stage}'s node is cut off"));
                drop(w);
                if let Some(id) = self.nodes.get(&stage).copied() {
                    NetSim::current().clog_node(id);
                    self.clogged.insert(stage, id);
                }
            }
            Event::Unclog(stage) => {
                if let Some(id) = self.clogged.remove(&stage) {
                    NetSim::current().unclog_node(id);
                }
            }
            Event::Heal => {
                for id in std::mem::take(&mut self.clogged).into_values() {
                    NetSim::current().unclog_node(id);
                }
                let mut w = self.shared.lock();
                w.healed = true;
                // As tier 1: requests still queued complete first (the
                // operator stops once every client has its answer).
                if w.ended_at.is_none() && w.oracle.all_answered() {
                    w.note(
                        now,
                        "world: the fault phase ends; the operator stops the run",
                    );
                    w.to_host(pipeline::Input::Run(run::Input::Shutdown));
                } else if w.ended_at.is_none() {
                    let line = "world: the fault phase ends; requests still wait for their answers";
                    w.note(now, line);
                }
            }
        }
    }

    /// After the run ended and the world drained: RW1, RW7 and RW10.
    fn final_checks(&mut self) {
        let mut w = self.shared.lock();
        let Some(host) = w.host.clone() else {
            w.violate("RW7", "no orchestrator runs at the end".to_owned());
            return;
        };
        let live: Vec<_> = w
            .slots
            .iter()
            .filter(|s| s.alive)
            .filter_map(|s| s.agent.clone())
            .collect();
        if let Err((id, what)) = w.oracle.check_end(live.iter(), &host) {
            w.violate(id, what);
        }
        // RW11's end (as tier 1): a lease a newer lease of its node
        // replaced stands no more.
        let newest = |stage: u32| {
            (w.leases.values())
                .filter(|(s, _, _)| *s == stage)
                .map(|(_, facts, _)| facts.contract_id.parse::<u64>().unwrap_or(0))
                .max()
        };
        let standing = w.leases.iter().find_map(|(id, (stage, facts, destroyed))| {
            let contract = facts.contract_id.parse::<u64>().unwrap_or(0);
            (!destroyed && newest(*stage) > Some(contract)).then(|| id.clone())
        });
        if let Some(id) = standing {
            w.violate("RW11", format!("{id} was replaced, yet never destroyed"));
        }
        for label in w.oracle.end_labels(&host) {
            w.coverage.labels.insert(label);
        }
    }
}
