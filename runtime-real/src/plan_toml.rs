//! `plan_toml`: not yet written.
