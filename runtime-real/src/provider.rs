//! `provider`: not yet written.
