//! [`StateDir`]: every path under the state dir (`--state-dir`, default
//! `.drover/`) is named here, and nowhere else.
//!
//! ```text
//! journal.bin            the journal (length + CRC framed records)
//! datastream/<node>.ndjson   every log line of a node
//! keys/                  id_ed25519(.pub): the SSH identity; iroh.key
//! known_hosts/<lease>    the host key pinned for a lease
//! nodes/                 the local provider's nodes (next, <n>/label, ...)
//! static/<lease>         the static provider's reservations
//! control/               the control plane's port and admitted agents
//! plan.json              the plan `up` runs, without its boot commands, for `drover down`'s providers
//! up.pid, live.json      a running `up` and its live view
//! prompt.addr            the prompt RPC's address while a pipeline serves
//! pipeline.json          the pipeline's stages and serving figures, rewritten on change
//! dashboard.token        the dashboard's access token (0600), drawn by each `up`
//! models/                the model a plan fetched by url (sha256-named)
//! previous/              the journal and datastream of the run before
//! ```

use std::path::{Path, PathBuf};

/// The journal's file name (also inside `previous/`).
pub const JOURNAL: &str = "journal.bin";
/// The datastream folder's name (also inside `previous/`).
pub const DATASTREAM: &str = "datastream";

/// A state dir, by its root.
#[derive(Clone, Copy, Debug)]
pub struct StateDir<'a> {
    root: &'a Path,
}

impl<'a> StateDir<'a> {
    /// The state dir at `root`.
    pub fn at(root: &'a Path) -> StateDir<'a> {
        StateDir { root }
    }

    /// The root folder.
    pub fn root(self) -> &'a Path {
        self.root
    }

    /// The journal file.
    pub fn journal(self) -> PathBuf {
        self.root.join(JOURNAL)
    }

    /// The datastream folder.
    pub fn datastream(self) -> PathBuf {
        self.root.join(DATASTREAM)
    }

    /// The folder of keys (SSH identity, iroh endpoint key).
    pub fn keys(self) -> PathBuf {
        self.root.join("keys")
    }

    /// The folder of pinned host keys, one file per lease.
    pub fn known_hosts(self) -> PathBuf {
        self.root.join("known_hosts")
    }

    /// The local provider's nodes.
    pub fn nodes(self) -> PathBuf {
        self.root.join("nodes")
    }

    /// The static provider's reservations.
    pub fn static_leases(self) -> PathBuf {
        self.root.join("static")
    }

    /// The control plane's files.
    pub fn control(self) -> PathBuf {
        self.root.join("control")
    }

    /// The copy of the plan `up` runs.
    pub fn plan(self) -> PathBuf {
        self.root.join("plan.json")
    }

    /// The pid file of a running `up`.
    pub fn up_pid(self) -> PathBuf {
        self.root.join("up.pid")
    }

    /// The live view of a running `up`.
    pub fn live_view(self) -> PathBuf {
        self.root.join("live.json")
    }

    /// The prompt RPC's `ip:port`, written once the service is open.
    pub fn prompt_addr(self) -> PathBuf {
        self.root.join("prompt.addr")
    }

    /// The pipeline's status (stages, serving), rewritten on every change.
    pub fn pipeline_status(self) -> PathBuf {
        self.root.join("pipeline.json")
    }

    /// The dashboard's access token (mode 0600; never logged).
    pub fn dashboard_token(self) -> PathBuf {
        self.root.join("dashboard.token")
    }

    /// Models fetched by url, named by their sha256.
    pub fn models(self) -> PathBuf {
        self.root.join("models")
    }

    /// Where an ended run's journal and datastream are kept.
    pub fn previous_run(self) -> PathBuf {
        self.root.join("previous")
    }
}

/// What `plan.json` holds in place of each boot command.
pub const COMMAND_NOT_KEPT: &str = "[not kept: the plan file has it]";

/// The copy of `plan` that `plan.json` keeps: everything its readers (the
/// providers of `drover down`, the dashboard) need, and no boot command.
/// A plan's commands may carry secrets (`HF_TOKEN=... drover-agent ...`);
/// they reach the node over SSH and stay in the user's own plan file, never
/// in the state dir.
pub fn plan_copy(plan: &core_fsm::plan::RunPlan) -> core_fsm::plan::RunPlan {
    let mut copy = plan.clone();
    for group in &mut copy.groups {
        let boot = &mut group.boot;
        boot.start_command = COMMAND_NOT_KEPT.into();
        for command in &mut boot.verify_commands {
            *command = COMMAND_NOT_KEPT.into();
        }
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_copy_keeps_no_boot_command() {
        let mut plan = core_fsm::plan::RunPlan::local(2);
        plan.groups[0].boot.start_command = "SECRET=s3 drover-agent ${JOIN_TOKEN}".into();
        plan.groups[0].boot.verify_commands = vec!["echo s3".into()];
        let copy = plan_copy(&plan);
        let text = serde_json::to_string(&copy).unwrap();
        assert!(!text.contains("s3"), "{text}");
        assert_eq!(copy.groups[0].boot.verify_commands.len(), 1);
        assert_eq!(copy.groups.len(), plan.groups.len());
        assert_eq!(copy.groups[0].shape, plan.groups[0].shape);
    }
}
