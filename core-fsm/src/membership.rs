//! Agent liveness after handoff: Alive, Suspect, Dead (seed 004 §4.6, §9.5).
