//! The glue between `up` and the two parts built alongside it: the
//! orchestrator composite (`core_fsm::orchestrator`) and the iroh control
//! plane (`crate::transport`).

use super::sink::Joins;
use super::{Orchestrated, Runtime, drive, prepare_state};
use crate::transport::{ControlEvent, ControlPlane};
use core_fsm::orchestrator::{Config, Orchestrator};
use core_fsm::plan::RunPlan;
use core_fsm::port::{Input, JoinBinding};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::mpsc;

impl Orchestrated for Orchestrator {
    fn is_settled(&self) -> bool {
        Orchestrator::is_settled(self)
    }

    fn is_torn_down(&self) -> bool {
        Orchestrator::is_torn_down(self)
    }
}

/// The control plane as the sink sees it; a plan that names its own
/// orchestrator address (anything but `auto`) gets that address.
struct ControlJoins {
    control: Arc<ControlPlane>,
    addr: String,
}

impl Joins for ControlJoins {
    fn addr_string(&self) -> String {
        self.addr.clone()
    }

    fn mint(&self, binding: JoinBinding) -> String {
        self.control.mint(binding)
    }

    fn revoke(&self, binding: &JoinBinding) {
        self.control.revoke(binding);
    }
}

/// Builds the machine (fresh, or restored from the journal: adoption) and
/// the control plane, and drives the run.
pub async fn up(state_dir: &Path, plan: RunPlan, json: bool) -> anyhow::Result<i32> {
    let (journal, records) = prepare_state(state_dir, &plan)?;
    let mut control = ControlPlane::bind(state_dir).await?;
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(forward_joins(control.take_events(), tx));
    let control = Arc::new(control);
    let addr = match plan
        .groups
        .first()
        .map(|g| g.join.orchestrator_addr.as_str())
    {
        Some(addr) if addr != "auto" => addr.to_owned(),
        _ => control.addr_string(),
    };
    let joins = Arc::new(ControlJoins {
        control: control.clone(),
        addr,
    });
    let config = Config {
        plan: plan.clone(),
        seed: seed(),
    };
    let machine = if records.is_empty() {
        Orchestrator::new(config)
    } else {
        Orchestrator::restore(config, &records)
    };
    let runtime = Runtime {
        state_dir: state_dir.to_owned(),
        plan,
        json,
        joins,
        control_inputs: rx,
    };
    let code = drive(runtime, machine, journal).await;
    control.shutdown().await;
    code
}

/// Admitted agents become `AgentJoined` (a rejoin too: a restored node that
/// waits for its agent takes it, any other node ignores it and counts it).
async fn forward_joins(mut events: mpsc::Receiver<ControlEvent>, tx: mpsc::Sender<Input>) {
    while let Some(event) = events.recv().await {
        let (binding, agent) = match event {
            ControlEvent::Joined { binding, agent } | ControlEvent::Rejoined { binding, agent } => {
                (binding, agent)
            }
            _ => continue,
        };
        let input = Input::AgentJoined {
            node: binding.node,
            lease_id: binding.lease_id,
            agent,
        };
        if tx.send(input).await.is_err() {
            return;
        }
    }
}

/// The run's seed: only nonces derive from it, and they must differ between
/// runs and lives, so the wall clock is a fine source here (the machine
/// itself never reads a clock).
fn seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32)
}
