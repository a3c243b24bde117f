//! `transport`: not yet written.
