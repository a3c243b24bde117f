//! `drover up`: the orchestrator composite, driven by the shared effect loop
//! of `driver` over real ports (tokio clock, input channel, journal, real
//! sink), in the foreground until stopped; then teardown.
//!
//! Order of business: load and validate the plan (a bad plan exits 2 before
//! anything is written), refuse a second `up` on the same state dir, open
//! the journal (records there mean: restore and adopt, never create twice;
//! unless that run ended holding nothing, which is then kept aside in
//! `previous/` while a new run starts),
//! bind the control plane, then `Start`; run until every node settled, show
//! the summary, keep running until a stop arrives (SIGINT, SIGTERM, `stop`
//! on stdin, `drover down`), deliver `Teardown`, run until torn down.

pub mod control;
mod drive;
pub mod ports;
pub mod seqs;
mod serve;
pub mod sink;
mod stop;
pub mod view;
pub mod wiring;

pub use drive::drive;

use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};
use crate::journal::{Journal, Tail};
use crate::provider::Provider;
use crate::ssh::identity;
use core_fsm::Machine;
use core_fsm::plan::{ProviderKind, RunPlan};
use core_fsm::port::{Input, JournalRecord};
use russh::keys::PrivateKey;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What `up` needs of the orchestrator composite beyond [`Machine`].
pub trait Orchestrated: Machine<Input = Input, Effect = core_fsm::port::Effect> {
    /// Every node is Dormant, Failed or Destroyed, and no session is open.
    fn is_settled(&self) -> bool;
    /// After `Teardown`: every known lease is destroyed (or its destroy
    /// failed for good).
    fn is_torn_down(&self) -> bool;
    /// Every node as its ledger says now (a restored run's view starts
    /// from it).
    fn node_rows(&self) -> Vec<control::LiveNode>;
}

/// `drover up PLAN [--frame-log PATH] [--dashboard ADDR | --no-dashboard]`;
/// returns the exit code.
pub async fn run(
    state_dir: &Path,
    plan_path: &Path,
    frame_log: Option<&Path>,
    json: bool,
    dashboard: crate::dashboard::Options,
) -> i32 {
    let (plan, pipeline) = match crate::plan_toml::load_full(plan_path) {
        Ok(loaded) => loaded,
        Err(e) => {
            crate::say::err!("drover: {e}");
            return EXIT_CONFIG;
        }
    };
    // The flag wins over the plan's `[observability] frame_log`.
    let frame_log = match frame_log {
        Some(path) => Some(path.to_owned()),
        None => match crate::plan_toml::observability::frame_log(plan_path) {
            Ok(path) => path,
            Err(e) => {
                crate::say::err!("drover: {e}");
                return EXIT_CONFIG;
            }
        },
    };
    let pipeline = match pipeline {
        None => None,
        Some(spec) => match crate::pipeline::model_file(&spec, state_dir, true).await {
            Err(crate::pipeline::PrepareError::Fetch(e)) => {
                crate::say::err!("drover: {e}");
                return EXIT_FAILURE;
            }
            Err(crate::pipeline::PrepareError::Plan(e)) => {
                crate::say::err!("drover: {}: {e}", plan_path.display());
                return EXIT_CONFIG;
            }
            Ok(path) => match crate::pipeline::prepare(&plan, spec, &path) {
                Ok(prepared) => Some(prepared),
                Err(e) => {
                    crate::say::err!("drover: {}: {e}", plan_path.display());
                    return EXIT_CONFIG;
                }
            },
        },
    };
    let liveness = match crate::plan_toml::liveness::load(plan_path) {
        Ok(config) => config,
        Err(e) => {
            crate::say::err!("drover: {e}");
            return EXIT_CONFIG;
        }
    };
    if let Err(e) = crate::provider::check_plan(&plan).await {
        crate::say::err!("drover: {e}");
        return EXIT_CONFIG;
    }
    let previous = match Journal::read(state_dir) {
        Ok(recovered) => recovered,
        Err(e) => {
            crate::say::err!(
                "drover: cannot read the journal in {}: {e}",
                state_dir.display()
            );
            return EXIT_FAILURE;
        }
    };
    if let Some(JournalRecord::RunStarted { run_id }) = previous.records.first()
        && *run_id != plan.run_id
    {
        crate::say::err!(
            "drover: {} holds {run_id}, the plan is {}; use another --state-dir or `drover down` first",
            state_dir.display(),
            plan.run_id
        );
        return EXIT_CONFIG;
    }
    if let Some(pid) = control::running_pid(state_dir) {
        crate::say::err!(
            "drover: another `drover up` (pid {pid}) runs on {}",
            state_dir.display()
        );
        return EXIT_FAILURE;
    }
    let archive = match frame_log
        .as_deref()
        .map(crate::datastream::archive::Archive::open)
    {
        None => None,
        Some(Ok(archive)) => Some(archive),
        Some(Err(e)) => {
            crate::say::err!("drover: {e}");
            return EXIT_CONFIG;
        }
    };
    let datastream = crate::datastream::Writer::with(state_dir, plan.run_id, archive);
    let datastream = crate::datastream::Hub::new(datastream);
    // From here, what `up` says is in the datastream too.
    let said = crate::say::attach(datastream.clone());
    let controls = crate::dashboard::controls::Controls::default();
    let dashboard =
        match crate::dashboard::for_up(state_dir, plan_path, dashboard, json, controls.clone())
            .await
        {
            Ok(served) => served,
            Err(code) => {
                said.detach().await;
                return code;
            }
        };
    let code = match wiring::up(
        state_dir,
        plan,
        (pipeline, liveness),
        (datastream, controls),
        json,
    )
    .await
    {
        Ok(code) => code,
        Err(e) => {
            crate::say::err!("drover: {e:#}");
            let _ = std::fs::remove_file(control::pid_file(state_dir));
            EXIT_FAILURE
        }
    };
    crate::dashboard::stop(dashboard).await;
    said.detach().await;
    code
}

/// Everything `up` built that the run needs, besides the machine.
pub struct Runtime<J> {
    /// The state dir.
    pub state_dir: PathBuf,
    /// The plan.
    pub plan: RunPlan,
    /// The SSH identity.
    pub key: Arc<PrivateKey>,
    /// `--json`.
    pub json: bool,
    /// The control plane (join tokens, stopping agents).
    pub joins: Arc<J>,
    /// The lease book the journal's disk keeps (restored records folded in).
    pub leases: Arc<ports::Leases>,
    /// Inputs the control plane produces (`AgentJoined`), forwarded into
    /// the loop.
    pub control_inputs: mpsc::Receiver<Input>,
    /// The pipeline host's parts.
    pub host: HostParts,
    /// The datastream, shared by the sink and the control plane's log
    /// streams.
    pub datastream: crate::datastream::Hub,
    /// Where the dashboard's controls reach the loop.
    pub controls: crate::dashboard::controls::Controls,
}

/// What the pipeline host (membership from the first join; the run of the
/// model, if the plan has one, once every node is handed off) needs.
pub struct HostParts {
    /// The model to serve, if the plan has a pipeline.
    pub prepared: Option<crate::pipeline::Prepared>,
    /// The control plane the host speaks through.
    pub control: Arc<crate::transport::ControlPlane>,
    /// Where control-plane events reach the host.
    pub tap: crate::pipeline::Tap,
}

/// Prepares the state dir (pid file, plan copy, journal, identity) and
/// returns the open journal with the records a restore starts from, and
/// the SSH identity.
pub fn prepare_state(
    state_dir: &Path,
    plan: &RunPlan,
) -> anyhow::Result<(Journal, Vec<JournalRecord>, Arc<PrivateKey>)> {
    std::fs::create_dir_all(state_dir)?;
    crate::provider::local::write_atomic(
        &control::pid_file(state_dir),
        std::process::id().to_string().as_bytes(),
    )?;
    crate::provider::local::write_atomic(
        &crate::state_dir::StateDir::at(state_dir).plan(),
        &serde_json::to_vec_pretty(&crate::state_dir::plan_copy(plan))?,
    )?;
    let (journal, recovered) = Journal::open(state_dir)?;
    if recovered.tail != Tail::Clean {
        crate::say::err!(
            "drover: journal: {} (the records before it are used)",
            recovered.tail
        );
    }
    let key = identity::load_or_create(state_dir)?;
    if !recovered.records.is_empty() && run_is_over(plan, &recovered.records) {
        // Nothing to adopt or destroy: this `up` is a new run. The ended
        // run's journal and logs are kept aside, not resumed.
        drop(journal);
        let kept = archive_ended_run(state_dir)?;
        crate::say::err!(
            "drover: the previous run in this state dir ended with every lease destroyed; \
             its journal and logs are in {}; starting a new run",
            kept.display()
        );
        let (journal, recovered) = Journal::open(state_dir)?;
        return Ok((journal, recovered.records, key));
    }
    Ok((journal, recovered.records, key))
}

/// Whether the journaled run holds nothing: every lease it knew of is
/// destroyed and no intent is unresolved (what the composite restored from
/// these records says).
pub fn run_is_over(plan: &RunPlan, records: &[JournalRecord]) -> bool {
    let config = core_fsm::orchestrator::Config {
        plan: plan.clone(),
        seed: 0,
        membership: None,
    };
    core_fsm::orchestrator::Orchestrator::restore(config, records).holds_no_lease()
}

/// Where an ended run's journal and datastream are kept: `previous/` in
/// the state dir (the run before it, if any, is replaced).
pub fn previous_run_dir(state_dir: &Path) -> PathBuf {
    crate::state_dir::StateDir::at(state_dir).previous_run()
}

/// Moves the journal and the datastream of an ended run to
/// [`previous_run_dir`]; returns that folder.
fn archive_ended_run(state_dir: &Path) -> anyhow::Result<PathBuf> {
    let kept = previous_run_dir(state_dir);
    if kept.exists() {
        std::fs::remove_dir_all(&kept)?;
    }
    std::fs::create_dir_all(&kept)?;
    let journal = Journal::path_in(state_dir);
    std::fs::rename(&journal, kept.join(crate::state_dir::JOURNAL))?;
    let datastream = crate::datastream::dir_in(state_dir);
    if datastream.exists() {
        std::fs::rename(&datastream, kept.join(crate::state_dir::DATASTREAM))?;
    }
    Ok(kept)
}

/// The providers of the run in `state_dir`, from the plan copy there (see
/// [`crate::provider::for_state_dir`]); `up` builds its own from its plan.
pub fn providers(state_dir: &Path) -> anyhow::Result<BTreeMap<ProviderKind, Arc<dyn Provider>>> {
    crate::provider::for_state_dir(state_dir).map_err(anyhow::Error::msg)
}
