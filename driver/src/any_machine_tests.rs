//! The loop drives a machine of another alphabet than the orchestrator's:
//! a toy with its own input, effect and record types.

use super::*;
use core_fsm::Duration;

/// Counts ticks; every second tick journals the count, then reports it.
#[derive(Default)]
struct Counter {
    ticks: u32,
    next: Instant,
}

#[derive(Debug, PartialEq)]
enum CounterInput {
    Tick,
}

#[derive(Debug, PartialEq)]
enum CounterEffect {
    Save(u32),
    Report(u32),
}

impl Tick for CounterInput {
    fn tick() -> Self {
        CounterInput::Tick
    }
}

impl Barrier for CounterEffect {
    type Record = u32;
    fn into_record(self) -> Result<u32, Self> {
        match self {
            CounterEffect::Save(n) => Ok(n),
            other => Err(other),
        }
    }
}

impl Machine for Counter {
    type Input = CounterInput;
    type Effect = CounterEffect;
    fn handle(&mut self, now: Instant, CounterInput::Tick: CounterInput) -> Vec<CounterEffect> {
        self.ticks += 1;
        self.next = now + Duration::from_millis(10);
        match self.ticks % 2 {
            0 => vec![
                CounterEffect::Save(self.ticks),
                CounterEffect::Report(self.ticks),
            ],
            _ => Vec::new(),
        }
    }
    fn next_deadline(&self) -> Option<Instant> {
        Some(self.next)
    }
    fn check_invariants(&self) {}
}

/// Time passes only when the loop waits: each wait jumps to the deadline.
struct Jumps(std::rc::Rc<std::cell::Cell<u64>>);
impl Clock for Jumps {
    fn now(&self) -> Instant {
        Instant(self.0.get())
    }
}
impl InputSource<CounterInput> for Jumps {
    async fn next(&mut self, deadline: Option<Instant>) -> Option<CounterInput> {
        self.0.set(deadline.expect("the counter always has one").0);
        None
    }
}

#[derive(Default)]
struct Log(Vec<String>);
impl Disk<u32> for Log {
    async fn persist(&mut self, record: &u32) -> Result<(), DiskError> {
        self.0.push(format!("saved {record}"));
        Ok(())
    }
}
impl EffectSink<CounterEffect> for Log {
    async fn dispatch(&mut self, now: Instant, effect: CounterEffect) {
        self.0.push(format!("{now:?} {effect:?}"));
    }
}

#[test]
fn a_machine_of_any_alphabet_is_ticked_and_its_barriers_persisted_first() {
    let time = std::rc::Rc::new(std::cell::Cell::new(0));
    let ports = Ports {
        clock: Jumps(time.clone()),
        source: Jumps(time),
        disk: Log::default(),
        sink: Log::default(),
    };
    let mut driver = Driver::new(Counter::default(), ports);
    let outcome = block_on_ready(driver.run_until(|m| m.ticks == 4));
    assert!(matches!(outcome, Ok(Outcome::Stopped)));
    let (_, ports) = driver.into_parts();
    assert_eq!(ports.disk.0, ["saved 2", "saved 4"]);
    assert_eq!(
        ports.sink.0,
        ["Instant(10) Report(2)", "Instant(30) Report(4)"]
    );
}

/// The ports never wait, so one poll completes the loop.
fn block_on_ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("the toy ports never wait"),
    }
}
