//! Provider adapters: stateless answers to create, look up, destroy and list
//! leases. Every adapter (local now, vastai and docker later) implements
//! [`Provider`]; the effect sink turns its answers into inputs.

pub mod local;

use core_fsm::ids::RunId;
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError, ProviderErrorKind,
};
use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future (keeps [`Provider`] usable as a trait object).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What every provider adapter answers.
pub trait Provider: Send + Sync {
    /// Which provider this is.
    fn kind(&self) -> ProviderKind;

    /// Creates a lease labelled with the request's run and nonce.
    fn create_lease(
        &self,
        request: CreateLeaseRequest,
    ) -> BoxFuture<'_, Result<LeaseGranted, ProviderError>>;

    /// Whether the lease is reachable over SSH yet.
    fn lookup_endpoint(
        &self,
        lease: LeaseFacts,
    ) -> BoxFuture<'_, Result<EndpointStatus, ProviderError>>;

    /// Destroys the lease; destroying a lease that no longer exists answers
    /// `NotFound`, which callers treat as done.
    fn destroy_lease(&self, lease: LeaseFacts) -> BoxFuture<'_, Result<(), ProviderError>>;

    /// Every live lease labelled with `run_id` (adoption after a restart).
    fn list_leases(&self, run_id: RunId) -> BoxFuture<'_, Result<Vec<LeaseFacts>, ProviderError>>;
}

/// The label a provider writes on a lease: `drover-run=<run>;nonce=<nonce>`.
pub fn label(run_id: RunId, nonce: core_fsm::ids::Nonce) -> String {
    format!("drover-run={};nonce={}", run_id.0, nonce.0)
}

/// Reads a label written by [`label`].
pub fn parse_label(text: &str) -> Option<(RunId, core_fsm::ids::Nonce)> {
    let mut run = None;
    let mut nonce = None;
    for part in text.trim().split(';') {
        match part.split_once('=') {
            Some(("drover-run", v)) => run = v.parse().ok(),
            Some(("nonce", v)) => nonce = v.parse().ok(),
            _ => {}
        }
    }
    Some((RunId(run?), core_fsm::ids::Nonce(nonce?)))
}

/// A provider error of `kind` with a message.
pub fn error(kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
    ProviderError {
        kind,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_fsm::ids::Nonce;

    #[test]
    fn labels_round_trip() {
        let text = label(RunId(42), Nonce(7));
        assert_eq!(text, "drover-run=42;nonce=7");
        assert_eq!(parse_label(&text), Some((RunId(42), Nonce(7))));
        assert_eq!(parse_label("drover-run=42"), None);
    }
}
