//! Loading a plan file for the CLI: TOML parsed into a `RunPlan`, then every
//! rule of `core_fsm::plan::validate` checked; errors name the line and the
//! field.

use core_fsm::plan::RunPlan;
use std::path::Path;

/// Reads, parses and validates the plan at `path`.
pub fn load(path: &Path) -> Result<RunPlan, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let plan: RunPlan = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    core_fsm::plan::validate(&plan).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        format!("{}: invalid plan:\n{}", path.display(), lines.join("\n"))
    })?;
    Ok(plan)
}

/// A plan as plan-file text that [`load`] reads back to the same plan.
pub fn to_toml(plan: &RunPlan) -> String {
    toml::to_string(plan).expect("a run plan always has a TOML form")
}
