//! The OrchestratorRun: readiness barrier through teardown (seed 004 §4-6, §9).
