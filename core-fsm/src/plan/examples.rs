//! Ready-made plans every crate's tests can share: the worked example of
//! SPEC.md "The run plan" and a small plan for the local provider.

use super::{
    BootSpec, DesiredShape, JoinSpec, NodeGroupSpec, ProviderKind, ReplacementPolicy, RunPlan,
    TimeoutPolicy,
};
use crate::ids::{GroupId, RoleId, RunId};

impl RunPlan {
    /// The worked example of SPEC.md "The run plan": run 42, group `workers` x2 on
    /// Vast.ai, RTX 4090 with at least 20000 MB, verified by one `test -x`,
    /// joined to `quic://orch.example:9443`. The start command also passes
    /// `${JOIN_TOKEN}`, which drover's validation requires (P6).
    pub fn example_two_workers() -> RunPlan {
        RunPlan {
            run_id: RunId(42),
            groups: vec![NodeGroupSpec {
                group_id: GroupId::from("workers"),
                role: RoleId::from("worker"),
                count: 2,
                provider: ProviderKind::Vastai,
                shape: DesiredShape {
                    image: "ghcr.io/acme/mvp-worker:sha123".to_owned(),
                    disk_gb: 80,
                    gpu_name: Some("RTX 4090".to_owned()),
                    min_gpu_ram_mb: Some(20_000),
                    ..DesiredShape::default()
                },
                boot: BootSpec {
                    ssh_user: "root".to_owned(),
                    verify_commands: vec!["test -x /opt/drover/drover-agent".into()],
                    start_command: "/opt/drover/drover-agent --join ${ORCH_ADDR} \
                                    --node ${LOGICAL_NODE_ID} --token ${JOIN_TOKEN}"
                        .into(),
                    stdout_sources: Vec::new(),
                    stderr_sources: Vec::new(),
                    timeouts: TimeoutPolicy::default(),
                },
                join: JoinSpec {
                    orchestrator_addr: "quic://orch.example:9443".to_owned(),
                    join_token_ref: "secret://run-42-join-token".to_owned(),
                },
            }],
            replacement: ReplacementPolicy::None,
        }
    }

    /// A valid small plan for the embedded local provider: run 1, one group
    /// `workers` of `count` nodes, image `local`, verified by `true`, joined to
    /// this process's own endpoint (`auto`), no replacement (the MVP rule).
    pub fn local(count: u32) -> RunPlan {
        RunPlan {
            run_id: RunId(1),
            groups: vec![NodeGroupSpec {
                group_id: GroupId::from("workers"),
                role: RoleId::from("worker"),
                count,
                provider: ProviderKind::Local,
                shape: DesiredShape {
                    image: "local".to_owned(),
                    disk_gb: 1,
                    ..DesiredShape::default()
                },
                boot: BootSpec {
                    ssh_user: "drover".to_owned(),
                    verify_commands: vec!["true".into()],
                    start_command: "drover-agent --join ${ORCH_ADDR} \
                                    --node ${LOGICAL_NODE_ID} --token ${JOIN_TOKEN}"
                        .into(),
                    stdout_sources: Vec::new(),
                    stderr_sources: Vec::new(),
                    timeouts: TimeoutPolicy::default(),
                },
                join: JoinSpec {
                    orchestrator_addr: "auto".to_owned(),
                    join_token_ref: "generated".to_owned(),
                },
            }],
            replacement: ReplacementPolicy::None,
        }
    }
}
