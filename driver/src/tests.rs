//! The loop with in-memory ports, in virtual time, on a tiny executor.
//!
//! The ports write one shared transcript; the persist barrier is asserted on
//! it: between a persist's begin and its end nothing else happens, and no
//! effect after a `Persist` is dispatched before that persist ended.

use super::*;
use core_fsm::Duration;
use core_fsm::ids::{LogicalNodeId, Nonce, OpId, RunId};
use core_fsm::port::{Effect, Input, LogRecord, LogStream};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

type Transcript = Rc<RefCell<Vec<String>>>;

/// Polls a future to completion; the ports' futures wake nobody, they just
/// return `Pending` a few times, so polling again is always right.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..10_000 {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("future did not complete within 10000 polls");
}

/// Returns `Pending` `n` times, then `Ready`.
struct YieldTimes(u32);
impl Future for YieldTimes {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            Poll::Pending
        }
    }
}

#[derive(Clone)]
struct VirtualClock(Rc<Cell<u64>>);
impl Clock for VirtualClock {
    fn now(&self) -> Instant {
        Instant(self.0.get())
    }
}

/// Scripted inputs at virtual times; waiting advances the clock.
struct Script {
    clock: VirtualClock,
    inputs: VecDeque<(u64, Input)>,
}
impl InputSource for Script {
    async fn next(&mut self, deadline: Option<Instant>) -> Option<Input> {
        let due = self.inputs.front().map(|(at, _)| *at);
        match (due, deadline) {
            (Some(at), Some(d)) if d.0 < at => {
                self.clock.0.set(d.0);
                None
            }
            (Some(at), _) => {
                self.clock.0.set(self.clock.0.get().max(at));
                self.inputs.pop_front().map(|(_, input)| input)
            }
            (None, Some(d)) => {
                self.clock.0.set(d.0);
                None
            }
            (None, None) => None,
        }
    }
}

struct MemoryDisk {
    transcript: Transcript,
    records: Vec<JournalRecord>,
    fail_after: Option<usize>,
}
impl Disk for MemoryDisk {
    async fn persist(&mut self, record: &JournalRecord) -> Result<(), DiskError> {
        let name = record_name(record);
        self.transcript
            .borrow_mut()
            .push(format!("persist-begin {name}"));
        // A slow disk: the loop must wait here, dispatching nothing.
        YieldTimes(3).await;
        if self.fail_after.is_some_and(|n| self.records.len() >= n) {
            self.transcript
                .borrow_mut()
                .push(format!("persist-failed {name}"));
            return Err(DiskError {
                message: "disk full".into(),
            });
        }
        self.records.push(record.clone());
        self.transcript
            .borrow_mut()
            .push(format!("persist-end {name}"));
        Ok(())
    }
}

struct RecordingSink(Transcript);
impl EffectSink for RecordingSink {
    async fn dispatch(&mut self, now: Instant, effect: Effect) {
        YieldTimes(1).await;
        self.0
            .borrow_mut()
            .push(format!("{now} dispatch {}", effect_name(&effect)));
    }
}

fn record_name(record: &JournalRecord) -> String {
    match record {
        JournalRecord::RunStarted { run_id } => format!("RunStarted {run_id}"),
        JournalRecord::LeaseIntent { node, nonce, .. } => format!("LeaseIntent {node} {nonce}"),
        other => format!("{other:?}"),
    }
}

fn effect_name(effect: &Effect) -> String {
    match effect {
        Effect::CreateLease { op, request } => format!("CreateLease {op} {}", request.node),
        Effect::Log(log) => format!("Log {}", log.line),
        other => format!("{other:?}"),
    }
}

/// A toy machine in the orchestrator's alphabet: Start persists the run,
/// then per node a lease intent followed by its create; it arms a timer
/// that logs on expiry; it counts its invariant checks.
struct Toy {
    nodes: Vec<&'static str>,
    timer: Option<Instant>,
    checks: Rc<Cell<u64>>,
    handled: Vec<String>,
}

impl Machine for Toy {
    type Input = Input;
    type Effect = Effect;
    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        self.handled.push(format!("{now} {}", input_name(&input)));
        match input {
            Input::Start => {
                let mut effects = vec![Effect::Persist(JournalRecord::RunStarted {
                    run_id: RunId(7),
                })];
                for (i, node) in self.nodes.iter().enumerate() {
                    let nonce = Nonce(i as u64 + 1);
                    let node = LogicalNodeId::from(*node);
                    effects.push(Effect::Persist(JournalRecord::LeaseIntent {
                        node: node.clone(),
                        nonce,
                        attempt: 1,
                    }));
                    effects.push(Effect::CreateLease {
                        op: OpId(i as u64 + 1),
                        request: core_fsm::port::CreateLeaseRequest {
                            run_id: RunId(7),
                            node,
                            nonce,
                            provider: core_fsm::plan::ProviderKind::Local,
                            shape: Default::default(),
                            excluded_hosts: vec![],
                        },
                    });
                }
                self.timer = Some(now + Duration(100));
                effects
            }
            Input::Tick if self.timer.is_some_and(|t| t <= now) => {
                self.timer = None;
                vec![Effect::Log(LogRecord {
                    run_id: RunId(7),
                    node: LogicalNodeId::from("a-0"),
                    lease_id: "local:0".into(),
                    source: "ssh-bootstrap".into(),
                    stream: LogStream::Stdout,
                    seq: 1,
                    at: now,
                    line: "timer fired".into(),
                })]
            }
            _ => vec![],
        }
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.timer
    }
    fn check_invariants(&self) {
        self.checks.set(self.checks.get() + 1);
    }
}

fn input_name(input: &Input) -> String {
    match input {
        Input::Tick => "Tick".into(),
        Input::Start => "Start".into(),
        Input::Teardown => "Teardown".into(),
        other => format!("{other:?}"),
    }
}

type ToyDriver = Driver<Toy, VirtualClock, Script, MemoryDisk, RecordingSink>;

fn toy(inputs: Vec<(u64, Input)>, fail_after: Option<usize>) -> (ToyDriver, Transcript) {
    let transcript: Transcript = Rc::default();
    let clock = VirtualClock(Rc::new(Cell::new(0)));
    let machine = Toy {
        nodes: vec!["a-0", "a-1"],
        timer: None,
        checks: Rc::default(),
        handled: vec![],
    };
    let ports = Ports {
        clock: clock.clone(),
        source: Script {
            clock,
            inputs: inputs.into(),
        },
        disk: MemoryDisk {
            transcript: transcript.clone(),
            records: vec![],
            fail_after,
        },
        sink: RecordingSink(transcript.clone()),
    };
    (Driver::new(machine, ports), transcript)
}

#[test]
fn persist_completes_before_any_later_effect_is_dispatched() {
    let (mut driver, transcript) = toy(vec![(5, Input::Start)], None);
    let outcome = block_on(driver.run_until(|_| false)).unwrap();
    assert_eq!(outcome, Outcome::Exhausted);
    let expected = [
        "persist-begin RunStarted run-7",
        "persist-end RunStarted run-7",
        "persist-begin LeaseIntent a-0 nonce-1",
        "persist-end LeaseIntent a-0 nonce-1",
        "t=5ms dispatch CreateLease op-1 a-0",
        "persist-begin LeaseIntent a-1 nonce-2",
        "persist-end LeaseIntent a-1 nonce-2",
        "t=5ms dispatch CreateLease op-2 a-1",
        "t=105ms dispatch Log timer fired",
    ];
    assert_eq!(*transcript.borrow(), expected);
    assert_barrier(&transcript.borrow());
    let counters = driver.counters();
    assert_eq!(
        counters,
        Counters {
            inputs: 2,
            ticks: 1,
            persisted: 3,
            dispatched: 3
        }
    );
    assert_eq!(driver.machine().handled, ["t=5ms Start", "t=105ms Tick"]);
    assert_eq!(driver.ports().disk.records.len(), 3);
}

/// The barrier as a property of any transcript: every begin is immediately
/// followed by its own end (nothing interleaves), and no dispatch happens
/// while a persist is open.
fn assert_barrier(lines: &[String]) {
    let mut open: Option<&str> = None;
    for line in lines {
        if let Some(name) = line.strip_prefix("persist-begin ") {
            assert!(open.is_none(), "nested persist at {line}");
            open = Some(name);
        } else if let Some(name) = line.strip_prefix("persist-end ") {
            assert_eq!(
                open.take(),
                Some(name),
                "persist ended out of order at {line}"
            );
        } else {
            assert!(open.is_none(), "{line} dispatched while a persist was open");
        }
    }
    assert!(open.is_none());
}

#[test]
fn a_failed_persist_dispatches_nothing_after_it() {
    // The second record (a-0's intent) fails: its create must never go out.
    let (mut driver, transcript) = toy(vec![(0, Input::Start)], Some(1));
    let error = block_on(driver.run_until(|_| false)).unwrap_err();
    assert_eq!(error.message, "disk full");
    let lines = transcript.borrow();
    assert!(!lines.iter().any(|l| l.contains("dispatch")), "{lines:?}");
    assert_eq!(
        lines.last().unwrap(),
        "persist-failed LeaseIntent a-0 nonce-1"
    );
}

#[test]
fn stop_condition_is_checked_before_every_wait() {
    let (mut driver, _) = toy(vec![(0, Input::Start), (50, Input::Teardown)], None);
    // Stop as soon as the machine has seen two inputs: the timer at 100 and
    // anything after it never run.
    let outcome = block_on(driver.run_until(|m| m.handled.len() == 2)).unwrap();
    assert_eq!(outcome, Outcome::Stopped);
    assert_eq!(driver.machine().handled, ["t=0ms Start", "t=50ms Teardown"]);
    assert_eq!(driver.counters().ticks, 0);
    // Resuming runs the rest: the tick at 100.
    let outcome = block_on(driver.run_until(|_| false)).unwrap();
    assert_eq!(outcome, Outcome::Exhausted);
    assert_eq!(driver.machine().handled.last().unwrap(), "t=100ms Tick");
}

#[test]
fn a_due_deadline_ticks_before_a_later_input() {
    let (mut driver, transcript) = toy(vec![(0, Input::Start), (300, Input::Teardown)], None);
    block_on(driver.run_until(|_| false)).unwrap();
    assert_eq!(
        driver.machine().handled,
        ["t=0ms Start", "t=100ms Tick", "t=300ms Teardown"]
    );
    assert!(
        transcript
            .borrow()
            .iter()
            .any(|l| l == "t=100ms dispatch Log timer fired")
    );
}

#[test]
fn invariants_are_checked_after_every_step_in_debug_builds() {
    let (mut driver, _) = toy(vec![(0, Input::Start), (10, Input::Teardown)], None);
    let checks = driver.machine().checks.clone();
    block_on(driver.run_until(|_| false)).unwrap();
    let expected = if cfg!(debug_assertions) {
        driver.counters().inputs
    } else {
        0
    };
    assert_eq!(checks.get(), expected);
    assert_eq!(driver.counters().inputs, 3);
}
