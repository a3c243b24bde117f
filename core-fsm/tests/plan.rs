//! Plan validation and expansion: a table of broken plans and the error lines
//! each one produces, plus expansion and the shared example plans.

use core_fsm::Duration;
use core_fsm::ids::{GroupId, LogicalNodeId, RoleId, RunId};
use core_fsm::plan::{
    self, GROUP_COUNT_MAX, NodeGroupSpec, PlanError, ReplacementPolicy, RunPlan, desired, expand,
    validate,
};
use std::fmt::Write as _;

fn base() -> RunPlan {
    RunPlan::example_two_workers()
}

fn with_group(edit: impl FnOnce(&mut NodeGroupSpec)) -> RunPlan {
    let mut plan = base();
    edit(&mut plan.groups[0]);
    plan
}

fn second_group(id: &str) -> NodeGroupSpec {
    let mut group = RunPlan::local(1).groups.remove(0);
    group.group_id = GroupId::from(id);
    group
}

/// Each case: a name and a broken plan.
fn cases() -> Vec<(&'static str, RunPlan)> {
    let mut cases: Vec<(&'static str, RunPlan)> = vec![
        (
            "no groups",
            RunPlan {
                groups: Vec::new(),
                ..base()
            },
        ),
        (
            "empty group id",
            with_group(|g| g.group_id = GroupId::from("")),
        ),
        (
            "upper-case group id",
            with_group(|g| g.group_id = GroupId::from("Workers")),
        ),
        (
            "group id with a dot",
            with_group(|g| g.group_id = GroupId::from("gpu.a")),
        ),
        (
            "group id starting with a digit",
            with_group(|g| g.group_id = GroupId::from("4090s")),
        ),
        (
            "group id ending with '-'",
            with_group(|g| g.group_id = GroupId::from("workers-")),
        ),
        (
            "group id too long",
            with_group(|g| g.group_id = GroupId::new("w".repeat(59))),
        ),
        ("empty role", with_group(|g| g.role = RoleId::from(""))),
        ("count zero", with_group(|g| g.count = 0)),
        (
            "count over the bound",
            with_group(|g| g.count = GROUP_COUNT_MAX + 1),
        ),
        ("empty image", with_group(|g| g.shape.image = String::new())),
        (
            "image with a space",
            with_group(|g| g.shape.image = "a b".to_owned()),
        ),
        ("zero disk", with_group(|g| g.shape.disk_gb = 0)),
        (
            "empty gpu name",
            with_group(|g| g.shape.gpu_name = Some(" ".to_owned())),
        ),
        (
            "reliability over 1000",
            with_group(|g| g.shape.min_reliability_per_mille = Some(1001)),
        ),
        (
            "zero price ceiling",
            with_group(|g| g.shape.max_price_cents_per_hour = Some(0)),
        ),
        (
            "empty label key",
            with_group(|g| {
                g.shape
                    .provider_labels
                    .insert(String::new(), "x".to_owned());
            }),
        ),
        (
            "empty ssh user",
            with_group(|g| g.boot.ssh_user = String::new()),
        ),
        (
            "empty verify command",
            with_group(|g| g.boot.verify_commands.push("  ".into())),
        ),
        (
            "token in a verify command",
            with_group(|g| {
                g.boot.verify_commands.push("echo ${JOIN_TOKEN}".into());
            }),
        ),
        (
            "token in a log source",
            with_group(|g| {
                g.boot
                    .stdout_sources
                    .push("/tmp/${JOIN_TOKEN}.log".to_owned());
            }),
        ),
        (
            "empty start command",
            with_group(|g| g.boot.start_command = "".into()),
        ),
        (
            "start command without the token",
            with_group(|g| {
                g.boot.start_command = "drover-agent --join ${ORCH_ADDR}".into();
            }),
        ),
        (
            "zero timeouts",
            with_group(|g| {
                g.boot.timeouts.join_timeout = Duration::ZERO;
                g.boot.timeouts.command_timeout = Duration::ZERO;
            }),
        ),
        (
            "poll interval not below endpoint timeout",
            with_group(|g| {
                g.boot.timeouts.endpoint_poll_interval = g.boot.timeouts.endpoint_timeout;
            }),
        ),
        (
            "ssh retry interval not below connect timeout",
            with_group(|g| {
                g.boot.timeouts.ssh_retry_interval = Duration::from_secs(301);
            }),
        ),
        (
            "empty orchestrator address",
            with_group(|g| g.join.orchestrator_addr = String::new()),
        ),
        (
            "empty join token ref",
            with_group(|g| g.join.join_token_ref = String::new()),
        ),
    ];
    let mut dup = base();
    dup.groups.push(second_group("cpu"));
    dup.groups.push(second_group("workers"));
    cases.push(("duplicate group ids", dup));
    let mut too_many = base();
    too_many.groups = (0..5)
        .map(|i| {
            let mut g = second_group(&format!("g{i}"));
            g.count = GROUP_COUNT_MAX;
            g
        })
        .collect();
    cases.push(("too many nodes in all", too_many));
    let bounded = |attempts_max, base_s, max_s, quarantine| ReplacementPolicy::Bounded {
        attempts_max,
        backoff_base: Duration::from_secs(base_s),
        backoff_max: Duration::from_secs(max_s),
        quarantine_after_failures: quarantine,
    };
    cases.push((
        "zero attempts",
        RunPlan {
            replacement: bounded(0, 1, 2, 3),
            ..base()
        },
    ));
    cases.push((
        "too many attempts",
        RunPlan {
            replacement: bounded(17, 1, 2, 3),
            ..base()
        },
    ));
    cases.push((
        "zero backoff base",
        RunPlan {
            replacement: bounded(3, 0, 2, 3),
            ..base()
        },
    ));
    cases.push((
        "backoff base over max",
        RunPlan {
            replacement: bounded(3, 10, 2, 3),
            ..base()
        },
    ));
    cases.push((
        "zero quarantine threshold",
        RunPlan {
            replacement: bounded(3, 1, 2, 0),
            ..base()
        },
    ));
    let mut many = with_group(|g| {
        g.count = 0;
        g.shape.image = String::new();
        g.boot.ssh_user = String::new();
        g.boot.start_command = "run".into();
    });
    many.replacement = bounded(0, 10, 2, 0);
    cases.push(("many faults at once: all reported", many));
    cases
}

fn render(errors: &[PlanError]) -> String {
    let mut out = String::new();
    for e in errors {
        writeln!(out, "  {e}").unwrap();
        writeln!(out, "    (field {})", e.field).unwrap();
    }
    out
}

#[test]
fn broken_plans_and_their_errors() {
    let mut out = String::new();
    for (name, plan) in cases() {
        writeln!(out, "{name}:").unwrap();
        match validate(&plan) {
            Ok(()) => panic!("case `{name}` should not validate"),
            Err(errors) => {
                assert!(!errors.is_empty());
                out.push_str(&render(&errors));
            }
        }
    }
    insta::assert_snapshot!(out);
}

#[test]
fn shipped_example_plans_are_valid() {
    assert_eq!(validate(&RunPlan::example_two_workers()), Ok(()));
    for count in [1, 3, GROUP_COUNT_MAX] {
        assert_eq!(validate(&RunPlan::local(count)), Ok(()));
    }
    let mut bounded = RunPlan::local(2);
    bounded.replacement = ReplacementPolicy::Bounded {
        attempts_max: 3,
        backoff_base: Duration::from_secs(5),
        backoff_max: Duration::from_secs(5),
        quarantine_after_failures: 1,
    };
    assert_eq!(validate(&bounded), Ok(()));
}

#[test]
fn error_display_names_the_group_and_the_path() {
    let mut plan = base();
    plan.groups.push(second_group("cpu"));
    plan.groups[1].boot.start_command = "".into();
    let errors = validate(&plan).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].field, "groups[1].boot.start_command");
    assert_eq!(errors[0].group, Some(GroupId::from("cpu")));
    assert_eq!(
        errors[0].to_string(),
        "group `cpu` boot.start_command: must not be empty"
    );
}

#[test]
fn expansion_is_in_plan_order_with_stable_ids() {
    let mut plan = RunPlan::example_two_workers();
    let mut cpu = second_group("cpu");
    cpu.count = 3;
    plan.groups.push(cpu);
    let specs = expand(&plan);
    let ids: Vec<&str> = specs.iter().map(|s| s.node_id.as_str()).collect();
    assert_eq!(ids, ["workers-0", "workers-1", "cpu-0", "cpu-1", "cpu-2"]);
    for spec in &specs {
        assert_eq!(spec.run_id, RunId(42));
        assert_eq!(spec.node_id, plan::node_id(&spec.group_id, spec.index));
        let group = plan
            .groups
            .iter()
            .find(|g| g.group_id == spec.group_id)
            .unwrap();
        assert_eq!(spec.role, group.role);
        assert_eq!(*spec.shape, group.shape);
        assert_eq!(*spec.boot, group.boot);
        assert_eq!(*spec.join, group.join);
        assert_eq!(spec.provider, group.provider);
    }
    assert_eq!(specs[0].node_id, LogicalNodeId::from("workers-0"));
    let wanted = desired(&plan);
    let counts: Vec<(&str, u32)> = wanted
        .groups
        .iter()
        .map(|(g, c)| (g.as_str(), *c))
        .collect();
    assert_eq!(counts, [("cpu", 3), ("workers", 2)]);
}

#[test]
fn node_ids_parse_back_into_group_and_index() {
    for (group, index) in [("workers", 0), ("a-b", 7), ("cpu", 1234), ("g", u32::MAX)] {
        let id = plan::node_id(&GroupId::from(group), index);
        let parsed = plan::parse_node_id(&id);
        assert_eq!(parsed, Some((group.as_bytes(), index)), "{id}");
    }
    // Only the form `node_id` writes parses: no leading zeros, no sign,
    // no overflow, a dash and digits.
    for id in [
        "workers-01",
        "workers-",
        "workers",
        "workers-+1",
        "w-4294967296",
        "w-1x",
    ] {
        assert_eq!(plan::parse_node_id(&LogicalNodeId::from(id)), None, "{id}");
    }
    assert_eq!(
        plan::parse_node_id(&LogicalNodeId::from("-3")),
        Some((&b""[..], 3))
    );
}
