//! An instance's logs (§A.9): `PUT /api/v0/instances/request_logs/{id}/`
//! with `{"tail": N}` answers a `result_url` where Vast.ai uploads the log
//! (S3 in real life); that URL answers non-200 until the upload is done, so
//! the client polls it, a bounded number of times, a fixed interval apart.

use super::instance::contract_of;
use super::{VastClient, error, http::Idempotency};
use crate::limits::Endpoint;
use crate::wire::{ErrorBody, str_field};
use core_fsm::port::{LeaseFacts, ProviderError, ProviderErrorKind};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::time::Duration;

impl VastClient {
    /// Asks for the last `tail_lines` lines of a lease's instance log and
    /// returns the URL they will be served from. An instance Vast.ai does
    /// not know is `NotFound`.
    pub async fn request_logs(
        &self,
        lease: &LeaseFacts,
        tail_lines: u32,
    ) -> Result<String, ProviderError> {
        let id = contract_of(lease)?;
        let path = format!("/api/v0/instances/request_logs/{id}/");
        let what = format!("request logs of instance {id}");
        // The official client sends the count as text.
        let body = json!({"tail": tail_lines.to_string()});
        let reply = self
            .transport
            .call(
                Endpoint::Logs,
                Method::PUT,
                &path,
                &[],
                Some(&body),
                Idempotency::Safe,
            )
            .await
            .map_err(|f| self.failure(f, &what))?;
        let refusal = ErrorBody::parse(&reply.body);
        if reply.status == 404 && !refusal.is_auth_error() {
            return Err(error(
                ProviderErrorKind::NotFound,
                format!("{what}: no such instance"),
            ));
        }
        if reply.status != 200 || refusal.success == Some(false) {
            return Err(self.refusal(reply.status, &reply.body, &what));
        }
        let value: Value = serde_json::from_str(&reply.body).map_err(|e| {
            error(
                ProviderErrorKind::Transient,
                format!("{what}: unreadable answer: {e}"),
            )
        })?;
        str_field(&value, "result_url")
            .filter(|url| !url.trim().is_empty())
            .map(|url| url.trim().to_owned())
            .ok_or_else(|| {
                error(
                    ProviderErrorKind::Transient,
                    format!("{what}: answer has no result_url"),
                )
            })
    }

    /// Fetches a log's `result_url`, polling until it answers 200 (at most
    /// `log_polls_max` fetches, `log_poll_interval_ms` apart). The API key
    /// never travels to that URL; an error names neither the URL (a signed
    /// S3 address) nor the key.
    pub async fn fetch_logs(&self, result_url: &str) -> Result<String, ProviderError> {
        let polls = self.config.log_polls_max.max(1);
        let interval = Duration::from_millis(self.config.log_poll_interval_ms);
        let mut last = String::new();
        for poll in 1..=polls {
            match self.transport.get_absolute(result_url).await {
                Ok(reply) if reply.status == 200 => return Ok(reply.body),
                Ok(reply) => last = format!("HTTP {}", reply.status),
                Err(message) => last = message,
            }
            if poll < polls {
                tokio::time::sleep(interval).await;
            }
        }
        Err(error(
            ProviderErrorKind::Transient,
            self.transport.redact(&format!(
                "instance logs: the result URL was not ready after {polls} fetch(es); last: {last}"
            )),
        ))
    }

    /// The last `tail_lines` lines of a lease's instance log, as text:
    /// [`VastClient::request_logs`], then [`VastClient::fetch_logs`].
    pub async fn instance_logs(
        &self,
        lease: &LeaseFacts,
        tail_lines: u32,
    ) -> Result<String, ProviderError> {
        let url = self.request_logs(lease, tail_lines).await?;
        self.fetch_logs(&url).await
    }
}
