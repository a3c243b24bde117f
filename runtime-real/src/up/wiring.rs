//! The glue between `up` and the two parts built alongside it: the
//! orchestrator composite (`core_fsm::orchestrator`) and the iroh control
//! plane (`crate::transport`). Until both are in the build, `up` says so.

use core_fsm::plan::RunPlan;
use std::path::Path;

/// Builds the machine and the control plane and drives the run.
pub async fn up(state_dir: &Path, plan: RunPlan, json: bool) -> anyhow::Result<i32> {
    let _ = (state_dir, plan, json);
    anyhow::bail!("this build has no orchestrator composite yet")
}
