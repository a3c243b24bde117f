//! Drives the boot machine through a timed script and writes a transcript:
//! one line per input (time, input, phase after, what is still missing),
//! one indented line per effect.

#![allow(dead_code)]

use core_fsm::boot::{Config, Effect, Input, Machine, Membership, Resource, WorkerStartPolicy};
use core_fsm::ids::LogicalNodeId;
use core_fsm::{Duration, Instant, Machine as _};
use std::fmt::Write as _;

pub const BOOT_TIMEOUT: Duration = Duration::from_secs(30);

pub fn config(worker_start: WorkerStartPolicy) -> Config {
    Config {
        node: LogicalNodeId::from("workers-0"),
        worker_start,
        boot_timeout: BOOT_TIMEOUT,
    }
}

/// The success input for a resource.
pub fn ready(resource: Resource) -> Input {
    match resource {
        Resource::Process => Input::ProcessAlive,
        Resource::Transport => Input::TransportReady,
        Resource::Identity => Input::IdentityAssigned {
            node: LogicalNodeId::from("workers-0"),
        },
        Resource::Arena => Input::ArenaCreated,
        Resource::Worker => Input::WorkerReady,
        Resource::Membership => Input::Membership(Membership::Joined),
        Resource::Provisioning => Input::CanAcceptProvisioning,
    }
}

pub fn input_text(input: &Input) -> String {
    match input {
        Input::TransportFailed { reason } => format!("TransportFailed({reason})"),
        Input::IdentityAssigned { node } => format!("IdentityAssigned({node})"),
        Input::IdentityInvalid { reason } => format!("IdentityInvalid({reason})"),
        Input::ArenaFailed { reason } => format!("ArenaFailed({reason})"),
        Input::WorkerFailed { reason } => format!("WorkerFailed({reason})"),
        Input::Membership(m) => format!("Membership({m:?})"),
        other => format!("{other:?}"),
    }
}

/// A machine, its transcript and every effect it emitted, with the step
/// index (0-based) of each.
pub struct Run {
    pub machine: Machine,
    pub transcript: String,
    pub effects: Vec<(usize, Effect)>,
}

pub fn run(config: Config, script: &[(u64, Input)]) -> Run {
    let mut machine = Machine::new(config, Instant::ZERO);
    let mut transcript = String::new();
    let mut effects = Vec::new();
    machine.check_invariants();
    for (step, (at_ms, input)) in script.iter().enumerate() {
        let out = machine.handle(Instant(*at_ms), input.clone());
        machine.check_invariants();
        let missing: Vec<String> = machine.missing().iter().map(Resource::to_string).collect();
        let missing = if missing.is_empty() {
            String::new()
        } else {
            format!("  missing: {}", missing.join(", "))
        };
        let line = format!("{} {}", Instant(*at_ms), input_text(input));
        writeln!(transcript, "{line:<40} -> {}{missing}", machine.phase()).unwrap();
        for effect in out {
            writeln!(transcript, "    => {effect}").unwrap();
            effects.push((step, effect));
        }
    }
    let c = machine.counters();
    writeln!(
        transcript,
        "counters: duplicate {}, after fault {}, after outcome {}, spurious ticks {}; may accept provisioning: {}",
        c.duplicate_facts, c.after_fault, c.after_outcome, c.spurious_ticks,
        machine.may_accept_provisioning()
    )
    .unwrap();
    Run {
        machine,
        transcript,
        effects,
    }
}

/// A script of inputs 10 ms apart from t=10ms.
pub fn spaced(inputs: Vec<Input>) -> Vec<(u64, Input)> {
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, input)| (10 * (i as u64 + 1), input))
        .collect()
}
