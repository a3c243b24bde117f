//! The agent composite on a node: boot readiness, stage controllers, worker supervision.
