//! The tier-1 world of the run phase: the orchestrator composite
//! (`core_fsm::orchestrator::Orchestrator`, owning the pipeline host: the
//! run and membership) and one `core_fsm::agent::Machine` per node, with
//! simulated workers running a stand-in model ([`model`]), activation and
//! token edges as ordered message queues with latency, and prompt clients.
//!
//! The composite provisions a node per stage through a happy-path provider
//! and SSH host (`provision.rs`); each start command launches the node's
//! agent, which joins; once the composite is settled and every node ready,
//! the run begins, as `drover up` begins it. A dead agent's node is failed
//! by the composite's membership and, when the profile repairs, replaced by
//! the composite (a new lease, a new agent).
//! Events sit in one queue ordered by `(time, seq)`; a machine's deadline is
//! served when it is due. Every answer goes through the queue, as the real
//! effect sides answer through their channels (`runtime-real/src/pipeline/
//! host.rs`, `node.rs`, `worker.rs`, `edges.rs`, whose behaviour each effect
//! handler here follows). The oracle ([`oracle`]) judges after every step.

pub mod battery;
mod config;
mod death;
mod edges;
mod host;
pub mod model;
mod node;
mod oracle;
mod provision;
mod replacement;
mod step;
mod worker;

/// What the madsim tier's run world shares with this one: the ids and
/// configs, the stand-in model's forward step, the edge frames and the
/// oracle, so both tiers judge by the same rules.
pub mod kit {
    pub use super::config::{
        PREFILL_IN_FLIGHT, agent_config, debug_head, due_once, fatal, fault_index,
        membership_config, orchestrator_config, phase_label, prefill_chunks, repaired_label,
        repairs, run_input, run_plan,
    };
    pub use super::edges::Frame;
    pub use super::host::run_config;
    pub use super::node::boot_inputs;
    pub use super::oracle::{Broken, Life, RunOracle};
    pub use super::provision::lease_facts;
    pub use super::replacement::refused_create;
    pub use super::worker::forward;
}

pub use config::{agent_id, agent_id_of, fault_names, node_id, orchestrator_id};
use config::{fatal, run_input};
use conformance::coverage::Coverage;
use conformance::run::{RunCase, RunFault};
use conformance::{RunOptions, RunOutcome, Violation};
use core_fsm::Machine as _;
use core_fsm::agent;
use core_fsm::digest::Digest;
use core_fsm::ids::RunId;
use core_fsm::orchestrator::Orchestrator;
use core_fsm::time::{Duration, Instant};
use core_fsm::{pipeline, port};
use edges::{Conn, Frame};
use host::HostSide;
use node::Node;
use oracle::RunOracle;
use provision::ProvisionSide;
use std::collections::BTreeMap;
use worker::Job;

/// The run's id in every case.
pub const RUN: RunId = RunId(7);
/// Steps after which a run is declared runaway.
const STEP_MAX: u64 = 200_000;
/// How long the world runs on after the run ended, for stop facts to land.
const DRAIN: Duration = Duration::from_secs(30);
/// How long after the fault phase the run may take to end.
const LIVENESS: Duration = Duration::from_secs(40);
/// The token-gap timeout the world gives the run.
pub const TOKEN_TIMEOUT: Duration = Duration::from_secs(8);
/// The first token's extra allowance per token injected (a prefill).
pub const PREFILL_PER_TOKEN: Duration = Duration::from_millis(50);

/// Something scheduled to happen.
#[derive(Clone, Debug)]
enum Ev {
    /// An input reaches the orchestrator's pipeline host (through the
    /// composite).
    Host(pipeline::Input),
    /// An input reaches the orchestrator composite (provisioning answers,
    /// joins, `Start`).
    Orch(port::Input),
    /// An input reaches node `node`'s agent.
    Agent { node: u32, input: agent::Input },
    /// A worker job of node `node`'s worker life `life` ends.
    Worker { node: u32, life: u32, job: Job },
    /// A frame reaches the receiving end of connection `conn`.
    Arrive { conn: u32, frame: Frame },
    /// A dialed connection reaches its receiver.
    Dialed { conn: u32 },
    /// Connection `conn` broke; its receiver notices.
    Broken { conn: u32 },
    /// The client of request `index` submits.
    Submit(u32),
    /// A dead agent's connections are noticed gone.
    ConnectionsLost(u32),
    /// The fault phase ends: the operator stops the run.
    Heal,
}

/// The run-phase world of one case.
pub struct RunWorld<'c> {
    case: &'c RunCase,
    faults: BTreeMap<RunFault, Vec<(u32, u64)>>,
    now: Instant,
    seq: u64,
    queue: BTreeMap<(Instant, u64), Ev>,
    host: Orchestrator,
    /// The composite's next deadline, as of its last step.
    host_due: Option<Instant>,
    hs: HostSide,
    ps: ProvisionSide,
    /// Whether this orchestrator's run began.
    begun: bool,
    nodes: Vec<Node>,
    conns: Vec<Conn>,
    oracle: RunOracle,
    /// Steps executed, frames sent and token records sent, all stages.
    steps_executed: u32,
    frames_sent: u32,
    tokens_sent: u32,
    /// Faults that strike once and have struck.
    fired: std::collections::BTreeSet<RunFault>,
    /// A token record held back until the next one passes (reordering).
    held: Option<(u32, Frame, u64)>,
    ended_at: Option<Instant>,
    healed: bool,
    digest: Digest,
    step_digests: Vec<u64>,
    step: u64,
    coverage: Coverage,
    transcript: Option<Vec<String>>,
    violation: Option<Violation>,
}

impl<'c> RunWorld<'c> {
    /// A world for `case`: the composite about to start, no node leased.
    pub fn new(case: &'c RunCase, options: RunOptions) -> RunWorld<'c> {
        let p = &case.profile;
        let faults = config::fault_index(case);
        let stages = p.stages.max(1);
        // Each node's agent runs once the composite's start command ran.
        let nodes: Vec<Node> = (0..stages)
            .map(|s| {
                let mut node = Node::new(s, config::agent_config(s, 0), Instant::ZERO);
                (node.alive, node.lost) = (false, true);
                node
            })
            .collect();
        let host = Orchestrator::new(config::orchestrator_config(p));
        let mut world = RunWorld {
            case,
            faults,
            now: Instant::ZERO,
            seq: 0,
            queue: BTreeMap::new(),
            host_due: host.next_deadline(),
            host,
            hs: HostSide::new(stages),
            ps: ProvisionSide::new(stages),
            begun: false,
            nodes,
            conns: Vec::new(),
            oracle: RunOracle::new(p, fatal(case)),
            steps_executed: 0,
            frames_sent: 0,
            tokens_sent: 0,
            fired: std::collections::BTreeSet::new(),
            held: None,
            ended_at: None,
            healed: false,
            digest: Digest::default(),
            step_digests: Vec::new(),
            step: 0,
            coverage: Coverage::default(),
            transcript: options.transcript.then(Vec::new),
            violation: None,
        };
        // As `drover up` does: the composite starts; the run begins once
        // it is settled (`maybe_begin`).
        world.at(Duration::ZERO, Ev::Orch(port::Input::Start));
        world.at(Duration::from_millis(p.heal_at_ms), Ev::Heal);
        world
    }

    /// Runs the case to its end or its first violation.
    pub fn run(mut self) -> RunOutcome {
        while self.violation.is_none() && self.step < STEP_MAX {
            if let Some(ended) = self.ended_at
                && self.now >= ended + DRAIN
            {
                self.final_checks();
                break;
            }
            let limit = Instant(self.case.profile.heal_at_ms) + LIVENESS;
            if self.ended_at.is_none() && self.now > limit {
                let what = format!("the run is not over {LIVENESS:?} after the fault phase");
                self.violate("RW8", what);
                break;
            }
            if !self.next_event() {
                self.violate(
                    "RW8",
                    "nothing left to happen, the run is not over".to_owned(),
                );
                break;
            }
        }
        if self.violation.is_none() && self.step >= STEP_MAX {
            self.violate("RW8", format!("runaway: {STEP_MAX} steps"));
        }
        self.coverage.faults.extend(self.oracle.injected.iter());
        let stats = conformance::Stats {
            steps: self.step,
            end_ms: self.now.as_millis(),
            nodes_ready: self.oracle.done_requests(),
            nodes_failed: u32::from(matches!(
                self.the_run().and_then(|r| r.outcome()),
                Some(Err(_))
            )),
            leases_created: self.ps.leases_created(),
            restarts: u32::from(self.fired.contains(&RunFault::OrchestratorCrash)),
        };
        RunOutcome {
            violation: self.violation,
            digest: self.digest,
            step_digests: self.step_digests,
            coverage: self.coverage,
            transcript: self.transcript.unwrap_or_default(),
            stats,
        }
    }

    /// Serves the earliest due deadline or event; false when none is left.
    fn next_event(&mut self) -> bool {
        let queued = self.queue.keys().next().map(|(t, _)| *t);
        let host_due = self.host_due;
        let node_due = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .filter_map(|n| n.agent.next_deadline().map(|d| (d, n.stage)))
            .min();
        let deadline = match (host_due, node_due) {
            (Some(h), Some((n, _))) if n < h => node_due.map(|(d, s)| (d, Some(s))),
            (None, Some(_)) => node_due.map(|(d, s)| (d, Some(s))),
            (Some(h), _) => Some((h, None)),
            (None, None) => None,
        };
        match (deadline, queued) {
            (Some((due, who)), q) if q.is_none_or(|q| due <= q) => {
                self.now = self.now.max(due);
                match who {
                    None => self.feed_orch(port::Input::Tick),
                    Some(s) => self.feed_agent(s, agent::Input::Tick),
                }
                true
            }
            (_, Some(_)) => {
                let Some(((t, _), ev)) = self.queue.pop_first() else {
                    return false;
                };
                self.now = self.now.max(t);
                self.handle(ev);
                true
            }
            _ => false,
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Host(input) => self.feed_host(input),
            Ev::Orch(input) => {
                self.ps.delivered(&input);
                self.feed_orch(input);
            }
            Ev::Agent { node, input } => self.deliver_to_agent(node, input),
            Ev::Worker { node, life, job } => self.worker_done(node, life, job),
            Ev::Arrive { conn, frame } => self.arrive(conn, frame),
            Ev::Dialed { conn } => self.dialed(conn),
            Ev::Broken { conn } => self.broken(conn),
            Ev::Submit(index) => self.submit(index),
            Ev::ConnectionsLost(node) => self.connections_lost(node),
            Ev::Heal => {
                self.healed = true;
                self.release_held();
                // Liveness: the requests still queued complete first (the
                // operator stops once every client has its answer, RW8
                // bounds the wait); with none waiting, the stop is now.
                if self.ended_at.is_none() && self.oracle.all_answered() {
                    self.note("world: the fault phase ends; the operator stops the run");
                    self.at(
                        Duration::ZERO,
                        Ev::Host(run_input(core_fsm::run::Input::Shutdown)),
                    );
                } else if self.ended_at.is_none() {
                    self.note("world: the fault phase ends; requests still wait for their answers");
                }
            }
        }
    }

    /// Schedules `ev` after `delay`.
    fn at(&mut self, delay: Duration, ev: Ev) {
        self.at_instant(self.now + delay, ev);
    }

    fn at_instant(&mut self, when: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((when.max(self.now), self.seq), ev);
    }

    fn latency(&self) -> Duration {
        Duration::from_millis(self.case.profile.latency_ms)
    }

    /// Whether `fault` is planned for `target`; its argument if so.
    fn planned(&self, fault: RunFault, target: u32) -> Option<u64> {
        self.faults
            .get(&fault)?
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, a)| *a)
    }

    fn inject(&mut self, fault: RunFault) {
        self.oracle.injected.insert(fault.name());
        self.note(&format!("fault: {}", fault.name()));
    }

    /// After the run ended and the world drained: RW1 and RW7.
    fn final_checks(&mut self) {
        if let Some(id) = self.ps.replaced_standing() {
            let what = format!("{id} was replaced, yet never destroyed");
            return self.violate("RW11", what);
        }
        if let Err(v) = self.oracle.check_end(
            self.nodes.iter().filter(|n| n.alive).map(|n| &n.agent),
            self.pipeline(),
        ) {
            self.violate(v.0, v.1);
        }
        for label in self.oracle.end_labels(self.pipeline()) {
            self.coverage.labels.insert(label);
        }
    }

    /// The composite's pipeline host (it always has one here).
    fn pipeline(&self) -> &pipeline::Machine {
        self.host
            .pipeline()
            .expect("the world's composite has a pipeline host")
    }

    /// The run, once begun.
    fn the_run(&self) -> Option<&core_fsm::run::Machine> {
        self.pipeline().run()
    }

    /// Digests `what`; with a transcript, writes it as `who`'s (formatted
    /// only then).
    fn record<T: std::fmt::Debug>(&mut self, who: impl std::fmt::Display, what: &T) {
        self.digest.update_debug(what);
        if let Some(t) = self.transcript.as_mut() {
            t.push(format!("{:>8} {who} {what:?}", self.now.as_millis()));
        }
    }

    fn note(&mut self, text: &str) {
        if let Some(t) = self.transcript.as_mut() {
            t.push(format!("{:>8} {text}", self.now.as_millis()));
        }
    }

    fn violate(&mut self, id: &'static str, message: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                id,
                step: self.step,
                at_ms: self.now.as_millis(),
                message,
            });
        }
    }
}
