//! The run plan a profile describes, the timeouts the simulated plans use,
//! and the virtual-time budgets of the liveness rule.

use conformance::case::Profile;
use core_fsm::ids::{GroupId, LogicalNodeId, RoleId, RunId};
use core_fsm::plan::{
    BootSpec, DesiredShape, JoinSpec, NodeGroupSpec, ProviderKind, ReplacementPolicy, RunPlan,
    TimeoutPolicy,
};
use core_fsm::time::Duration;

/// The run id of every simulated run.
pub const RUN_ID: RunId = RunId(42);

/// Timeouts of simulated plans: the real defaults scaled down so a run is a
/// few simulated minutes, still longer than every fault's usual duration.
pub fn timeouts() -> TimeoutPolicy {
    TimeoutPolicy {
        lease_create_timeout: Duration::from_secs(30),
        endpoint_timeout: Duration::from_secs(150),
        endpoint_poll_interval: Duration::from_secs(5),
        ssh_connect_timeout: Duration::from_secs(60),
        ssh_retry_interval: Duration::from_secs(5),
        command_timeout: Duration::from_secs(20),
        start_timeout: Duration::from_secs(20),
        join_timeout: Duration::from_secs(30),
        destroy_timeout: Duration::from_secs(20),
    }
}

/// The plan of a profile: groups `g0`, `g1`, ... on the Vast-like provider.
pub fn run_plan(profile: &Profile) -> RunPlan {
    let groups = profile
        .groups
        .iter()
        .enumerate()
        .map(|(g, count)| NodeGroupSpec {
            group_id: GroupId::new(format!("g{g}")),
            role: RoleId::from("worker"),
            count: *count,
            provider: ProviderKind::Vastai,
            shape: DesiredShape {
                image: "ghcr.io/drover/sim-worker:1".to_owned(),
                disk_gb: 40,
                gpu_name: Some("RTX 4090".to_owned()),
                ..DesiredShape::default()
            },
            boot: BootSpec {
                ssh_user: "root".to_owned(),
                verify_commands: (0..profile.verify_commands)
                    .map(|i| format!("test -x /opt/drover/check-{i}").into())
                    .collect(),
                start_command: "drover-agent --join ${ORCH_ADDR} --node ${LOGICAL_NODE_ID} \
                                --token ${JOIN_TOKEN}"
                    .into(),
                stdout_sources: vec!["/var/log/drover-boot.log".to_owned()],
                stderr_sources: Vec::new(),
                timeouts: timeouts(),
            },
            join: JoinSpec {
                orchestrator_addr: "auto".to_owned(),
                join_token_ref: "sim://join-token".to_owned(),
            },
        })
        .collect();
    RunPlan {
        run_id: RUN_ID,
        groups,
        replacement: profile.replacement,
    }
}

/// The logical node ids of a profile, in plan order.
pub fn node_ids(profile: &Profile) -> Vec<LogicalNodeId> {
    profile
        .groups
        .iter()
        .enumerate()
        .flat_map(|(g, count)| (0..*count).map(move |i| LogicalNodeId::new(format!("g{g}-{i}"))))
        .collect()
}

/// The operator's `SetDesired` for `Action::Scale { group, count }`: group
/// `group` of the plan (modulo its groups), `None` for a plan without any.
pub fn scale(plan: &RunPlan, group: u32, count: u32) -> Option<core_fsm::port::Input> {
    let groups = &plan.groups;
    let group = groups.get(group as usize % groups.len().max(1))?;
    Some(core_fsm::port::Input::SetDesired {
        group: group.group_id.clone(),
        count,
    })
}

/// How long after the heal every node must be ready or failed: one full
/// provisioning attempt (every timeout in a row, plus backoff) per allowed
/// attempt, plus a restart and a margin.
pub fn settle_budget(profile: &Profile) -> Duration {
    let t = timeouts();
    let commands = u64::from(profile.verify_commands) + 1;
    let attempt = t.lease_create_timeout.as_millis()
        + t.endpoint_timeout.as_millis()
        + t.ssh_connect_timeout.as_millis()
        + t.command_timeout.as_millis() * commands
        + t.start_timeout.as_millis()
        + t.join_timeout.as_millis()
        + t.destroy_timeout.as_millis() * 3;
    let (attempts, backoff) = match profile.replacement {
        ReplacementPolicy::None => (1, 0),
        ReplacementPolicy::Bounded {
            attempts_max,
            backoff_max,
            ..
        } => (u64::from(attempts_max.max(1)), backoff_max.as_millis()),
    };
    Duration::from_millis(attempts * (attempt + backoff) + 120_000)
}

/// How long a teardown may take once asked: a few destroy rounds.
pub fn teardown_budget() -> Duration {
    Duration::from_millis(timeouts().destroy_timeout.as_millis() * 6 + 120_000)
}
