//! `journal`: not yet written.
