//! The real runtime's ports for the shared effect loop: a tokio clock, an
//! input channel raced against the machine's deadline, and the journal as
//! the loop's disk (with the lease book its records keep).

use crate::journal::Journal;
use core_fsm::Instant;
use core_fsm::ids::{LeaseId, LogicalNodeId};
use core_fsm::node::JournalFold;
use core_fsm::port::{Input, JournalRecord};
use driver::DiskError;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Milliseconds since the process started driving the run.
#[derive(Clone, Copy)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose epoch is now.
    pub fn start() -> TokioClock {
        TokioClock {
            epoch: tokio::time::Instant::now(),
        }
    }

    /// The tokio instant of a virtual instant.
    pub fn at(&self, instant: Instant) -> tokio::time::Instant {
        self.epoch + std::time::Duration::from_millis(instant.as_millis())
    }
}

impl driver::Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant(u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}

/// The orchestrator's real ports: a clock whose epoch is now, `rx` raced
/// against the machine's deadline, the journal as the disk (showing each
/// durable record to `leases`), and `sink` for every other effect.
pub fn orchestrator_ports<E>(
    journal: Journal,
    leases: Arc<Leases>,
    rx: mpsc::Receiver<Input>,
    sink: E,
) -> driver::Ports<TokioClock, ChannelSource, JournalDisk, E> {
    let clock = TokioClock::start();
    driver::Ports {
        clock,
        source: ChannelSource { rx, clock },
        disk: JournalDisk { journal, leases },
        sink,
    }
}

/// Inputs from every I/O task, through one bounded channel (a slow loop
/// slows the senders down instead of growing a queue).
pub struct ChannelSource<I = Input> {
    /// The receiving end.
    pub rx: mpsc::Receiver<I>,
    /// The clock the deadlines are read against.
    pub clock: TokioClock,
}

impl<I> driver::InputSource<I> for ChannelSource<I> {
    async fn next(&mut self, deadline: Option<Instant>) -> Option<I> {
        match deadline {
            None => self.rx.recv().await,
            Some(deadline) => {
                let at = self.clock.at(deadline);
                tokio::select! {
                    biased;
                    input = self.rx.recv() => input,
                    () = tokio::time::sleep_until(at) => None,
                }
            }
        }
    }
}

/// The journal as the loop's disk: append and fsync before returning; each
/// durable record is then shown to the runtime's [`Leases`] book.
pub struct JournalDisk {
    /// The open journal.
    pub journal: Journal,
    /// Which lease belongs to which node, kept from the records.
    pub leases: Arc<Leases>,
}

impl driver::Disk for JournalDisk {
    async fn persist(&mut self, record: &JournalRecord) -> Result<(), DiskError> {
        // The fsync blocks the one thread for a few milliseconds: records
        // are written at a lease's or a node's change, never per token.
        self.journal.append(record).map_err(|e| DiskError {
            message: e.to_string(),
        })?;
        self.leases.record(record);
        Ok(())
    }
}

/// The leases of the run by node, read from the journal's [`JournalFold`]
/// (records restored at start and each one persisted since), so the sink
/// knows whose agent to stop before a lease is destroyed, adopted leases
/// included; and a released lease's agent is forgotten by the control plane.
pub struct Leases {
    fold: Mutex<JournalFold>,
    released: Box<Released>,
}

/// What [`Leases`] calls when a lease's release is durable.
type Released = dyn Fn(&LogicalNodeId, &LeaseId) + Send + Sync;

impl Leases {
    /// A book that calls `released` for every `LeaseReleased` persisted
    /// from now on.
    pub fn new(released: impl Fn(&LogicalNodeId, &LeaseId) + Send + Sync + 'static) -> Leases {
        Leases {
            fold: Mutex::new(JournalFold::default()),
            released: Box::new(released),
        }
    }

    /// Folds in the records a restore starts from. Their releases are
    /// history: `released` is not called for them (the control plane's own
    /// admissions are newer than anything they could say).
    pub fn restore(&self, records: &[JournalRecord]) {
        let mut fold = self.fold.lock().expect("leases");
        records.iter().for_each(|record| fold.apply(record));
    }

    /// Folds in a record just made durable.
    pub fn record(&self, record: &JournalRecord) {
        self.fold.lock().expect("leases").apply(record);
        if let JournalRecord::LeaseReleased { node, lease_id } = record {
            (self.released)(node, lease_id);
        }
    }

    /// The node `lease` belongs to.
    pub fn node_of(&self, lease: &LeaseId) -> Option<LogicalNodeId> {
        let fold = self.fold.lock().expect("leases");
        fold.holder(lease).map(|(node, _)| node.clone())
    }

    /// The lease `node` holds now.
    pub fn lease_of(&self, node: &LogicalNodeId) -> Option<LeaseId> {
        let fold = self.fold.lock().expect("leases");
        Some(fold.nodes.get(node)?.standing_lease()?.lease_id.clone())
    }

    /// The private key file to reach `lease` with, when its provider names
    /// one (a static host's `key_file`); else the state dir's identity.
    pub fn key_file(&self, lease: &LeaseId) -> Option<String> {
        let fold = self.fold.lock().expect("leases");
        let (_, facts) = fold.holder(lease)?;
        facts.metadata.get("key_file").cloned()
    }
}
