//! Creates: from the best unclaimed offer, never re-sent once the create may
//! have taken effect, with the F2 fallback and the F14 clean-up.

use super::{Offer, VastClient, error, http::Failure, http::Idempotency};
use crate::label::{LABEL_LEN_MAX, LeaseLabel};
use crate::limits::Endpoint;
use crate::wire::{ErrorBody, bool_field, u64_field};
use core_fsm::ids::LeaseId;
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CreateLeaseRequest, LeaseFacts, LeaseGranted, ProviderError, ProviderErrorKind,
};
use reqwest::Method;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How one create on one offer ended.
enum CreateOutcome {
    Granted(LeaseGranted),
    OfferGone(String),
    Final(ProviderError),
}

/// The `onstart` script: drover's public key into `authorized_keys` (account
/// keys may not reach new instances, F20) and no auto-tmux. Nothing secret.
pub fn onstart_script(ssh_public_key: &str) -> String {
    let key = ssh_public_key.trim();
    format!(
        "mkdir -p ~/.ssh && chmod 700 ~/.ssh && touch ~/.ssh/authorized_keys && \
         (grep -qxF '{key}' ~/.ssh/authorized_keys || echo '{key}' >> ~/.ssh/authorized_keys) && \
         chmod 600 ~/.ssh/authorized_keys; touch ~/.no_auto_tmux"
    )
}

/// The create body (§A.4) for `request` on an offer.
pub fn create_body(
    request: &CreateLeaseRequest,
    label: &str,
    ssh_public_key: &str,
    runtype: &str,
    bid_dollars: Option<f64>,
    extra_env: &BTreeMap<String, String>,
) -> Value {
    let mut env = Map::new();
    for (key, value) in extra_env {
        env.insert(key.clone(), json!(value));
    }
    for (key, value) in &request.shape.provider_labels {
        env.insert(format!("DROVER_LABEL_{key}"), json!(value));
    }
    env.insert("DROVER_RUN_ID".into(), json!(request.run_id.0.to_string()));
    env.insert("DROVER_NODE_ID".into(), json!(request.node.0));
    env.insert(
        "DROVER_LEASE_NONCE".into(),
        json!(request.nonce.0.to_string()),
    );
    let mut body = json!({
        "client_id": "me",
        "image": request.shape.image,
        "disk": request.shape.disk_gb.max(8),
        "label": label,
        "runtype": runtype,
        "onstart": onstart_script(ssh_public_key),
        "env": Value::Object(env),
        "image_login": null,
        "cancel_unavail": true,
        "target_state": "running",
        "python_utf8": false,
        "lang_utf8": false,
        "use_jupyter_lab": false,
        "force": false,
    });
    if let Some(price) = bid_dollars {
        body["price"] = json!(price);
        body["cancel_unavail"] = json!(false);
    }
    body
}

/// Whether a create refusal means the offer is gone (F2): `no_such_ask`, or
/// SkyPilot's message rule (`offer` and unavailable / already rented).
fn offer_gone(status: u16, body: &ErrorBody) -> bool {
    let msg = body.msg.to_ascii_lowercase();
    let words = [
        "unavailable",
        "not available",
        "no longer",
        "already been rented",
        "already rented",
    ];
    status == 410
        || body.error.as_deref() == Some("no_such_ask")
        || msg.contains("no_such_ask")
        || ((msg.contains("offer") || msg.contains("instance type"))
            && words.iter().any(|w| msg.contains(w)))
}

impl VastClient {
    /// Creates a lease for `request`: search, rank, create on the best offer
    /// not already claimed by this client, falling back to the next offer when
    /// one is gone (bounded). A create whose answer may have been lost is
    /// `Ambiguous`: resolve it with [`VastClient::find_lease`], never by
    /// creating again.
    pub async fn create_lease(
        &self,
        request: &CreateLeaseRequest,
    ) -> Result<LeaseGranted, ProviderError> {
        let label = LeaseLabel {
            run_id: request.run_id,
            node: request.node.clone(),
            nonce: request.nonce,
        }
        .render();
        if label.len() > LABEL_LEN_MAX || request.shape.image.is_empty() {
            return Err(error(
                ProviderErrorKind::Rejected,
                format!("label or image invalid for {label}"),
            ));
        }
        let offers = self
            .search_offers(&request.shape, &request.excluded_hosts)
            .await?;
        if offers.is_empty() {
            return Err(error(
                ProviderErrorKind::Rejected,
                format!("create {label}: no offer fits the shape"),
            ));
        }
        let mut last_gone = String::from("every fitting offer is claimed or gone");
        let mut tries = 0;
        for offer in offers {
            if tries >= self.config.offer_attempts_max {
                break;
            }
            if !self.claim(offer.id) {
                continue;
            }
            tries += 1;
            match self.create_on(&offer, request, &label).await {
                CreateOutcome::Granted(granted) => return Ok(granted),
                CreateOutcome::OfferGone(message) => {
                    self.mark_dead(offer.id);
                    last_gone = message;
                }
                CreateOutcome::Final(err) => {
                    if err.kind != ProviderErrorKind::Ambiguous {
                        self.release(offer.id);
                    }
                    return Err(err);
                }
            }
        }
        Err(error(
            ProviderErrorKind::Transient,
            format!(
                "create {label}: no offer could be rented after {tries} tries; last: {last_gone}"
            ),
        ))
    }

    /// Claims an offer for one create; false when this client already
    /// rented it or found it gone (renting it again would double-rent, F3).
    fn claim(&self, offer: u64) -> bool {
        let mut memory = self.memory.lock().expect("memory lock");
        if memory.dead.contains(&offer) || memory.claimed.contains_key(&offer) {
            return false;
        }
        memory.claimed.insert(offer, None);
        true
    }

    fn release(&self, offer: u64) {
        self.memory
            .lock()
            .expect("memory lock")
            .claimed
            .remove(&offer);
    }

    fn mark_dead(&self, offer: u64) {
        let mut memory = self.memory.lock().expect("memory lock");
        memory.claimed.remove(&offer);
        memory.dead.insert(offer);
    }

    async fn create_on(
        &self,
        offer: &Offer,
        request: &CreateLeaseRequest,
        label: &str,
    ) -> CreateOutcome {
        let bid = self.bid_dollars(&request.shape);
        let body = create_body(
            request,
            label,
            &self.config.ssh_public_key,
            &self.config.runtype,
            bid,
            &self.config.extra_env,
        );
        let path = format!("/api/v0/asks/{}/", offer.id);
        let what = format!("create {label} on offer {}", offer.id);
        let reply = match self
            .transport
            .call(
                Endpoint::Create,
                Method::PUT,
                &path,
                &[],
                Some(&body),
                Idempotency::CreateOnce,
            )
            .await
        {
            Ok(reply) => reply,
            Err(Failure::Lost(m)) => {
                return CreateOutcome::Final(error(
                    ProviderErrorKind::Ambiguous,
                    format!("{what}: answer lost ({m}); resolve by label {label}"),
                ));
            }
            Err(failure) => return CreateOutcome::Final(self.failure(failure, &what)),
        };
        let parsed: Option<Value> = serde_json::from_str(&reply.body).ok();
        let contract = parsed.as_ref().and_then(|v| u64_field(v, "new_contract"));
        let success = parsed.as_ref().and_then(|v| bool_field(v, "success"));
        if (200..300).contains(&reply.status) && success != Some(false) {
            return match contract {
                Some(id) => CreateOutcome::Granted(self.granted(id, offer, request, label)),
                // The create was processed, but its answer does not say what it made.
                None => CreateOutcome::Final(error(
                    ProviderErrorKind::Ambiguous,
                    format!("{what}: answer without new_contract; resolve by label {label}"),
                )),
            };
        }
        let refusal = ErrorBody::parse(&reply.body);
        if let Some(id) = refusal.new_contract {
            return CreateOutcome::Final(self.insufficient_bid(id, &what, &refusal).await);
        }
        if refusal.is_auth_error() || reply.status == 401 || reply.status == 403 {
            return CreateOutcome::Final(self.refusal(reply.status, &reply.body, &what));
        }
        if offer_gone(reply.status, &refusal) {
            return CreateOutcome::OfferGone(
                self.transport
                    .redact(&format!("{what}: {}", refusal.summary())),
            );
        }
        CreateOutcome::Final(self.refusal(reply.status, &reply.body, &what))
    }

    /// F14: the create failed but left a stopped instance; destroy it now.
    /// If that fails too, the outcome is ambiguous, so the orchestrator finds
    /// the instance by label and destroys it through the normal path.
    async fn insufficient_bid(
        &self,
        contract: u64,
        what: &str,
        refusal: &ErrorBody,
    ) -> ProviderError {
        let summary = self.transport.redact(&refusal.summary());
        match self.destroy_contract(contract).await {
            Ok(()) => error(
                ProviderErrorKind::Rejected,
                format!(
                    "insufficient_bid: {what}: {summary}; its stopped instance {contract} was destroyed"
                ),
            ),
            Err(e) => error(
                ProviderErrorKind::Ambiguous,
                format!(
                    "insufficient_bid: {what}: {summary}; its stopped instance {contract} is not destroyed yet ({})",
                    e.message
                ),
            ),
        }
    }

    fn granted(
        &self,
        contract: u64,
        offer: &Offer,
        request: &CreateLeaseRequest,
        label: &str,
    ) -> LeaseGranted {
        {
            let mut memory = self.memory.lock().expect("memory lock");
            memory.claimed.insert(offer.id, Some(contract));
            memory.created.insert(contract, tokio::time::Instant::now());
        }
        let mut metadata = BTreeMap::new();
        metadata.insert("label".to_owned(), label.to_owned());
        metadata.insert("gpu_name".to_owned(), offer.gpu_name.clone());
        metadata.insert(
            "dollars_per_hour".to_owned(),
            format!(
                "{:.4}",
                offer.price_dollars_per_hour(self.bid_dollars(&request.shape))
            ),
        );
        if let Some(host) = offer.host_id {
            metadata.insert("host_account".to_owned(), host.to_string());
        }
        LeaseGranted {
            lease: Arc::new(LeaseFacts {
                provider: ProviderKind::Vastai,
                lease_id: LeaseId::new(format!("vastai:{contract}")),
                contract_id: contract.to_string(),
                offer_id: Some(offer.id.to_string()),
                host_id: offer.host_key(),
                nonce: request.nonce,
                metadata,
            }),
            endpoint: None,
        }
    }
}
