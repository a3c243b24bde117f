//! Lists: every instance of a run by label (v1 list, all pages, a failed
//! page fails the list), and the lookup that resolves an ambiguous create.

use super::{VastClient, error, http::Idempotency};
use crate::label::LeaseLabel;
use crate::limits::Endpoint;
use crate::wire::{InstanceView, bool_field, u64_field};
use core_fsm::ids::{LeaseId, LogicalNodeId, Nonce, RunId};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{LeaseFacts, ProviderError, ProviderErrorKind};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Instances per page of the v1 list (its maximum, §A.6).
const PAGE_LIMIT: u32 = 25;

impl VastClient {
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
    metadata.insert("node".to_owned(), label.node.as_str().to_owned());
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
        lease_id: LeaseId::new(format!("vastai:{id}")),
        contract_id: id.to_string(),
        offer_id: None,
        host_id: view.machine_id.map(|m| m.to_string()),
        nonce: label.nonce,
        metadata,
    })
}
