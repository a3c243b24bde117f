//! `down`'s effect sink. A composite restored from the journal and torn
//! down only destroys leases and lists them (to resolve open intents): those
//! two effects become spawned provider calls whose answers come back on the
//! input channel with the effect's `OpId`, as in `up`'s sink. `down` runs no
//! control plane and opens no SSH session, so any other effect that asks for
//! an answer is refused (answered with an error that says so) and the rest
//! (join revocations, log lines, stage changes) are ignored.

use crate::provider::Providers;
use core_fsm::Instant;
use core_fsm::ids::LeaseId;
use core_fsm::plan::ProviderKind;
use core_fsm::port::{Effect, Input, ProviderError, ProviderErrorKind, SshError, SshErrorKind};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Why an effect other than a destroy or a list is refused.
const REFUSED: &str = "`drover down` only destroys and lists leases";

/// The last error of what failed and has not succeeded since.
#[derive(Default)]
pub(super) struct Failures {
    /// Each lease whose latest destroy failed, with the provider's message.
    pub(super) destroys: BTreeMap<LeaseId, String>,
    /// Each provider whose latest list failed, with its message.
    pub(super) lists: BTreeMap<ProviderKind, String>,
}

/// The sink the driver dispatches to in `down`.
pub(super) struct DownSink {
    state_dir: PathBuf,
    providers: Providers,
    tx: mpsc::Sender<Input>,
    failures: Arc<Mutex<Failures>>,
    /// `--json`: stdout carries only the per-lease events and the report.
    json: bool,
}

impl DownSink {
    /// A sink calling `providers`, answering on `tx`.
    pub(super) fn new(
        state_dir: PathBuf,
        providers: Providers,
        tx: mpsc::Sender<Input>,
        json: bool,
    ) -> Self {
        DownSink {
            state_dir,
            providers,
            tx,
            failures: Arc::default(),
            json,
        }
    }

    /// What failed and has not succeeded since, shared with the tasks.
    pub(super) fn failures(&self) -> Arc<Mutex<Failures>> {
        self.failures.clone()
    }

    /// Sends what `answer` yields to the loop from a task of its own (the
    /// loop is the channel's only reader).
    fn answer(&self, answer: impl std::future::Future<Output = Input> + Send + 'static) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            // A closed channel means the loop has stopped; the answer is
            // nobody's any more.
            let _ = tx.send(answer.await).await;
        });
    }
}

impl driver::EffectSink for DownSink {
    async fn dispatch(&mut self, _now: Instant, effect: Effect) {
        let refused = ProviderError {
            kind: ProviderErrorKind::Rejected,
            message: REFUSED.to_owned(),
        };
        match effect {
            Effect::Persist(_) => unreachable!("the driver completes Persist itself"),
            Effect::DestroyLease { op, lease } => {
                let provider = crate::provider::of_kind(&self.providers, lease.provider);
                let (state_dir, failures) = (self.state_dir.clone(), self.failures.clone());
                self.answer(async move {
                    let lease_id = lease.lease_id.clone();
                    let result = match provider {
                        Ok(p) => p.destroy_lease(lease).await,
                        Err(e) => Err(e),
                    };
                    let mut failures = failures.lock().expect("failures");
                    match &result {
                        Err(e) if e.kind != ProviderErrorKind::NotFound => {
                            failures.destroys.insert(lease_id, e.message.clone());
                        }
                        _ => {
                            failures.destroys.remove(&lease_id);
                            crate::ssh::forget_host(&state_dir, &lease_id);
                        }
                    }
                    Input::LeaseDestroyed { op, result }
                })
            }
            Effect::ListLeases {
                op,
                run_id,
                provider: kind,
            } => {
                if !self.json {
                    // Resolving an intent can take several lists spaced by
                    // the create timeout: say what `down` is waiting on.
                    crate::stdout::say(&format!(
                        "looking for the lease of a create a crash left unanswered: listing the {} leases of {run_id} (an intent is given up only after {} clean lists, spaced by the create timeout)",
                        format!("{kind:?}").to_lowercase(),
                        core_fsm::node::Config::default().list_misses_max
                    ));
                }
                let provider = crate::provider::of_kind(&self.providers, kind);
                let failures = self.failures.clone();
                self.answer(async move {
                    let result = match provider {
                        Ok(p) => p.list_leases(run_id).await,
                        Err(e) => Err(e),
                    };
                    let mut failures = failures.lock().expect("failures");
                    match &result {
                        // The provider's message names itself and its API.
                        Err(e) => failures.lists.insert(kind, e.message.clone()),
                        Ok(_) => failures.lists.remove(&kind),
                    };
                    Input::LeasesListed { op, result }
                })
            }
            Effect::CreateLease { op, .. } => self.answer(async move {
                let result = Err(refused);
                Input::LeaseCreated { op, result }
            }),
            Effect::LookupEndpoint { op, .. } => self.answer(async move {
                let result = Err(refused);
                Input::EndpointLooked { op, result }
            }),
            Effect::SshConnect { op, .. } => self.answer(async move {
                let result = Err(ssh_refused());
                Input::SshConnected { op, result }
            }),
            Effect::SshExec { op, .. } => self.answer(async move {
                let result = Err(ssh_refused());
                Input::SshExited { op, result }
            }),
            Effect::SshClose { op, .. } => self.answer(async move { Input::SshClosed { op } }),
            // No control plane runs (the tokens of a dead `up` died with
            // it), nothing is bootstrapped, and the per-lease lines say what
            // `down` did.
            // `down`'s composite has no pipeline host: no agent is watched.
            Effect::RevokeJoin(_)
            | Effect::Log(_)
            | Effect::NodeChanged { .. }
            | Effect::Pipeline(_) => {}
        }
    }
}

fn ssh_refused() -> SshError {
    SshError {
        kind: SshErrorKind::Other,
        message: REFUSED.to_owned(),
    }
}
