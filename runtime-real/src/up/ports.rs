//! The real runtime's ports for the shared effect loop: a tokio clock, an
//! input channel raced against the machine's deadline, and the journal as
//! the loop's disk.

use crate::journal::Journal;
use core_fsm::Instant;
use core_fsm::port::{Input, JournalRecord};
use driver::DiskError;
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

/// Inputs from every I/O task, through one bounded channel (a slow loop
/// slows the senders down instead of growing a queue).
pub struct ChannelSource {
    /// The receiving end.
    pub rx: mpsc::Receiver<Input>,
    /// The clock the deadlines are read against.
    pub clock: TokioClock,
}

impl driver::InputSource for ChannelSource {
    async fn next(&mut self, deadline: Option<Instant>) -> Option<Input> {
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

/// The journal as the loop's disk: append and fsync before returning.
pub struct JournalDisk {
    /// The open journal.
    pub journal: Journal,
}

impl driver::Disk for JournalDisk {
    async fn persist(&mut self, record: &JournalRecord) -> Result<(), DiskError> {
        // An fsync blocks; tell the runtime so other tasks move meanwhile.
        let journal = &mut self.journal;
        tokio::task::block_in_place(|| journal.append(record)).map_err(|e| DiskError {
            message: e.to_string(),
        })
    }
}
