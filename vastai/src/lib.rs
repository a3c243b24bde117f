//! drover's Vast.ai provider and a fake Vast.ai server that speaks the real API.
//!
//! - [`client`]: the provider over reqwest. It mirrors the provider boundary of
//!   `core_fsm::port` (`create_lease`, `lookup_endpoint`, `destroy_lease`,
//!   `list_leases`) plus [`client::VastClient::plan_offers`] for `drover plan`.
//! - [`fake`]: an axum server serving the endpoints real clients use, with every
//!   documented quirk (scenarios F1-F21 of `shared/reference/vastai-api.md`
//!   §A.12) switchable per instance or at a seeded rate. Its instances are
//!   backed by a pluggable [`fake::InstanceBackend`].
//!
//! The wire facts both sides agree on (labels, rate-limit thresholds, the
//! instance view) live in [`label`], [`limits`] and [`wire`]. The API key is an
//! [`secret::ApiKey`], whose `Debug` and `Display` are `***`.
//!
//! The policies (shape -> filters, ranking, status classification, retries) are
//! written down in `spec/vastai.md`.

#![forbid(unsafe_code)]
#![recursion_limit = "256"]
#![warn(missing_docs)]

pub mod client;
pub mod fake;
pub mod label;
pub mod limits;
pub mod secret;
pub mod wire;

pub use client::{ClientConfig, VastClient};
pub use fake::{FakeConfig, FakeServer, serve};
pub use secret::ApiKey;
