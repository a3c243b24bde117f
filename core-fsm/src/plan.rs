//! The run plan: node groups with their desired shape, boot spec and join spec
//! (SPEC.md "The run plan"), validated with precise errors and expanded into logical
//! nodes with stable ids (`workers` x3 -> `workers-0..2`).
//!
//! Parsing (TOML, line numbers) lives in `runtime-real`; this module owns the
//! data and the rules, so the simulator and the real runtime agree on them.
//! The rules are numbered P1.. in `spec/plan-boot-reconcile.md`.

mod examples;
mod validate;

pub use validate::{
    GROUP_COUNT_MAX, GROUP_ID_LEN_MAX, PLAN_NODES_MAX, PlanError, REPLACEMENT_ATTEMPTS_MAX,
    START_PLACEHOLDERS, validate,
};

use crate::ids::{GroupId, LogicalNodeId, RoleId, RunId};
use crate::reconcile::Desired;
use crate::time::Duration;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which provider adapter leases a group's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Child processes on this machine, each an SSH server on 127.0.0.1.
    Local,
    /// Machines the user already has, listed in the plan.
    Static,
    /// Containers of a locally built image.
    Docker,
    /// Vast.ai instances.
    Vastai,
}

/// A full run plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPlan {
    /// The run these nodes belong to.
    pub run_id: RunId,
    /// The node groups, in plan order.
    pub groups: Vec<NodeGroupSpec>,
    /// What happens to a node that fails before handoff.
    pub replacement: ReplacementPolicy,
}

/// One node group of the plan (SPEC.md "The run plan" `RunNodeGroupSpec`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeGroupSpec {
    /// The group's name; logical node ids are `{group_id}-{index}`.
    pub group_id: GroupId,
    /// The role every node of the group plays.
    pub role: RoleId,
    /// How many logical nodes the group wants.
    pub count: u32,
    /// Which provider leases the nodes.
    pub provider: ProviderKind,
    /// Provider-neutral desired machine shape.
    pub shape: DesiredShape,
    /// How to bootstrap a node over SSH.
    pub boot: BootSpec,
    /// How the node's agent joins the control plane.
    pub join: JoinSpec,
}

/// Provider-neutral desired shape (SPEC.md "The run plan" `DesiredNodeShape`).
///
/// Fractions are integers (per mille, cents) so the core stays float-free and
/// every value has one exact representation in a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredShape {
    /// Container image to run.
    pub image: String,
    /// Disk to allocate, in GB.
    pub disk_gb: u32,
    /// GPU model name, e.g. `RTX 4090`.
    pub gpu_name: Option<String>,
    /// Minimum GPU memory in MB.
    pub min_gpu_ram_mb: Option<u64>,
    /// Minimum download bandwidth in Mbit/s.
    pub min_down_mbps: Option<u32>,
    /// Minimum upload bandwidth in Mbit/s.
    pub min_up_mbps: Option<u32>,
    /// Minimum host reliability, per mille (0.98 -> 980).
    pub min_reliability_per_mille: Option<u32>,
    /// Only verified hosts.
    pub require_verified: bool,
    /// Minimum CUDA compute capability times 100 (8.6 -> 860).
    pub min_compute_capability: Option<u32>,
    /// Highest acceptable price, in cents per hour.
    pub max_price_cents_per_hour: Option<u32>,
    /// Extra labels for the provider.
    pub provider_labels: BTreeMap<String, String>,
}

/// How to bootstrap a node (SPEC.md "The run plan" `BootSpec`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootSpec {
    /// The SSH user.
    pub ssh_user: String,
    /// Commands that must each exit 0 before the agent is started (shared
    /// text: each run of one copies a pointer).
    pub verify_commands: Vec<Arc<str>>,
    /// Starts the node agent; `${ORCH_ADDR}`, `${LOGICAL_NODE_ID}`,
    /// `${RUN_ID}`, `${LEASE_ID}` and `${JOIN_TOKEN}` are substituted by the SSH
    /// port (the token never enters the core).
    pub start_command: Arc<str>,
    /// Remote files whose lines are forwarded as stdout.
    pub stdout_sources: Vec<String>,
    /// Remote files whose lines are forwarded as stderr.
    pub stderr_sources: Vec<String>,
    /// Timeouts of the bootstrap session and the node manager.
    pub timeouts: TimeoutPolicy,
}

/// Every wait of provisioning has a bound (SPEC.md "The run plan" `BootstrapTimeoutPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutPolicy {
    /// How long the provider may take to answer a create.
    pub lease_create_timeout: Duration,
    /// How long to wait for the provider to expose an SSH endpoint.
    pub endpoint_timeout: Duration,
    /// Interval between endpoint lookups.
    pub endpoint_poll_interval: Duration,
    /// How long to keep trying to connect over SSH, all attempts together.
    pub ssh_connect_timeout: Duration,
    /// Interval between SSH connect attempts.
    pub ssh_retry_interval: Duration,
    /// Each probe and verify command's own timeout.
    pub command_timeout: Duration,
    /// The start command's timeout.
    pub start_timeout: Duration,
    /// How long to wait for the agent to join after the start command.
    pub join_timeout: Duration,
    /// How long the provider may take to answer a destroy before it is retried.
    pub destroy_timeout: Duration,
}

impl TimeoutPolicy {
    /// Every timeout with its field name, in declaration order: one list for
    /// validation, plan files and displays to walk.
    pub fn named(&self) -> [(&'static str, Duration); 9] {
        [
            ("lease_create_timeout", self.lease_create_timeout),
            ("endpoint_timeout", self.endpoint_timeout),
            ("endpoint_poll_interval", self.endpoint_poll_interval),
            ("ssh_connect_timeout", self.ssh_connect_timeout),
            ("ssh_retry_interval", self.ssh_retry_interval),
            ("command_timeout", self.command_timeout),
            ("start_timeout", self.start_timeout),
            ("join_timeout", self.join_timeout),
            ("destroy_timeout", self.destroy_timeout),
        ]
    }
}

impl Default for TimeoutPolicy {
    fn default() -> Self {
        TimeoutPolicy {
            lease_create_timeout: Duration::from_secs(120),
            endpoint_timeout: Duration::from_secs(600),
            endpoint_poll_interval: Duration::from_secs(5),
            ssh_connect_timeout: Duration::from_secs(300),
            ssh_retry_interval: Duration::from_secs(5),
            command_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(60),
            join_timeout: Duration::from_secs(120),
            destroy_timeout: Duration::from_secs(60),
        }
    }
}

/// How a node's agent joins (SPEC.md "The run plan" `SwarmJoinSpec`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinSpec {
    /// The orchestrator's control-plane address; `auto` means "this process's
    /// own endpoint", filled in by the runtime.
    pub orchestrator_addr: String,
    /// A reference to where the join token comes from (never the token).
    pub join_token_ref: String,
}

/// What to do about a node that fails before handoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplacementPolicy {
    /// The MVP rule (SPEC.md "The run plan"): a failed node stays failed.
    None,
    /// Replace a failed node with a new lease, a bounded number of times.
    Bounded {
        /// Leases tried per logical node, the first included.
        attempts_max: u32,
        /// Backoff before the second attempt; doubles per attempt.
        backoff_base: Duration,
        /// Backoff ceiling.
        backoff_max: Duration,
        /// Failures on one host before it is quarantined (no new leases there).
        quarantine_after_failures: u32,
    },
}

/// One expanded logical node: everything its NodeManager needs. The shape,
/// boot and join specs are shared by every node of the group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogicalNodeSpec {
    /// The run.
    pub run_id: RunId,
    /// `{group}-{index}`, stable for the run.
    pub node_id: LogicalNodeId,
    /// The node's group.
    pub group_id: GroupId,
    /// Index within the group.
    pub index: u32,
    /// The role.
    pub role: RoleId,
    /// The provider.
    pub provider: ProviderKind,
    /// The desired shape.
    pub shape: Arc<DesiredShape>,
    /// The boot spec.
    pub boot: Arc<BootSpec>,
    /// The join spec.
    pub join: Arc<JoinSpec>,
}

/// The logical node id of `index` in `group`: `{group}-{index}` (SPEC.md "The run plan").
///
/// Validation (P2) keeps group ids DNS-label-like, so these ids are safe in
/// file paths, provider labels and log fields.
pub fn node_id(group: &GroupId, index: u32) -> LogicalNodeId {
    LogicalNodeId(smol_str::format_smolstr!("{group}-{index}"))
}

/// The group and index an id of the form `{group}-{index}` names (the
/// index in plain decimal, as [`node_id`] writes it), as bytes: no id of
/// another form is parsed.
pub fn parse_node_id(id: &LogicalNodeId) -> Option<(&[u8], u32)> {
    let bytes = id.0.as_bytes();
    let dash = bytes.iter().rposition(|b| *b == b'-')?;
    let (group, digits) = (&bytes[..dash], &bytes[dash + 1..]);
    let canonical = digits.first().is_some_and(|d| *d != b'0') || digits == b"0";
    if !canonical || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let index = digits.iter().try_fold(0u32, |n, d| {
        n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
    })?;
    Some((group, index))
}

/// Whether `id` is `{group}-{index}`.
pub fn is_node_id(id: &LogicalNodeId, group: &GroupId, index: u32) -> bool {
    parse_node_id(id) == Some((group.0.as_bytes(), index))
}

/// Expands a plan into one logical node spec per wanted node, in plan order
/// (groups as listed, indexes ascending): `workers` x3 -> `workers-0..2`.
///
/// Meant for a plan that passed [`validate`]; on any other plan it still
/// returns without panicking, but ids may collide.
pub fn expand(plan: &RunPlan) -> Vec<LogicalNodeSpec> {
    expand_with(plan, |count| IdOrder::Plain(0..count))
}

/// [`expand`], each group's nodes in node-id order (`workers-0`,
/// `workers-1`, `workers-10`, ...) instead of index order, so that sorting
/// a one-group plan's nodes by id finds them sorted already.
pub(crate) fn expand_in_id_order(plan: &RunPlan) -> Vec<LogicalNodeSpec> {
    expand_with(plan, |count| IdOrder::Decimal(DecimalOrder::below(count)))
}

fn expand_with(plan: &RunPlan, order: impl Fn(u32) -> IdOrder) -> Vec<LogicalNodeSpec> {
    let count = plan.groups.iter().map(|g| g.count as usize).sum();
    let mut specs = Vec::with_capacity(count);
    let groups = plan.groups.iter().flat_map(|group| {
        let shape = Arc::new(group.shape.clone());
        let boot = Arc::new(group.boot.clone());
        let join = Arc::new(group.join.clone());
        order(group.count).map(move |index| LogicalNodeSpec {
            run_id: plan.run_id,
            node_id: node_id(&group.group_id, index),
            group_id: group.group_id.clone(),
            index,
            role: group.role.clone(),
            provider: group.provider,
            shape: Arc::clone(&shape),
            boot: Arc::clone(&boot),
            join: Arc::clone(&join),
        })
    });
    specs.extend(groups);
    specs
}

/// The indexes of a group in the order its nodes are expanded.
enum IdOrder {
    Plain(std::ops::Range<u32>),
    Decimal(DecimalOrder),
}

impl Iterator for IdOrder {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        match self {
            IdOrder::Plain(range) => range.next(),
            IdOrder::Decimal(order) => order.next(),
        }
    }
}

/// The numbers below a bound in the order of their decimal digits as
/// text (`0, 1, 10, 100, 101, ..., 11, ...`), each once, without sorting:
/// from a number, the next is its tenfold if that is below the bound,
/// else the next number up after dropping trailing nines (and the last
/// digit while stepping would reach the bound).
pub(crate) struct DecimalOrder {
    bound: u64,
    /// The next number to yield.
    next: u64,
    /// Numbers still to yield.
    left: u64,
}

impl DecimalOrder {
    pub(crate) fn below(bound: u32) -> DecimalOrder {
        DecimalOrder {
            bound: u64::from(bound),
            next: 0,
            left: u64::from(bound),
        }
    }
}

impl Iterator for DecimalOrder {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.next;
        self.next = if at == 0 {
            // "0" comes first, and only it starts with a zero.
            1
        } else if at * 10 < self.bound {
            at * 10
        } else {
            let mut up = at;
            while up % 10 == 9 || up + 1 >= self.bound {
                up /= 10;
            }
            up + 1
        };
        Some(u32::try_from(at).expect("below a u32 bound"))
    }
}

/// The pool shape the reconciler drives towards: each group's wanted count.
///
/// Meant for a validated plan (unique group ids); with duplicates the last
/// group of a name wins.
pub fn desired(plan: &RunPlan) -> Desired {
    Desired {
        groups: plan
            .groups
            .iter()
            .map(|group| (group.group_id.clone(), group.count))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers below a bound, as sorting their decimal text orders
    /// them: every bound up to 2,100 and some far larger.
    #[test]
    fn decimal_order_is_the_order_of_the_digits_as_text() {
        let bounds = (0..2_100).chain([9_999, 10_000, 10_001, 123_457]);
        for bound in bounds {
            let mut want: Vec<u32> = (0..bound).collect();
            want.sort_by_key(|n| n.to_string());
            let got: Vec<u32> = DecimalOrder::below(bound).collect();
            assert_eq!(got, want, "below {bound}");
        }
    }

    /// Near `u32::MAX` the order steps without overflow.
    #[test]
    fn decimal_order_steps_near_the_largest_bound() {
        let mut order = DecimalOrder::below(u32::MAX);
        assert_eq!(order.by_ref().take(4).collect::<Vec<_>>(), [0, 1, 10, 100]);
        let near_the_top = DecimalOrder {
            next: 4_294_967_294,
            left: 3,
            ..DecimalOrder::below(u32::MAX)
        };
        let got: Vec<u32> = near_the_top.collect();
        assert_eq!(got, [4_294_967_294, 42_949_673, 429_496_730]);
    }

    /// Expanding in id order gives the same specs as in plan order.
    #[test]
    fn expanding_in_id_order_only_reorders() {
        let mut plan = RunPlan::example_two_workers();
        plan.groups[0].count = 120;
        let mut by_id = expand_in_id_order(&plan);
        let ids: Vec<&str> = by_id.iter().map(|s| s.node_id.0.as_str()).collect();
        assert!(ids.is_sorted(), "one group comes sorted");
        by_id.sort_by_key(|s| s.index);
        assert_eq!(by_id, expand(&plan));
    }
}
