//! Loading a plan file for the CLI: `plan_toml` reads it (every problem at
//! once, each with file, line, column and field) and checks the rules of
//! `core_fsm::plan::validate`.

use core_fsm::plan::RunPlan;
use std::path::Path;

/// Reads, parses and validates the plan at `path`; the error lists every
/// problem, one per line.
pub fn load(path: &Path) -> Result<RunPlan, String> {
    crate::plan_toml::parse(path).map_err(|e| match e {
        crate::plan_toml::PlanFileError::Read { .. } => e.to_string(),
        crate::plan_toml::PlanFileError::Invalid { .. } => format!("invalid plan:\n{e}"),
    })
}

/// A plan as plan-file text that [`load`] reads back to the same plan.
pub fn to_toml(plan: &RunPlan) -> String {
    crate::plan_toml::to_string(plan)
}
