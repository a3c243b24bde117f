//! The StageController (seed 004 §6.5-6.6).
