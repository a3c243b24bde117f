//! The real effect sink: every effect other than `Persist` becomes a spawned
//! task (provider call, SSH connect/exec/close) whose answer comes back on
//! the input channel with the effect's `OpId`, or a local action (revoke a
//! join token, append a log line, show a node's new stage). A destroy first
//! stops the node's agent over the control plane.

use super::ports::Leases;
use super::view::LiveView;
use crate::datastream;
use crate::provider::{BoxFuture, Provider};
use crate::ssh;
use core_fsm::Instant;
use core_fsm::ids::{LeaseId, LogicalNodeId, RunId, SessionId};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    Effect, Input, JoinBinding, ProviderError, ProviderErrorKind, SshError, SshErrorKind,
};
use russh::keys::PrivateKey;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

mod output;
use output::last_output;

/// What the sink needs of the control plane: its address, join tokens, and
/// a way to stop a node's agent.
pub trait Joins: Send + Sync {
    /// What `${ORCH_ADDR}` becomes.
    fn addr_string(&self) -> String;
    /// A fresh one-time token for `binding` (a secret).
    fn mint(&self, binding: JoinBinding) -> String;
    /// Revokes any unused token of `binding`.
    fn revoke(&self, binding: &JoinBinding);
    /// Tells `node`'s connected agent to shut down and waits, bounded, for
    /// its connection to end; at once when none is connected. Called before
    /// the node's lease is destroyed: the agent leaves cleanly (exit 0, its
    /// connection closed by itself) instead of being killed mid-connection.
    fn stop_agent(&self, node: &LogicalNodeId) -> BoxFuture<'_, ()>;
}

/// Shared between the sink and its tasks.
struct Shared {
    state_dir: PathBuf,
    run_id: RunId,
    key: Arc<PrivateKey>,
    providers: BTreeMap<ProviderKind, Arc<dyn Provider>>,
    joins: Arc<dyn Joins>,
    tx: mpsc::Sender<Input>,
    sessions: Mutex<BTreeMap<SessionId, Session>>,
    leases: Arc<Leases>,
    /// The `provider` channel's lines go here (observational only).
    datastream: datastream::Hub,
    /// Leases whose own output is followed (once each).
    followed: Mutex<std::collections::BTreeSet<LeaseId>>,
}

/// One bootstrap session's connection (once connected) and its lease.
struct Session {
    lease: LeaseId,
    connection: Option<Arc<ssh::Connection>>,
}

/// The sink the driver dispatches to.
pub struct RealSink {
    shared: Arc<Shared>,
    datastream: datastream::Hub,
    view: Arc<Mutex<LiveView>>,
    /// The last lifecycle line of each node (a repeat is not written again).
    lifecycle: BTreeMap<LogicalNodeId, String>,
    /// The pipeline host's effects (membership's and the run's).
    host: crate::pipeline::host::HostSink,
}

/// What a [`RealSink`] is built from.
pub struct SinkParts {
    /// The state dir.
    pub state_dir: PathBuf,
    /// The run.
    pub run_id: RunId,
    /// The SSH identity.
    pub key: Arc<PrivateKey>,
    /// Providers by kind.
    pub providers: BTreeMap<ProviderKind, Arc<dyn Provider>>,
    /// The control plane.
    pub joins: Arc<dyn Joins>,
    /// Where answers go.
    pub tx: mpsc::Sender<Input>,
    /// The live view the sink keeps current.
    pub view: Arc<Mutex<LiveView>>,
    /// Which node each lease belongs to (kept by the journal's disk).
    pub leases: Arc<Leases>,
    /// The datastream, shared with the control plane's log streams.
    pub datastream: datastream::Hub,
    /// The pipeline host's effects.
    pub host: crate::pipeline::host::HostSink,
}

impl RealSink {
    /// A sink from its parts.
    pub fn new(parts: SinkParts) -> RealSink {
        let datastream = parts.datastream;
        let shared = Shared {
            state_dir: parts.state_dir,
            run_id: parts.run_id,
            key: parts.key,
            providers: parts.providers,
            joins: parts.joins,
            tx: parts.tx,
            sessions: Mutex::new(BTreeMap::new()),
            leases: parts.leases,
            datastream: datastream.clone(),
            followed: Mutex::new(std::collections::BTreeSet::new()),
        };
        RealSink {
            shared: Arc::new(shared),
            datastream,
            view: parts.view,
            lifecycle: BTreeMap::new(),
            host: parts.host,
        }
    }

    /// Syncs the datastream files (before exit).
    pub fn flush(&mut self) {
        if let Err(e) = self.datastream.with(|w| w.flush()) {
            crate::say::err!("drover: datastream flush: {e}");
        }
    }

    /// SSH connections still open (a settled run has none).
    pub fn open_sessions(&self) -> usize {
        self.shared
            .sessions
            .lock()
            .expect("sessions")
            .values()
            .filter(|s| s.connection.is_some())
            .count()
    }

    fn spawn<F>(&self, task: impl FnOnce(Arc<Shared>) -> F)
    where
        F: std::future::Future<Output = Option<Input>> + Send + 'static,
    {
        let shared = self.shared.clone();
        let future = task(shared.clone());
        tokio::spawn(async move {
            if let Some(input) = future.await {
                // A closed channel means the loop has stopped; the answer is
                // nobody's any more.
                let _ = shared.tx.send(input).await;
            }
        });
    }
}

impl driver::EffectSink for RealSink {
    async fn dispatch(&mut self, now: Instant, effect: Effect) {
        match effect {
            Effect::Persist(_) => unreachable!("the driver completes Persist itself"),
            Effect::CreateLease { op, request } => self.spawn(|s| async move {
                let (node, kind) = (request.node.clone(), request.provider);
                let result = match s.provider(request.provider) {
                    Ok(p) => {
                        let result = p.create_lease(request).await;
                        if let Ok(granted) = &result {
                            s.follow(p.as_ref(), granted.lease.clone(), &node, true)
                                .await;
                        }
                        result
                    }
                    Err(e) => Err(e),
                };
                let outcome = result
                    .as_ref()
                    .map(|g| format!("lease {}", g.lease.lease_id));
                s.provider_line(kind, "create lease", Some(&node), outcome);
                Some(Input::LeaseCreated { op, result })
            }),
            Effect::LookupEndpoint { op, lease } => self.spawn(|s| async move {
                let result = match s.provider(lease.provider) {
                    Ok(p) => p.lookup_endpoint(lease).await,
                    Err(e) => Err(e),
                };
                Some(Input::EndpointLooked { op, result })
            }),
            Effect::DestroyLease { op, lease } => self.spawn(|s| async move {
                let lease_id = lease.lease_id.clone();
                if let Some(node) = s.leases.node_of(&lease_id) {
                    s.joins.stop_agent(&node).await;
                }
                let kind = lease.provider;
                let result = match s.provider(lease.provider) {
                    Ok(p) => {
                        if let Some(node) = s.leases.node_of(&lease_id) {
                            last_output(&s, p.as_ref(), lease.clone(), &node).await;
                        }
                        p.destroy_lease(lease).await
                    }
                    Err(e) => Err(e),
                };
                let node = s.leases.node_of(&lease_id);
                let outcome = result
                    .as_ref()
                    .map(|()| format!("lease {lease_id} destroyed"));
                s.provider_line(kind, "destroy lease", node.as_ref(), outcome);
                if matches!(
                    &result,
                    Ok(())
                        | Err(ProviderError {
                            kind: ProviderErrorKind::NotFound,
                            ..
                        })
                ) {
                    ssh::forget_host(&s.state_dir, &lease_id);
                }
                Some(Input::LeaseDestroyed { op, result })
            }),
            Effect::ListLeases {
                op,
                run_id,
                provider,
            } => self.spawn(|s| async move {
                let result = match s.provider(provider) {
                    Ok(p) => {
                        let result = p.list_leases(run_id).await;
                        // Leases of this run's nodes (adopted after a
                        // restart, named by the journal or their label):
                        // their output is followed again, from now on.
                        for lease in result.iter().flatten() {
                            let labelled = lease
                                .metadata
                                .get("node")
                                .map(|n| LogicalNodeId::from(n.as_str()));
                            if let Some(node) = s.leases.node_of(&lease.lease_id).or(labelled) {
                                s.follow(p.as_ref(), lease.clone(), &node, false).await;
                            }
                        }
                        result
                    }
                    Err(e) => Err(e),
                };
                let outcome = result.as_ref().map(|l| format!("{} lease(s)", l.len()));
                s.provider_line(provider, "list leases", None, outcome);
                Some(Input::LeasesListed { op, result })
            }),
            Effect::SshConnect {
                op,
                session,
                endpoint,
                lease_id,
            } => {
                let entry = Session {
                    lease: lease_id.clone(),
                    connection: None,
                };
                self.shared
                    .sessions
                    .lock()
                    .expect("sessions")
                    .insert(session, entry);
                self.spawn(|s| async move {
                    let key = match s.leases.key_file(&lease_id) {
                        Some(path) => ssh::load_key(std::path::Path::new(&path)),
                        None => Ok(s.key.clone()),
                    };
                    let result = match key {
                        Ok(key) => ssh::connect(&s.state_dir, &endpoint, &lease_id, key).await,
                        Err(e) => Err(e),
                    };
                    let result = result.map(|connection| s.attach(session, connection));
                    Some(Input::SshConnected { op, result })
                })
            }
            Effect::SshExec {
                op,
                session,
                command,
                purpose: _,
                join,
            } => self.spawn(|s| async move {
                Some(Input::SshExited {
                    op,
                    result: s.exec(op, session, &command, join).await,
                })
            }),
            Effect::SshClose { op, session } => self.spawn(|s| async move {
                let entry = s.sessions.lock().expect("sessions").remove(&session);
                if let Some(connection) = entry.and_then(|e| e.connection) {
                    // Commands still running on it (a tail) end with it.
                    connection.close().await;
                }
                Some(Input::SshClosed { op })
            }),
            Effect::RevokeJoin(binding) => self.shared.joins.revoke(&binding),
            Effect::Log(record) => {
                if let Err(e) = self.datastream.with(|w| w.append(&record)) {
                    crate::say::err!("drover: datastream write for {}: {e}", record.node);
                }
            }
            Effect::NodeChanged {
                node,
                stage,
                ready,
                failed_reason,
            } => {
                let lease = self.shared.leases.lease_of(&node);
                let text = lifecycle_line(&node, stage, ready, failed_reason.as_deref());
                if self.lifecycle.get(&node) != Some(&text) {
                    self.lifecycle.insert(node.clone(), text.clone());
                    let channel = datastream::channel::LIFECYCLE;
                    self.datastream.event(channel, Some(&node), text);
                }
                let node = super::control::LiveNode {
                    id: node,
                    stage,
                    ready,
                    failed_reason,
                    liveness: None,
                    last_heartbeat_ms: None,
                };
                self.view.lock().expect("view").changed(node, lease);
            }
            Effect::Pipeline(effect) => {
                driver::EffectSink::dispatch(&mut self.host, now, *effect).await
            }
        }
    }
}

/// A node's lifecycle change as a datastream line (`lifecycle` channel).
fn lifecycle_line(
    node: &LogicalNodeId,
    stage: core_fsm::node::Lifecycle,
    ready: bool,
    failed: Option<&str>,
) -> String {
    let mut text = format!("{node}: {stage:?}");
    if ready {
        text.push_str(", ready");
    }
    if let Some(reason) = failed {
        text.push_str(&format!(", failed: {reason}"));
    }
    text
}

impl Shared {
    fn provider(&self, kind: ProviderKind) -> Result<Arc<dyn Provider>, ProviderError> {
        crate::provider::of_kind(&self.providers, kind)
    }

    /// Keeps the connection for the session; a session closed meanwhile
    /// (its close raced the connect) gets the connection dropped.
    fn attach(&self, session: SessionId, connection: ssh::Connection) {
        let mut sessions = self.sessions.lock().expect("sessions");
        if let Some(entry) = sessions.get_mut(&session) {
            entry.connection = Some(Arc::new(connection));
        }
    }

    async fn exec(
        &self,
        op: core_fsm::ids::OpId,
        session: SessionId,
        command: &str,
        join: Option<JoinBinding>,
    ) -> Result<i32, SshError> {
        let entry = {
            let sessions = self.sessions.lock().expect("sessions");
            sessions
                .get(&session)
                .map(|e| (e.lease.clone(), e.connection.clone()))
        };
        let Some((lease, Some(connection))) = entry else {
            return Err(SshError {
                kind: SshErrorKind::Other,
                message: format!("{session} has no connection"),
            });
        };
        let node = match &join {
            Some(binding) => Some(binding.node.clone()),
            None => self.leases.node_of(&lease),
        };
        let token = join.map(|binding| self.joins.mint(binding));
        let values = ssh::Placeholders {
            orch_addr: &self.joins.addr_string(),
            node: node.as_ref().map(|n| n.as_str()).unwrap_or(""),
            run_id: &self.run_id.0.to_string(),
            lease_id: lease.as_str(),
            join_token: token.as_deref(),
        };
        let command = ssh::substitute(command, &values);
        let result = connection
            .exec(op, &command, token.as_deref(), &self.tx)
            .await;
        // An error message never carries the token, even if russh echoed it.
        result.map_err(|e| SshError {
            message: ssh::redact(e.message, token.as_deref()),
            ..e
        })
    }
}
