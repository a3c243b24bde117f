//! The orchestrator node: one incarnation of `driver::Driver` over the
//! system under test, with this tier's ports. A restart of the node runs
//! [`incarnation`] again, which restores the system from the journal's
//! synced records.

use crate::observed::Observed;
use crate::provider::ProviderPort;
use crate::ssh::SshPort;
use crate::state::World;
use crate::wire::{CONTROL_PORT, JoinAnswer, JoinRequest};
use conformance::System;
use conformance::backend::panic_text;
use conformance::oracle::Observation;
use core_fsm::port::{Effect, Input, JournalRecord};
use core_fsm::time::Instant;
use driver::{Clock, Disk, DiskError, Driver, EffectSink, InputSource, Ports};
use madsim::net::Endpoint;
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How long the transport waits for an agent's join request.
const JOIN_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The run's clock: milliseconds of madsim time since the run's epoch.
#[derive(Clone, Copy)]
pub(crate) struct SimClock {
    pub(crate) epoch: std::time::Instant,
}

impl SimClock {
    /// madsim's time at the run instant `at`.
    pub(crate) fn at(&self, at: Instant) -> std::time::Instant {
        self.epoch + Duration::from_millis(at.as_millis())
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        let elapsed = madsim::time::Instant::now().saturating_duration_since(self.epoch);
        Instant(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Runs one incarnation of the orchestrator until its node is killed (or
/// the run ends).
pub(crate) async fn incarnation<S: System + 'static>(world: Arc<World>, clock: SimClock) {
    let now = clock.now();
    let (tx, rx) = unbounded_channel();
    let Some((sys, inc, first)) = boot::<S>(&world, now) else {
        // Boot or restore panicked: the violation ends the run.
        return std::future::pending().await;
    };
    *world.inbox.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
    let control = Endpoint::bind((std::net::Ipv4Addr::UNSPECIFIED, CONTROL_PORT))
        .await
        .expect("the control plane port is free on a fresh node");
    madsim::task::spawn_local(serve_joins(Arc::clone(&world), control, tx.clone(), inc));
    let sink = Sink {
        world: Arc::clone(&world),
        provider: ProviderPort::bind(Arc::clone(&world), tx.clone(), inc).await,
        ssh: SshPort::new(Arc::clone(&world), tx.clone(), inc, clock).await,
    };
    let source = Inbox {
        rx,
        clock,
        ssh: sink.ssh.shared(),
    };
    let fsync = Duration::from_millis(world.lock().case.profile.fsync_ms);
    let disk = SimDisk {
        world: Arc::clone(&world),
        fsync,
        clock,
    };
    let machine = Observed::new(sys, Arc::clone(&world), inc);
    let mut driver = Driver::new(
        machine,
        Ports {
            clock,
            source,
            disk,
            sink,
        },
    );
    let _ = tx.send(first);
    // The inbox's sender lives in the world, so the source never runs dry,
    // and the simulated disk never fails: the loop runs until the node dies.
    let outcome = driver.run_until(|_| false).await;
    let mut w = world.lock();
    let message = format!("the effect loop of #{inc} returned: {outcome:?}");
    w.violate(clock.now(), "M1", message);
    drop(w);
    world.wake.notify_one();
}

/// Builds incarnation `inc`: a fresh system, or one restored from the
/// synced journal. Returns it with its first input.
fn boot<S: System>(world: &World, now: Instant) -> Option<(S, u32, Input)> {
    let mut w = world.lock();
    w.inc += 1;
    w.orch_up = true;
    w.dying = false;
    let inc = w.inc;
    let seed = w.case.profile.system_seed ^ u64::from(inc).rotate_left(32);
    let journal = (inc > 1).then(|| w.journal.synced.clone());
    let plan = w.plan.clone();
    let built = catch_unwind(AssertUnwindSafe(|| match &journal {
        None => S::boot(&plan, seed),
        Some(records) => S::restore(&plan, seed, records),
    }));
    let sys = match built {
        Ok(sys) => sys,
        Err(panic) => {
            let what = if journal.is_some() { "restore" } else { "boot" };
            w.violate(
                now,
                "W7",
                format!("{what} panicked: {}", panic_text(&*panic)),
            );
            world.wake.notify_one();
            return None;
        }
    };
    w.event(now, "started");
    w.observe(now, Observation::Started { inc });
    let first = if w.teardown_wanted {
        Input::Teardown
    } else {
        Input::Start
    };
    Some((sys, inc, first))
}

/// The control plane: agents dial in and present their token; a valid one
/// becomes an `AgentJoined` input. The token never leaves this function.
async fn serve_joins(world: Arc<World>, ep: Endpoint, tx: UnboundedSender<Input>, inc: u32) {
    while let Ok((sender, mut receiver, _from)) = ep.accept1().await {
        let world = Arc::clone(&world);
        let tx = tx.clone();
        madsim::task::spawn_local(async move {
            let read = madsim::time::timeout(JOIN_READ_TIMEOUT, receiver.recv()).await;
            let Ok(Ok(payload)) = read else { return };
            let Ok(request) = payload.downcast::<JoinRequest>() else {
                return;
            };
            let binding = {
                let w = world.lock();
                if w.inc != inc || !w.orch_up {
                    return;
                }
                w.accepts(request.token)
            };
            let answer = match binding {
                Some(binding) => {
                    let input = Input::AgentJoined {
                        node: binding.node,
                        lease_id: binding.lease_id,
                        agent: request.agent,
                    };
                    let _ = tx.send(input);
                    JoinAnswer::Accepted
                }
                None => JoinAnswer::Rejected,
            };
            let _ = sender.send(Box::new(answer)).await;
        });
    }
}

/// The input source: answers and joins from the ports, operator inputs from
/// the supervisor; a deadline is a madsim sleep.
struct Inbox {
    rx: UnboundedReceiver<Input>,
    clock: SimClock,
    ssh: Rc<RefCell<crate::ssh::Sessions>>,
}

impl InputSource for Inbox {
    async fn next(&mut self, deadline: Option<Instant>) -> Option<Input> {
        loop {
            let input = match deadline {
                Some(at) => {
                    let sleep = madsim::time::sleep_until(self.clock.at(at));
                    tokio::select! {
                        biased;
                        input = self.rx.recv() => input,
                        () = sleep => return None,
                    }
                }
                None => self.rx.recv().await,
            }?;
            // Output of a connection the port already closed is discarded
            // with the connection's buffers, as a real SSH client does.
            if self.ssh.borrow().wanted(&input) {
                return Some(input);
            }
        }
    }
}

/// The journal's disk. A write is pending until its sync (the profile's
/// fsync latency); a kill in between loses it.
struct SimDisk {
    world: Arc<World>,
    fsync: Duration,
    clock: SimClock,
}

impl Disk for SimDisk {
    async fn persist(&mut self, record: &JournalRecord) -> Result<(), DiskError> {
        let crash = {
            let mut w = self.world.lock();
            let write = w.writes;
            w.writes += 1;
            let effect = w.effects_dispatched;
            w.effects_dispatched += 1;
            w.journal.pending = Some(record.clone());
            let after_effect = w.faults.crash_after_effect.get(&effect).copied();
            let before_sync = w.faults.crash_before_sync.get(&write).copied();
            after_effect
                .map(|ms| ("crash-after-effect", ms))
                .or(before_sync.map(|ms| ("crash-before-sync", ms)))
        };
        if let Some((why, ms)) = crash
            && self.world.request_kill(why, ms)
        {
            return std::future::pending().await;
        }
        madsim::time::sleep(self.fsync).await;
        let mut w = self.world.lock();
        if let Some(record) = w.journal.pending.take() {
            let now = self.clock.now();
            w.observe(now, Observation::Synced(&record));
            w.journal.synced.push(record);
        }
        Ok(())
    }
}

/// Dispatches every effect other than `Persist` to its port.
struct Sink {
    world: Arc<World>,
    provider: ProviderPort,
    ssh: SshPort,
}

impl EffectSink for Sink {
    async fn dispatch(&mut self, _now: Instant, effect: Effect) {
        match effect {
            Effect::Persist(_) => unreachable!("the driver completes persists itself"),
            Effect::CreateLease { .. }
            | Effect::LookupEndpoint { .. }
            | Effect::DestroyLease { .. }
            | Effect::ListLeases { .. } => self.provider.dispatch(effect),
            Effect::SshConnect { .. } | Effect::SshExec { .. } | Effect::SshClose { .. } => {
                self.ssh.dispatch(effect).await
            }
            Effect::RevokeJoin(binding) => self.world.lock().revoke(&binding),
            // Observational: already folded into the digest and the oracle.
            // This composite has no pipeline host (`membership: None`): a
            // lost agent is said with `AgentLost`.
            Effect::Log(_) | Effect::NodeChanged { .. } | Effect::Pipeline(_) => {}
        }
        let crash = {
            let mut w = self.world.lock();
            let nth = w.effects_dispatched;
            w.effects_dispatched += 1;
            w.faults.crash_after_effect.get(&nth).copied()
        };
        if let Some(ms) = crash
            && self.world.request_kill("crash-after-effect", ms)
        {
            std::future::pending::<()>().await;
        }
    }
}
