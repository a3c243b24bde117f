//! Plan validation: every rule checked, every violation reported with the
//! dotted path of the offending field (rules P1..P10 of
//! `spec/plan-boot-reconcile.md`).
//!
//! Reasons never quote a command line or an address: a plan may carry
//! credentials in places we do not foresee, and errors end up in logs.

use super::{BootSpec, DesiredShape, JoinSpec, NodeGroupSpec, ReplacementPolicy, RunPlan};
use super::{TimeoutPolicy, node_id};
use crate::ids::GroupId;
use crate::time::Duration;
use std::collections::BTreeMap;
use std::fmt;

/// Most logical nodes one group may ask for (P3): a typo like `count = 10000`
/// must not rent ten thousand machines.
pub const GROUP_COUNT_MAX: u32 = 1024;

/// Most logical nodes a whole plan may ask for (P1).
pub const PLAN_NODES_MAX: u32 = 4096;

/// Longest group id (P2): a node id `{group}-{index}` must fit a DNS label
/// (63 characters) with room for the largest index suffix (`-1023`).
pub const GROUP_ID_LEN_MAX: usize = 58;

/// Most lease attempts a bounded replacement policy may allow per node (P8).
pub const REPLACEMENT_ATTEMPTS_MAX: u32 = 16;

/// The placeholders the SSH port substitutes in bootstrap commands.
pub const START_PLACEHOLDERS: [&str; 5] = [
    "${ORCH_ADDR}",
    "${LOGICAL_NODE_ID}",
    "${RUN_ID}",
    "${LEASE_ID}",
    "${JOIN_TOKEN}",
];

const JOIN_TOKEN: &str = "${JOIN_TOKEN}";

/// One rule a plan breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    /// The group the field belongs to, when it belongs to a named group.
    pub group: Option<GroupId>,
    /// Dotted path of the field from the plan root: `groups[1].boot.start_command`.
    pub field: String,
    /// What is wrong, in words.
    pub reason: String,
}

impl PlanError {
    /// The field's path inside its group (`boot.start_command`), or the full
    /// path for plan-level fields.
    pub fn field_in_group(&self) -> &str {
        match (&self.group, self.field.split_once("].")) {
            (Some(_), Some((prefix, rest))) if prefix.starts_with("groups[") => rest,
            _ => &self.field,
        }
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.group {
            Some(group) => write!(
                f,
                "group `{}` {}: {}",
                group,
                self.field_in_group(),
                self.reason
            ),
            None => write!(f, "{}: {}", self.field, self.reason),
        }
    }
}

impl std::error::Error for PlanError {}

/// Checks every rule of the plan and returns all violations, in plan order
/// (plan-level fields, then each group's fields as declared, then the
/// replacement policy).
pub fn validate(plan: &RunPlan) -> Result<(), Vec<PlanError>> {
    let mut check = Checker::default();
    check.plan_level(plan);
    let mut first_index_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, group) in plan.groups.iter().enumerate() {
        let mut scope = check.group(index, group);
        if let Some(first) = first_index_of.get(group.group_id.as_str()) {
            scope.err("group_id", format!("duplicates the id of groups[{first}]"));
        } else {
            first_index_of.insert(group.group_id.as_str(), index);
        }
        scope.group_fields(group);
    }
    check.replacement(&plan.replacement);
    if check.errors.is_empty() {
        Ok(())
    } else {
        Err(check.errors)
    }
}

#[derive(Default)]
struct Checker {
    errors: Vec<PlanError>,
}

impl Checker {
    fn plan_level(&mut self, plan: &RunPlan) {
        if plan.groups.is_empty() {
            self.push(None, "groups", "a plan needs at least one node group");
        }
        let total: u64 = plan.groups.iter().map(|g| u64::from(g.count)).sum();
        if total > u64::from(PLAN_NODES_MAX) {
            self.push(
                None,
                "groups",
                &format!("{total} nodes in all; at most {PLAN_NODES_MAX}"),
            );
        }
    }

    fn replacement(&mut self, policy: &ReplacementPolicy) {
        let ReplacementPolicy::Bounded {
            attempts_max,
            backoff_base,
            backoff_max,
            quarantine_after_failures,
        } = *policy
        else {
            return;
        };
        if !(1..=REPLACEMENT_ATTEMPTS_MAX).contains(&attempts_max) {
            let reason = format!("must be 1..={REPLACEMENT_ATTEMPTS_MAX}, got {attempts_max}");
            self.push(None, "replacement.attempts_max", &reason);
        }
        if backoff_base == Duration::ZERO {
            self.push(None, "replacement.backoff_base", "must be positive");
        }
        if backoff_base > backoff_max {
            let reason = format!("{backoff_max} is below backoff_base {backoff_base}");
            self.push(None, "replacement.backoff_max", &reason);
        }
        if quarantine_after_failures == 0 {
            let reason = "must be at least 1 (0 would quarantine every host)";
            self.push(None, "replacement.quarantine_after_failures", reason);
        }
    }

    fn group(&mut self, index: usize, group: &NodeGroupSpec) -> GroupScope<'_> {
        let name = &group.group_id;
        GroupScope {
            errors: &mut self.errors,
            prefix: format!("groups[{index}]"),
            group: (!name.as_str().is_empty()).then(|| name.clone()),
        }
    }

    fn push(&mut self, group: Option<GroupId>, field: &str, reason: &str) {
        self.errors.push(PlanError {
            group,
            field: field.to_owned(),
            reason: reason.to_owned(),
        });
    }
}

/// Collects errors for the fields of one group.
struct GroupScope<'a> {
    errors: &'a mut Vec<PlanError>,
    prefix: String,
    group: Option<GroupId>,
}

impl GroupScope<'_> {
    fn err(&mut self, field: &str, reason: impl Into<String>) {
        self.errors.push(PlanError {
            group: self.group.clone(),
            field: format!("{}.{}", self.prefix, field),
            reason: reason.into(),
        });
    }

    fn group_fields(&mut self, group: &NodeGroupSpec) {
        if let Some(reason) = group_id_problem(&group.group_id) {
            self.err("group_id", reason);
        }
        if group.role.as_str().trim().is_empty() {
            self.err("role", "must not be empty");
        }
        if !(1..=GROUP_COUNT_MAX).contains(&group.count) {
            let reason = format!("must be 1..={GROUP_COUNT_MAX}, got {}", group.count);
            self.err("count", reason);
        }
        self.shape(&group.shape);
        self.boot(&group.boot);
        self.join(&group.join);
    }

    fn shape(&mut self, shape: &DesiredShape) {
        text_field(self, "shape.image", &shape.image);
        if shape.disk_gb == 0 {
            self.err("shape.disk_gb", "must be positive");
        }
        if shape
            .gpu_name
            .as_deref()
            .is_some_and(|g| g.trim().is_empty())
        {
            self.err("shape.gpu_name", "must not be empty when given");
        }
        if let Some(r) = shape.min_reliability_per_mille.filter(|r| *r > 1000) {
            let reason = format!("is per mille, at most 1000, got {r}");
            self.err("shape.min_reliability_per_mille", reason);
        }
        if shape.max_price_cents_per_hour == Some(0) {
            self.err("shape.max_price_cents_per_hour", "0 matches no offer");
        }
        if shape.provider_labels.keys().any(|k| k.trim().is_empty()) {
            self.err("shape.provider_labels", "a label key is empty");
        }
    }

    fn boot(&mut self, boot: &BootSpec) {
        text_field(self, "boot.ssh_user", &boot.ssh_user);
        for (i, command) in boot.verify_commands.iter().enumerate() {
            let field = format!("boot.verify_commands[{i}]");
            self.command_without_token(&field, command);
        }
        if boot.start_command.trim().is_empty() {
            self.err("boot.start_command", "must not be empty");
        } else if !boot.start_command.contains(JOIN_TOKEN) {
            let reason = "must pass ${JOIN_TOKEN} to the agent (the only way its one-time join token reaches it)";
            self.err("boot.start_command", reason);
        }
        let sources = [
            ("stdout_sources", &boot.stdout_sources),
            ("stderr_sources", &boot.stderr_sources),
        ];
        for (name, list) in sources {
            for (i, source) in list.iter().enumerate() {
                self.command_without_token(&format!("boot.{name}[{i}]"), source);
            }
        }
        self.timeouts(&boot.timeouts);
    }

    /// Only the start command gets a freshly minted token; anywhere else the
    /// placeholder would stay literal or, worse, put a token in a log.
    fn command_without_token(&mut self, field: &str, text: &str) {
        if text.trim().is_empty() {
            self.err(field, "must not be empty");
        } else if text.contains(JOIN_TOKEN) {
            self.err(field, "only boot.start_command may use ${JOIN_TOKEN}");
        }
    }

    fn timeouts(&mut self, t: &TimeoutPolicy) {
        let all = t.named();
        for (name, value) in all {
            if value == Duration::ZERO {
                self.err(&format!("boot.timeouts.{name}"), "must be positive");
            }
        }
        let pairs = [
            (
                "endpoint_poll_interval",
                t.endpoint_poll_interval,
                "endpoint_timeout",
                t.endpoint_timeout,
            ),
            (
                "ssh_retry_interval",
                t.ssh_retry_interval,
                "ssh_connect_timeout",
                t.ssh_connect_timeout,
            ),
        ];
        for (short_name, short, long_name, long) in pairs {
            if short != Duration::ZERO && short >= long {
                let reason = format!("{short} must be shorter than {long_name} {long}");
                self.err(&format!("boot.timeouts.{short_name}"), reason);
            }
        }
    }

    fn join(&mut self, join: &JoinSpec) {
        text_field(self, "join.orchestrator_addr", &join.orchestrator_addr);
        text_field(self, "join.join_token_ref", &join.join_token_ref);
    }
}

/// A single-word field: non-empty and without whitespace.
fn text_field(scope: &mut GroupScope<'_>, field: &str, value: &str) {
    if value.trim().is_empty() {
        scope.err(field, "must not be empty");
    } else if value.chars().any(char::is_whitespace) {
        scope.err(field, "must not contain whitespace");
    }
}

/// Why `id` is not a DNS-label-like group id, if it is not.
fn group_id_problem(id: &GroupId) -> Option<String> {
    let id = id.as_str();
    if id.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if id.len() > GROUP_ID_LEN_MAX {
        return Some(format!(
            "is {} characters; at most {GROUP_ID_LEN_MAX}",
            id.len()
        ));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !id.chars().all(allowed) {
        return Some("may hold only a-z, 0-9 and '-'".to_owned());
    }
    if !id.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Some("must start with a letter a-z".to_owned());
    }
    if id.ends_with('-') {
        return Some("must not end with '-'".to_owned());
    }
    // A well-formed id always yields a well-formed node id; the assertion
    // keeps the two rules from drifting apart.
    debug_assert!(
        node_id(&GroupId::from(id), GROUP_COUNT_MAX - 1)
            .as_str()
            .len()
            <= 63
    );
    None
}
