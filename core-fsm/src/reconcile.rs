//! The level-triggered pool reconciler (seed 002).
