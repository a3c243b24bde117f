//! Leases: create from a chosen offer (never re-sent once it may have taken
//! effect), observe and classify, destroy (idempotent), list by label.

use super::{Observation, Offer, VastClient, classify, error, http::Failure, http::Idempotency};
use crate::label::{LABEL_LEN_MAX, LeaseLabel};
use crate::limits::Endpoint;
use crate::wire::{ErrorBody, InstanceView, bool_field, u64_field};
use core_fsm::ids::{LeaseId, LogicalNodeId, Nonce, RunId};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, LeaseFacts, LeaseGranted, ProviderError, ProviderErrorKind,
};
use reqwest::Method;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Instances per page of the v1 list (its maximum, §A.6).
const PAGE_LIMIT: u32 = 25;

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
            lease: LeaseFacts {
                provider: ProviderKind::Vastai,
                lease_id: LeaseId(format!("vastai:{contract}")),
                contract_id: contract.to_string(),
                offer_id: Some(offer.id.to_string()),
                host_id: offer.host_key(),
                nonce: request.nonce,
                metadata,
            },
            endpoint: None,
        }
    }

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

    async fn destroy_contract(&self, id: u64) -> Result<(), ProviderError> {
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

    /// Every instance labelled for `run`, walking all pages of the v1 list.
    /// A failed page fails the whole list: never an empty fleet instead.
    pub async fn list_leases(&self, run_id: RunId) -> Result<Vec<LeaseFacts>, ProviderError> {
        let instances = self.list_instances(None).await?;
        Ok(instances
            .iter()
            .filter_map(|instance| lease_of(instance, Some(run_id)))
            .collect())
    }

    /// Resolves an ambiguous create: the lease labelled with this intent, if
    /// it exists. Reads up to `visibility_reads` times, `visibility_read_interval_ms`
    /// apart, because a new contract may not be visible at once (F4). With
    /// duplicates (which drover never makes) the lowest id is returned;
    /// [`VastClient::list_leases`] shows them all.
    pub async fn find_lease(
        &self,
        run_id: RunId,
        node: &LogicalNodeId,
        nonce: Nonce,
    ) -> Result<Option<LeaseFacts>, ProviderError> {
        let label = LeaseLabel {
            run_id,
            node: node.clone(),
            nonce,
        }
        .render();
        let filter = json!({"label": {"eq": label}});
        for read in 1..=self.config.visibility_reads.max(1) {
            let instances = self.list_instances(Some(&filter)).await?;
            let found = instances
                .iter()
                .filter_map(|i| lease_of(i, Some(run_id)))
                .filter(|lease| lease.nonce == nonce && lease.metadata.get("label") == Some(&label))
                .min_by_key(|lease| lease.contract_id.parse::<u64>().unwrap_or(u64::MAX));
            if found.is_some() {
                return Ok(found);
            }
            if read < self.config.visibility_reads {
                tokio::time::sleep(std::time::Duration::from_millis(
                    self.config.visibility_read_interval_ms,
                ))
                .await;
            }
        }
        Ok(None)
    }

    /// All instances, optionally filtered server-side (`select_filters`).
    pub async fn list_instances(
        &self,
        filter: Option<&Value>,
    ) -> Result<Vec<Value>, ProviderError> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..self.config.list_pages_max {
            let mut query = vec![
                ("limit", PAGE_LIMIT.to_string()),
                ("order_by", json!([{"col": "id", "dir": "asc"}]).to_string()),
            ];
            if let Some(filter) = filter {
                query.push(("select_filters", filter.to_string()));
            }
            if let Some(token) = &token {
                query.push(("after_token", json!(token).to_string()));
            }
            let (page, next) = self.list_page(&query).await?;
            all.extend(page);
            match next {
                Some(next) if Some(&next) != token.as_ref() => token = Some(next),
                Some(_) => {
                    return Err(error(
                        ProviderErrorKind::Transient,
                        "list instances: next_token did not advance",
                    ));
                }
                None => return Ok(all),
            }
        }
        Err(error(
            ProviderErrorKind::Transient,
            format!(
                "list instances: more than {} pages",
                self.config.list_pages_max
            ),
        ))
    }

    async fn list_page(
        &self,
        query: &[(&str, String)],
    ) -> Result<(Vec<Value>, Option<String>), ProviderError> {
        let what = "list instances";
        let reply = self
            .transport
            .call(
                Endpoint::ListInstances,
                Method::GET,
                "/api/v1/instances/",
                query,
                None,
                Idempotency::Safe,
            )
            .await
            .map_err(|f| self.failure(f, what))?;
        if reply.status != 200 {
            return Err(self.refusal(reply.status, &reply.body, what));
        }
        let unreadable = |why: &str| error(ProviderErrorKind::Transient, format!("{what}: {why}"));
        let value: Value =
            serde_json::from_str(&reply.body).map_err(|_| unreadable("unreadable answer"))?;
        if bool_field(&value, "success") == Some(false) {
            return Err(self.refusal(reply.status, &reply.body, what));
        }
        let page = match value.get("instances") {
            Some(Value::Array(list)) => list.clone(),
            // Only an explicit "none found" may be read as an empty page.
            Some(Value::Null) if u64_field(&value, "instances_found") == Some(0) => Vec::new(),
            _ => return Err(unreadable("answer has no instances list")),
        };
        let next = match value.get("next_token") {
            Some(Value::String(token)) if !token.is_empty() => Some(token.clone()),
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => None,
        };
        Ok((page, next))
    }
}

fn contract_of(lease: &LeaseFacts) -> Result<u64, ProviderError> {
    lease.contract_id.trim().parse().map_err(|_| {
        error(
            ProviderErrorKind::Rejected,
            format!("lease {}: contract id is not a number", lease.lease_id),
        )
    })
}

/// The lease an instance is, if its label is drover's (and of `run`, if given).
pub(crate) fn lease_of(instance: &Value, run_id: Option<RunId>) -> Option<LeaseFacts> {
    let view = InstanceView::from_value(instance);
    let label_text = view.label.clone()?;
    let label = LeaseLabel::parse(&label_text)?;
    if run_id.is_some_and(|run| run != label.run_id) {
        return None;
    }
    let id = view.id?;
    let mut metadata = BTreeMap::new();
    metadata.insert("label".to_owned(), label_text);
    metadata.insert("node".to_owned(), label.node.0.clone());
    if let Some(gpu) = &view.gpu_name {
        metadata.insert("gpu_name".to_owned(), gpu.clone());
    }
    if let Some(price) = view.dph_total {
        metadata.insert("dollars_per_hour".to_owned(), format!("{price:.4}"));
    }
    if let Some(status) = &view.actual_status {
        metadata.insert("actual_status".to_owned(), status.clone());
    }
    Some(LeaseFacts {
        provider: ProviderKind::Vastai,
        lease_id: LeaseId(format!("vastai:{id}")),
        contract_id: id.to_string(),
        offer_id: None,
        host_id: view.machine_id.map(|m| m.to_string()),
        nonce: label.nonce,
        metadata,
    })
}
