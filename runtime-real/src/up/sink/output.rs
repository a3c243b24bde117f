//! What providers say, into the datastream: each call's outcome on the
//! orchestrator's `provider` channel, a lease's own output as it comes (a
//! Docker container's), and what a provider kept of it (a Vast.ai instance
//! log) before the lease is destroyed.

use super::Shared;
use crate::datastream;
use crate::provider::Provider;
use core_fsm::ids::LogicalNodeId;
use core_fsm::plan::ProviderKind;
use core_fsm::port::{ProviderError, ProviderErrorKind};
use std::sync::Arc;

impl Shared {
    /// One provider call's outcome on the orchestrator's `provider`
    /// channel: `vastai create lease: lease 42` or `... failed (Transient):
    /// HTTP 503`. The provider's own message, which names no key (the
    /// clients keep keys out of their errors; tests/canaries.rs checks).
    pub(super) fn provider_line(
        &self,
        kind: ProviderKind,
        call: &str,
        node: Option<&LogicalNodeId>,
        outcome: Result<String, &ProviderError>,
    ) {
        let text = match outcome {
            Ok(what) => format!("{kind:?} {call}: {what}"),
            Err(e) => format!("{kind:?} {call} failed ({:?}): {}", e.kind, e.message),
        };
        let channel = datastream::channel::PROVIDER;
        self.datastream.event(channel, node, text);
    }
}

impl Shared {
    /// Follows `lease`'s own output into `node`'s file, if its provider
    /// has any and nobody follows it yet (a list may name a lease twice).
    pub(super) async fn follow(
        &self,
        provider: &dyn Provider,
        lease: Arc<core_fsm::port::LeaseFacts>,
        node: &LogicalNodeId,
        from_start: bool,
    ) {
        let id = lease.lease_id.clone();
        if !self.followed.lock().expect("followed").insert(id.clone()) {
            return;
        }
        match provider.output(lease, from_start).await {
            Some(lines) => {
                let hub = self.datastream.clone();
                tokio::spawn(provider_output(hub, node.clone(), id, lines));
            }
            None => {
                self.followed.lock().expect("followed").remove(&id);
            }
        }
    }
}

/// Writes a lease's own output into its node's file until it ends (the
/// lease is gone) or the run stops.
async fn provider_output(
    hub: datastream::Hub,
    node: LogicalNodeId,
    lease: core_fsm::ids::LeaseId,
    mut lines: crate::provider::Output,
) {
    while let Some((stream, bytes)) = lines.recv().await {
        let written = hub.with(|w| w.provider_output(&node, lease.clone(), stream, &bytes));
        if let Err(e) = written {
            crate::say::err!("drover: datastream: {node}'s provider output: {e}");
            return;
        }
    }
}

/// How long fetching a lease's last output may hold up its destroy.
const LAST_OUTPUT_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// Fetches what the provider kept of a lease's output (a Vast.ai instance
/// log) and writes it into the node's file, before the lease is destroyed.
/// Observational only: a failure, or no answer within [`LAST_OUTPUT_BOUND`],
/// is one line on the `provider` channel and the destroy goes on.
pub(super) async fn last_output(
    s: &Shared,
    provider: &dyn Provider,
    lease: Arc<core_fsm::port::LeaseFacts>,
    node: &LogicalNodeId,
) {
    let (kind, lease_id) = (lease.provider, lease.lease_id.clone());
    let fetched = tokio::time::timeout(LAST_OUTPUT_BOUND, provider.last_output(lease)).await;
    let lines = match fetched {
        Ok(None) => return,
        Ok(Some(result)) => result,
        Err(_) => Err(ProviderError {
            kind: ProviderErrorKind::Transient,
            message: format!("no answer within {} s", LAST_OUTPUT_BOUND.as_secs()),
        }),
    };
    let outcome = lines.as_ref().map(|lines| {
        let written = s.datastream.with(|w| {
            lines.iter().try_for_each(|(stream, bytes)| {
                w.provider_output(node, lease_id.clone(), *stream, bytes)
            })
        });
        if let Err(e) = written {
            crate::say::err!("drover: datastream: {node}'s provider output: {e}");
        }
        format!("{} line(s) of lease {lease_id}", lines.len())
    });
    s.provider_line(kind, "last output", Some(node), outcome);
}
