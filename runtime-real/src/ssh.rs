//! `ssh`: not yet written.
