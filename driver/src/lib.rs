//! drover's one effect loop, written once and driven by every runtime.
//!
//! The loop owns any [`Machine`] whose input alphabet has a [`Tick`] and
//! whose effect alphabet says which effects are journal [`Barrier`]s: the
//! orchestrator composite (`port::Input` / `port::Effect`, whose barrier is
//! `Persist`), and so too the agent side and the run machine once they are
//! given the two impls. The runtime supplies four ports, generic over the
//! alphabet (the orchestrator's is the default):
//!
//! - [`Clock`]: what time it is, as a [`core_fsm::Instant`];
//! - [`InputSource`]: waits for the next input, or until a deadline;
//! - [`Disk`]: makes a barrier's record durable before it returns;
//! - [`EffectSink`]: starts every other effect's I/O (provider, SSH,
//!   transport, datastream) and later feeds its answer back through the
//!   input source as an input carrying the same `OpId`.
//!
//! One step: deliver the input to `handle(now, input)`, then dispatch the
//! effects in order, completing each barrier before any later effect is
//! dispatched (the journal rule), then check the machine's invariants (debug
//! builds), then read `next_deadline`. When the deadline is due the loop
//! delivers the tick itself.
//!
//! Nothing here depends on tokio or madsim: the ports are traits with
//! `async fn`, so the real runtime and the simulator supply their own select,
//! sleep and disk.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use core_fsm::port::{self, JournalRecord};
use core_fsm::{Instant, Machine};
use std::fmt;
use std::future::Future;

/// The runtime's clock, mapped onto the run's virtual time.
pub trait Clock {
    /// Milliseconds since the run epoch.
    fn now(&self) -> Instant;
}

/// Where inputs come from: answers of dispatched I/O, the control plane,
/// the operator.
pub trait InputSource<I = port::Input> {
    /// Waits for the next input, or until `deadline` (if any) is reached.
    ///
    /// Returns `None` when the deadline was reached first, or, with no
    /// deadline, when no input will ever come again (every sender is gone).
    /// A spurious early `None` is harmless: the loop asks again.
    fn next(&mut self, deadline: Option<Instant>) -> impl Future<Output = Option<I>>;
}

/// Durable storage for journal records.
pub trait Disk<R = JournalRecord> {
    /// Makes `record` durable (written and synced) before returning.
    fn persist(&mut self, record: &R) -> impl Future<Output = Result<(), DiskError>>;
}

/// Starts the I/O of every effect other than `Persist`.
pub trait EffectSink<E = port::Effect> {
    /// Starts `effect` (spawning its I/O); its answer comes back later as an
    /// input with the effect's `OpId`. Must not wait for that answer.
    fn dispatch(&mut self, now: Instant, effect: E) -> impl Future<Output = ()>;
}

/// An input alphabet the loop can tick.
pub trait Tick {
    /// The input that tells the machine a deadline may be due.
    fn tick() -> Self;
}

/// An effect alphabet, some of whose effects are journal barriers.
pub trait Barrier: Sized {
    /// What a barrier makes durable.
    type Record;
    /// The record, if the effect is a barrier; otherwise the effect back.
    fn into_record(self) -> Result<Self::Record, Self>;
}

impl Tick for port::Input {
    fn tick() -> Self {
        port::Input::Tick
    }
}

impl Barrier for port::Effect {
    type Record = JournalRecord;
    fn into_record(self) -> Result<JournalRecord, Self> {
        match self {
            port::Effect::Persist(record) => Ok(record),
            other => Err(other),
        }
    }
}

/// The agent, the pipeline host and the run journal nothing: none of their
/// effects is a barrier.
macro_rules! unjournaled {
    ($($input:path, $effect:path;)*) => {$(
        impl Tick for $input {
            fn tick() -> Self {
                <$input>::Tick
            }
        }
        impl Barrier for $effect {
            type Record = std::convert::Infallible;
            fn into_record(self) -> Result<Self::Record, Self> {
                Err(self)
            }
        }
    )*};
}

unjournaled! {
    core_fsm::agent::Input, core_fsm::agent::Effect;
    core_fsm::pipeline::Input, core_fsm::pipeline::Effect;
}

/// The disk of a machine that journals nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoJournal;

impl Disk<std::convert::Infallible> for NoJournal {
    async fn persist(&mut self, record: &std::convert::Infallible) -> Result<(), DiskError> {
        match *record {}
    }
}

/// A journal write that did not become durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskError {
    /// What failed, for people.
    pub message: String,
}

impl fmt::Display for DiskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "journal write failed: {}", self.message)
    }
}

impl std::error::Error for DiskError {}

/// Why [`Driver::run_until`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The stop condition held.
    Stopped,
    /// No deadline was armed and the input source is exhausted: nothing can
    /// ever happen again.
    Exhausted,
}

/// What the loop has done so far (for tests, benches and the dashboard).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Inputs delivered, ticks included.
    pub inputs: u64,
    /// Ticks the loop delivered because a deadline was due.
    pub ticks: u64,
    /// Records made durable.
    pub persisted: u64,
    /// Effects handed to the sink.
    pub dispatched: u64,
}

/// The ports a [`Driver`] drives its machine with.
pub struct Ports<C, S, D, E> {
    /// The clock.
    pub clock: C,
    /// The input source.
    pub source: S,
    /// The journal's disk.
    pub disk: D,
    /// Everything else.
    pub sink: E,
}

/// The effect loop: one machine, its ports, and what it has done.
pub struct Driver<M, C, S, D, E> {
    machine: M,
    ports: Ports<C, S, D, E>,
    counters: Counters,
}

impl<M, C, S, D, E> Driver<M, C, S, D, E>
where
    M: Machine,
    M::Input: Tick,
    M::Effect: Barrier,
    C: Clock,
    S: InputSource<M::Input>,
    D: Disk<<M::Effect as Barrier>::Record>,
    E: EffectSink<M::Effect>,
{
    /// A loop around `machine` (fresh, or restored from a journal).
    pub fn new(machine: M, ports: Ports<C, S, D, E>) -> Self {
        Driver {
            machine,
            ports,
            counters: Counters::default(),
        }
    }

    /// The machine, for queries between steps.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// The ports (a test inspects its in-memory ports here).
    pub fn ports(&self) -> &Ports<C, S, D, E> {
        &self.ports
    }

    /// What the loop has done so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Takes the driver apart (the runtime keeps its sink, for shutdown).
    pub fn into_parts(self) -> (M, Ports<C, S, D, E>) {
        (self.machine, self.ports)
    }

    /// Delivers one input and dispatches its effects in order, honouring
    /// every `Persist` barrier. A failed persist stops the step before any
    /// later effect is dispatched: the runtime must not act on a ledger
    /// change it could not make durable.
    pub async fn step(&mut self, input: M::Input) -> Result<(), DiskError> {
        let now = self.ports.clock.now();
        self.counters.inputs += 1;
        // A failed persist drops the rest of the effects with it.
        for effect in self.machine.handle(now, input) {
            match effect.into_record() {
                Ok(record) => {
                    self.ports.disk.persist(&record).await?;
                    self.counters.persisted += 1;
                }
                Err(other) => {
                    self.ports.sink.dispatch(now, other).await;
                    self.counters.dispatched += 1;
                }
            }
        }
        if cfg!(debug_assertions) {
            self.machine.check_invariants();
        }
        Ok(())
    }

    /// Runs until `stop(&machine)` holds (checked before every wait), or
    /// until nothing can happen any more. Delivers `Tick` when the machine's
    /// deadline is due.
    pub async fn run_until(
        &mut self,
        mut stop: impl FnMut(&M) -> bool,
    ) -> Result<Outcome, DiskError> {
        loop {
            if stop(&self.machine) {
                return Ok(Outcome::Stopped);
            }
            let deadline = self.machine.next_deadline();
            if deadline.is_some_and(|d| d <= self.ports.clock.now()) {
                self.counters.ticks += 1;
                self.step(M::Input::tick()).await?;
                continue;
            }
            match self.ports.source.next(deadline).await {
                Some(input) => self.step(input).await?,
                // The deadline is re-read and compared with the clock above.
                None if deadline.is_some() => {}
                None => return Ok(Outcome::Exhausted),
            }
        }
    }
}

#[cfg(test)]
mod any_machine_tests;
#[cfg(test)]
mod tests;
