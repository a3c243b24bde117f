//! The plan file's shape, read into a `RunPlan`. Every getter records its
//! own problems and yields a placeholder, so one pass finds every error;
//! the placeholders never reach a caller (a file with any error is refused).

mod group_hosts;

use super::reader::{Doc, Table, Value};
use crate::provider::docker::container::{GPUS_LABEL, Gpus};
use crate::provider::static_hosts::hosts;

/// Shape labels a docker group's fields become; never written by hand.
const DOCKER_LABEL_PREFIX: &str = "docker.";
use core_fsm::ids::{GroupId, RoleId, RunId};
use core_fsm::plan::{
    BootSpec, DesiredShape, JoinSpec, NodeGroupSpec, ProviderKind, ReplacementPolicy, RunPlan,
    TimeoutPolicy,
};
use core_fsm::time::Duration;
use toml::de::{DeTable, DeValue};

pub(crate) use group_hosts::check_unique_hosts;
use group_hosts::{check_hosts, read_hosts};

pub(crate) const ROOT: &[&str] = &[
    "run_id",
    "replacement",
    "group",
    "model",
    "pipeline",
    "prompt",
    "sampling",
    "observability",
    "dashboard",
    "liveness",
];
const GROUP: &[&str] = &[
    "name", "role", "count", "provider", "shape", "boot", "join", "host",
];
const SHAPE: &[&str] = &[
    "image",
    "disk_gb",
    "gpu_name",
    "min_gpu_ram_mb",
    "min_down_mbps",
    "min_up_mbps",
    "min_reliability",
    "require_verified",
    "min_compute_capability",
    "max_price_usd_per_hour",
    "provider_labels",
    "gpus",
];
const BOOT: &[&str] = &[
    "ssh_user",
    "verify_commands",
    "start_command",
    "stdout_sources",
    "stderr_sources",
    "timeouts",
];
const TIMEOUTS: &[&str] = &[
    "lease_create_timeout",
    "endpoint_timeout",
    "endpoint_poll_interval",
    "ssh_connect_timeout",
    "ssh_retry_interval",
    "command_timeout",
    "start_timeout",
    "join_timeout",
    "destroy_timeout",
];
const JOIN: &[&str] = &["orchestrator_addr", "join_token_ref"];
const REPLACEMENT: &[&str] = &[
    "policy",
    "attempts_max",
    "backoff_base",
    "backoff_max",
    "quarantine_after_failures",
];

/// Reads the whole document.
pub(crate) fn read_plan(
    doc: &mut Doc,
    root: &DeTable<'_>,
) -> (RunPlan, Option<crate::pipeline::spec::PipelineSpec>) {
    let mut table = Table::new("", 0..0, root, ROOT);
    let run_id = table.integer(doc, "run_id", true, u64::MAX).unwrap_or(0);
    let replacement = match table.take(doc, "replacement") {
        Some(value) => read_replacement(doc, value),
        None => ReplacementPolicy::None,
    };
    let groups = match table.take(doc, "group") {
        Some(value) => read_groups(doc, value),
        None => Vec::new(),
    };
    check_unique_hosts(doc, &groups);
    let plan = RunPlan {
        run_id: RunId(run_id),
        groups,
        replacement,
    };
    let pipeline = super::pipeline::read(doc, &mut table, &plan);
    super::observability::check(doc, &mut table);
    super::dashboard::read(doc, &mut table);
    super::liveness::read(doc, &mut table);
    table.finish(doc);
    (plan, pipeline)
}

fn read_groups(doc: &mut Doc, value: &Value<'_>) -> Vec<NodeGroupSpec> {
    let DeValue::Array(items) = value.get_ref() else {
        let reason = "expected [[group]] tables, found a single table or value";
        doc.error(value.span(), "group", reason);
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(index, item)| read_group(doc, &format!("group[{index}]"), item))
        .collect()
}

fn read_group(doc: &mut Doc, path: &str, value: &Value<'_>) -> Option<NodeGroupSpec> {
    let mut table = doc.table(path, value, GROUP)?;
    let name = table.string(doc, "name", true).unwrap_or_default();
    let role = table.string(doc, "role", true).unwrap_or_default();
    let count = table.u32(doc, "count", true).unwrap_or(1);
    let read = read_provider(doc, &mut table);
    let provider = read.unwrap_or(ProviderKind::Local);
    let shape = match table.require(doc, "shape") {
        Some(v) => read_shape(doc, &format!("{path}.shape"), v),
        None => DesiredShape::default(),
    };
    let boot = match table.require(doc, "boot") {
        Some(v) => read_boot(doc, &format!("{path}.boot"), v),
        None => placeholder_boot(),
    };
    let join = match table.take(doc, "join") {
        Some(v) => read_join(doc, &format!("{path}.join"), v),
        None => default_join(),
    };
    // Against the provider the file names (an unreadable one is reported
    // already; its placeholder would add a misleading error here).
    if let Some(provider) = read {
        check_vastai_labels(doc, path, provider, &shape);
        check_gpus(doc, path, provider, &shape);
    }
    let mut shape = shape;
    let hosts = match table.take(doc, "host") {
        Some(v) => read_hosts(doc, &format!("{path}.host"), v, &boot.ssh_user),
        None => {
            check_hosts(doc, path, (provider, count), None, &shape);
            None
        }
    };
    if let Some(hosts) = &hosts {
        check_hosts(doc, path, (provider, count), Some(hosts), &shape);
    }
    hosts::to_labels(&mut shape.provider_labels, hosts.as_deref().unwrap_or(&[]));
    table.finish(doc);
    Some(NodeGroupSpec {
        group_id: GroupId::new(name),
        role: RoleId::new(role),
        count,
        provider,
        shape,
        boot,
        join,
    })
}

/// `vastai.*` labels: read by vastai groups only, each known and well
/// formed (a misspelt key or a bid of "0.30" would otherwise be ignored,
/// and the run would rent at another price or talk to another API).
fn check_vastai_labels(doc: &mut Doc, path: &str, provider: ProviderKind, shape: &DesiredShape) {
    use crate::provider::vastai::settings::{LABEL_PREFIX, label_problem};
    for (key, value) in &shape.provider_labels {
        if !key.starts_with(LABEL_PREFIX) {
            continue;
        }
        let problem = if provider == ProviderKind::Vastai {
            label_problem(key, value)
        } else {
            Some(format!(
                "only a vastai group reads {LABEL_PREFIX}* labels (this group's provider is {})",
                format!("{provider:?}").to_lowercase()
            ))
        };
        if let Some(problem) = problem {
            let field = format!("{path}.shape.provider_labels.{key}");
            let span = doc.spans.get(&field).cloned().unwrap_or(0..0);
            doc.error(span, &field, problem);
        }
    }
}

fn read_provider(doc: &mut Doc, table: &mut Table<'_, '_>) -> Option<ProviderKind> {
    let value = table.require(doc, "provider")?;
    let path = table.path_of("provider");
    let kinds = [
        ("local", ProviderKind::Local),
        ("static", ProviderKind::Static),
        ("docker", ProviderKind::Docker),
        ("vastai", ProviderKind::Vastai),
    ];
    let found = match value.get_ref() {
        DeValue::String(text) => kinds.iter().find(|(name, _)| name == text).map(|(_, k)| *k),
        _ => None,
    };
    if found.is_none() {
        let reason = "expected one of \"local\", \"static\", \"docker\", \"vastai\"";
        doc.error(value.span(), &path, reason);
    }
    found
}

fn read_shape(doc: &mut Doc, path: &str, value: &Value<'_>) -> DesiredShape {
    let Some(mut table) = doc.table(path, value, SHAPE) else {
        return DesiredShape::default();
    };
    let shape = DesiredShape {
        image: table.string(doc, "image", true).unwrap_or_default(),
        disk_gb: table.u32(doc, "disk_gb", true).unwrap_or(1),
        gpu_name: table.string(doc, "gpu_name", false),
        min_gpu_ram_mb: table.integer(doc, "min_gpu_ram_mb", false, u64::MAX),
        min_down_mbps: table.u32(doc, "min_down_mbps", false),
        min_up_mbps: table.u32(doc, "min_up_mbps", false),
        min_reliability_per_mille: table.scaled(doc, "min_reliability", 1000, 1.0, "per mille"),
        require_verified: table.boolean(doc, "require_verified").unwrap_or(false),
        min_compute_capability: table.scaled(
            doc,
            "min_compute_capability",
            100,
            1000.0,
            "hundredths",
        ),
        max_price_cents_per_hour: table.scaled(
            doc,
            "max_price_usd_per_hour",
            100,
            1_000_000.0,
            "a cent",
        ),
        provider_labels: table.string_map(doc, "provider_labels").unwrap_or_default(),
    };
    let mut shape = shape;
    for key in shape.provider_labels.keys() {
        if key.starts_with(DOCKER_LABEL_PREFIX) {
            let field = format!("{path}.provider_labels.{key}");
            let span = doc.spans.get(&field).cloned().unwrap_or(0..0);
            doc.error(span, &field, "reserved: a docker group's GPUs are `gpus`");
        }
    }
    if let Some(gpus) = table.string(doc, "gpus", false) {
        if let Err(reason) = Gpus::parse(&gpus) {
            let field = format!("{path}.gpus");
            let span = doc.spans.get(&field).cloned().unwrap_or(0..0);
            doc.error(span, &field, reason);
        }
        shape.provider_labels.insert(GPUS_LABEL.to_owned(), gpus);
    }
    table.finish(doc);
    shape
}

/// `gpus` is read by docker groups only (another provider would ignore it
/// and run without the GPUs the plan asks for).
fn check_gpus(doc: &mut Doc, path: &str, provider: ProviderKind, shape: &DesiredShape) {
    let field = format!("{path}.shape.gpus");
    if provider != ProviderKind::Docker && shape.provider_labels.contains_key(GPUS_LABEL) {
        let span = doc.spans.get(&field).cloned().unwrap_or(0..0);
        doc.error(span, &field, "only a docker group reads `gpus`");
    }
}

fn read_boot(doc: &mut Doc, path: &str, value: &Value<'_>) -> BootSpec {
    let Some(mut table) = doc.table(path, value, BOOT) else {
        return placeholder_boot();
    };
    let boot = BootSpec {
        ssh_user: table.string(doc, "ssh_user", true).unwrap_or_default(),
        verify_commands: (table.strings(doc, "verify_commands").unwrap_or_default())
            .into_iter()
            .map(Into::into)
            .collect(),
        start_command: (table.string(doc, "start_command", true).unwrap_or_default()).into(),
        stdout_sources: table.strings(doc, "stdout_sources").unwrap_or_default(),
        stderr_sources: table.strings(doc, "stderr_sources").unwrap_or_default(),
        timeouts: match table.take(doc, "timeouts") {
            Some(v) => read_timeouts(doc, &format!("{path}.timeouts"), v),
            None => TimeoutPolicy::default(),
        },
    };
    table.finish(doc);
    boot
}

fn read_timeouts(doc: &mut Doc, path: &str, value: &Value<'_>) -> TimeoutPolicy {
    let defaults = TimeoutPolicy::default();
    let Some(mut t) = doc.table(path, value, TIMEOUTS) else {
        return defaults;
    };
    let mut get = |key: &str, default: Duration| t.duration(doc, key, false).unwrap_or(default);
    let policy = TimeoutPolicy {
        lease_create_timeout: get("lease_create_timeout", defaults.lease_create_timeout),
        endpoint_timeout: get("endpoint_timeout", defaults.endpoint_timeout),
        endpoint_poll_interval: get("endpoint_poll_interval", defaults.endpoint_poll_interval),
        ssh_connect_timeout: get("ssh_connect_timeout", defaults.ssh_connect_timeout),
        ssh_retry_interval: get("ssh_retry_interval", defaults.ssh_retry_interval),
        command_timeout: get("command_timeout", defaults.command_timeout),
        start_timeout: get("start_timeout", defaults.start_timeout),
        join_timeout: get("join_timeout", defaults.join_timeout),
        destroy_timeout: get("destroy_timeout", defaults.destroy_timeout),
    };
    t.finish(doc);
    policy
}

fn read_join(doc: &mut Doc, path: &str, value: &Value<'_>) -> JoinSpec {
    let Some(mut table) = doc.table(path, value, JOIN) else {
        return default_join();
    };
    let defaults = default_join();
    let join = JoinSpec {
        orchestrator_addr: table
            .string(doc, "orchestrator_addr", false)
            .unwrap_or(defaults.orchestrator_addr),
        join_token_ref: table
            .string(doc, "join_token_ref", false)
            .unwrap_or(defaults.join_token_ref),
    };
    table.finish(doc);
    join
}

fn read_replacement(doc: &mut Doc, value: &Value<'_>) -> ReplacementPolicy {
    let Some(mut table) = doc.table("replacement", value, REPLACEMENT) else {
        return ReplacementPolicy::None;
    };
    let policy = table.string(doc, "policy", true);
    let result = match policy.as_deref() {
        Some("none") => {
            for key in &REPLACEMENT[1..] {
                if let Some(value) = table.take(doc, key) {
                    let reason = "applies only with policy = \"bounded\"";
                    doc.error(value.span(), &format!("replacement.{key}"), reason);
                }
            }
            ReplacementPolicy::None
        }
        None => ReplacementPolicy::None,
        Some("bounded") => ReplacementPolicy::Bounded {
            attempts_max: table.u32(doc, "attempts_max", true).unwrap_or(1),
            backoff_base: table
                .duration(doc, "backoff_base", true)
                .unwrap_or(Duration::from_secs(1)),
            backoff_max: table
                .duration(doc, "backoff_max", true)
                .unwrap_or(Duration::from_secs(1)),
            quarantine_after_failures: table
                .u32(doc, "quarantine_after_failures", true)
                .unwrap_or(1),
        },
        Some(_) => {
            let span = doc.spans["replacement.policy"].clone();
            doc.error(
                span,
                "replacement.policy",
                "expected \"none\" or \"bounded\"",
            );
            ReplacementPolicy::None
        }
    };
    table.finish(doc);
    result
}

/// `[group.join]` may be left out: the runtime's own endpoint, and tokens
/// minted per node.
fn default_join() -> JoinSpec {
    JoinSpec {
        orchestrator_addr: "auto".to_owned(),
        join_token_ref: "generated".to_owned(),
    }
}

fn placeholder_boot() -> BootSpec {
    BootSpec {
        ssh_user: String::new(),
        verify_commands: Vec::new(),
        start_command: "".into(),
        stdout_sources: Vec::new(),
        stderr_sources: Vec::new(),
        timeouts: TimeoutPolicy::default(),
    }
}
