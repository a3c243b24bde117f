//! One instance: observe and classify it (show-instance), destroy it
//! (idempotent on 404 / `no_such_instance`).

use super::{Observation, VastClient, classify, error, http::Idempotency};
use crate::limits::Endpoint;
use crate::wire::{ErrorBody, InstanceView, u64_field};
use core_fsm::port::{EndpointStatus, LeaseFacts, ProviderError, ProviderErrorKind};
use reqwest::Method;
use serde_json::{Value, json};

impl VastClient {
    /// Looks at a lease once and classifies it with a typed failure reason.
    pub async fn observe(&self, lease: &LeaseFacts) -> Result<Observation, ProviderError> {
        let id = contract_of(lease)?;
        let path = format!("/api/v0/instances/{id}/");
        let what = format!("show instance {id}");
        let query = [("owner", "me".to_owned())];
        let reply = self
            .transport
            .call(
                Endpoint::ShowInstance,
                Method::GET,
                &path,
                &query,
                None,
                Idempotency::Safe,
            )
            .await
            .map_err(|f| self.failure(f, &what))?;
        let refusal = ErrorBody::parse(&reply.body);
        if reply.status == 404 && !refusal.is_auth_error() {
            return Ok(self.absent(id));
        }
        if reply.status != 200 {
            return Err(self.refusal(reply.status, &reply.body, &what));
        }
        let value: Value = serde_json::from_str(&reply.body).map_err(|e| {
            error(
                ProviderErrorKind::Transient,
                format!("{what}: unreadable answer: {e}"),
            )
        })?;
        let instance = match value.get("instances") {
            None => {
                return Err(error(
                    ProviderErrorKind::Transient,
                    format!("{what}: answer has no instances key"),
                ));
            }
            Some(Value::Null) => return Ok(self.absent(id)),
            // Some versions answer with a one-element list.
            Some(Value::Array(list)) => {
                match list.iter().find(|i| u64_field(i, "id") == Some(id)) {
                    Some(instance) => instance.clone(),
                    None => return Ok(self.absent(id)),
                }
            }
            Some(instance) => instance.clone(),
        };
        let view = InstanceView::from_value(&instance);
        Ok(classify(
            &view,
            self.config.ssh_route,
            &self.config.ssh_user,
        ))
    }

    /// `{"instances": null}` or 404: not visible yet right after our own
    /// create (F4), gone otherwise (F18).
    fn absent(&self, id: u64) -> Observation {
        let memory = self.memory.lock().expect("memory lock");
        match memory.created.get(&id) {
            Some(at) if at.elapsed().as_millis() < u128::from(self.config.visibility_grace_ms) => {
                Observation::Pending {
                    detail: "created, not visible yet".to_owned(),
                }
            }
            _ => Observation::Gone,
        }
    }

    /// The port-level answer of [`VastClient::observe`]; a failure's reason
    /// reads `code: detail` with a [`super::FailureReason`] code.
    pub async fn lookup_endpoint(
        &self,
        lease: &LeaseFacts,
    ) -> Result<EndpointStatus, ProviderError> {
        self.observe(lease)
            .await
            .map(Observation::into_endpoint_status)
    }

    /// Destroys a lease; a lease Vast.ai no longer knows is already destroyed.
    pub async fn destroy_lease(&self, lease: &LeaseFacts) -> Result<(), ProviderError> {
        self.destroy_contract(contract_of(lease)?).await
    }

    pub(crate) async fn destroy_contract(&self, id: u64) -> Result<(), ProviderError> {
        let path = format!("/api/v0/instances/{id}/");
        let what = format!("destroy instance {id}");
        let reply = self
            .transport
            .call(
                Endpoint::Destroy,
                Method::DELETE,
                &path,
                &[],
                Some(&json!({})),
                Idempotency::Safe,
            )
            .await
            .map_err(|f| self.failure(f, &what))?;
        let body = ErrorBody::parse(&reply.body);
        let missing = matches!(
            body.error.as_deref(),
            Some("no_such_instance" | "not_found")
        );
        let done = (reply.status == 200 && (body.success != Some(false) || missing))
            || (reply.status == 404 && !body.is_auth_error());
        if !done {
            return Err(self.refusal(reply.status, &reply.body, &what));
        }
        let mut memory = self.memory.lock().expect("memory lock");
        memory.created.remove(&id);
        memory.claimed.retain(|_, contract| *contract != Some(id));
        Ok(())
    }
}

pub(crate) fn contract_of(lease: &LeaseFacts) -> Result<u64, ProviderError> {
    lease.contract_id.trim().parse().map_err(|_| {
        error(
            ProviderErrorKind::Rejected,
            format!("lease {}: contract id is not a number", lease.lease_id),
        )
    })
}
