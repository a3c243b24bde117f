//! Stage controller lives on a node: the facts an old life's tasks report
//! after a repair provisioned the stage again are void.

use core_fsm::agent::Input;
use core_fsm::stage;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Which life of each stage controller the node's facts are for. A stage
/// provisioned again after a repair is a new life: what a task of an older
/// life reports later (a worker step that was in flight, an edge that
/// fails late) is void, and is dropped here rather than faulting the new
/// one.
#[derive(Clone, Default)]
pub struct Lives(Arc<std::sync::Mutex<std::collections::BTreeMap<u32, u64>>>);

impl Lives {
    /// A provision of `stage` begins a new life.
    pub fn begin(&self, stage: u32) {
        *self.0.lock().expect("lives").entry(stage).or_insert(0) += 1;
    }

    /// The current life of `stage`.
    pub fn of(&self, stage: u32) -> Life {
        let life = self.0.lock().expect("lives").get(&stage).copied();
        Life {
            lives: self.clone(),
            stage,
            life: life.unwrap_or(0),
        }
    }
}

/// One life of one stage controller.
#[derive(Clone)]
pub struct Life {
    lives: Lives,
    stage: u32,
    life: u64,
}

impl Life {
    /// Whether the stage is still in this life.
    pub fn current(&self) -> bool {
        self.lives.of(self.stage).life == self.life
    }

    /// The stage.
    pub fn stage(&self) -> u32 {
        self.stage
    }

    /// Sends `input` for this life's stage, unless a newer life began.
    pub async fn send(&self, tx: &mpsc::Sender<Input>, input: stage::Input) {
        if self.current() {
            let _ = tx
                .send(Input::Stage {
                    stage: self.stage,
                    input,
                })
                .await;
        }
    }
}
