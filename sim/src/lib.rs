//! Simulation worlds.
