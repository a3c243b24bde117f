//! The orchestrator composite: owns the reconciler, node managers and
//! bootstrap sessions by id and routes [`crate::port::Input`] to them.
