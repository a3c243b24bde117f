//! Plan files: the examples parse; a plan survives `to_string` and back; a
//! table of bad plans and every error each one gets (snapshot).

use core_fsm::ids::LogicalNodeId;
use core_fsm::ids::{GroupId, RunId};
use core_fsm::plan::{ProviderKind, ReplacementPolicy, RunPlan};
use core_fsm::time::Duration;
use runtime_real::plan_toml::{PlanFileError, parse, parse_str, to_string};
use runtime_real::provider::static_hosts::hosts::of_plan;
use std::path::Path;

fn example(name: &str) -> RunPlan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    parse(&path).unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn every_example_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for name in &names {
        example(name);
    }
}

#[test]
fn the_local_example_has_three_workers() {
    let plan = example("local.toml");
    assert_eq!(plan.groups.len(), 1);
    assert_eq!(plan.groups[0].provider, ProviderKind::Local);
    assert_eq!(plan.groups[0].count, 3);
    assert!(plan.groups[0].boot.start_command.contains("${JOIN_TOKEN}"));
}

#[test]
fn the_docker_example_and_its_gpus_round_trip() {
    let plan = example("docker.toml");
    assert_eq!(plan.groups[0].provider, ProviderKind::Docker);
    assert_eq!(plan.groups[0].count, 3);
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/docker.toml"),
    )
    .unwrap()
    .replace("# gpus = \"all\"", "gpus = \"all\"");
    let with_gpus = parse_str(&text, "docker.toml").unwrap_or_else(|e| panic!("{e}"));
    let labels = &with_gpus.groups[0].shape.provider_labels;
    assert_eq!(labels.get("docker.gpus").map(String::as_str), Some("all"));
    let written = runtime_real::plan_toml::to_string(&with_gpus);
    assert!(written.contains("gpus = \"all\""), "{written}");
    assert_eq!(parse_str(&written, "again.toml").unwrap(), with_gpus);
}

#[test]
fn the_static_example_parses() {
    let plan = example("static.toml");
    assert_eq!(plan.run_id, RunId(7));
    assert_eq!(plan.replacement, ReplacementPolicy::None);
    let names: Vec<&str> = plan.groups.iter().map(|g| g.group_id.as_str()).collect();
    assert_eq!(names, ["head", "gpu"]);
    let gpu = &plan.groups[1];
    assert_eq!(gpu.provider, ProviderKind::Static);
    assert_eq!(gpu.shape.min_compute_capability, Some(890));
    assert_eq!(
        plan.groups[0].boot.timeouts.join_timeout,
        Duration::from_secs(90)
    );
    // Unlisted timeouts keep their defaults.
    let defaults = core_fsm::plan::TimeoutPolicy::default();
    assert_eq!(gpu.boot.timeouts, defaults);
    // One machine per node; `~/` is the home folder.
    let hosts = of_plan(&plan).unwrap();
    let home = std::env::var("HOME").unwrap();
    let names: Vec<String> = hosts.iter().map(|(n, h)| format!("{n} {h}")).collect();
    assert_eq!(
        names,
        [
            "gpu-0 root@10.0.0.6:22",
            "gpu-1 root@10.0.0.7:22",
            "head-0 root@10.0.0.5:22"
        ]
    );
    assert_eq!(
        hosts[&LogicalNodeId::from("gpu-1")].key_file,
        format!("{home}/.ssh/id_ed25519")
    );
}

#[test]
fn a_relative_key_file_is_relative_to_the_plan_file() {
    let dir = std::env::temp_dir().join(format!("drover-plan-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = static_plan().replace("/keys/a", "keys/a");
    std::fs::write(dir.join("plan.toml"), text).unwrap();
    let plan = parse(&dir.join("plan.toml")).unwrap();
    let hosts = of_plan(&plan).unwrap();
    assert_eq!(
        Path::new(&hosts[&LogicalNodeId::from("hosts-0")].key_file),
        dir.join("keys/a")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A valid static group of two machines.
fn static_plan() -> String {
    format!("run_id = 1\n{GROUP}")
        .replace("provider = \"local\"", "provider = \"static\"")
        .replace("name = \"workers\"", "name = \"hosts\"")
        + r#"
[[group.host]]
host = "127.0.0.1"
port = 2222
key_file = "/keys/a"

[[group.host]]
host = "::1"
user = "ops"
key_file = "/keys/b"
"#
}

#[test]
fn static_hosts_are_read_with_defaults() {
    let plan = parse_str(&static_plan(), "static.toml").unwrap_or_else(|e| panic!("{e}"));
    let hosts = of_plan(&plan).unwrap();
    let names: Vec<String> = hosts.iter().map(|(n, h)| format!("{n} {h}")).collect();
    assert_eq!(
        names,
        ["hosts-0 drover@127.0.0.1:2222", "hosts-1 ops@[::1]:22"]
    );
    assert_eq!(
        hosts[&LogicalNodeId::from("hosts-1")].lease_id().as_str(),
        "static:::1:22"
    );
}

#[test]
fn the_vast_fake_example_parses() {
    let plan = example("vast-fake.toml");
    let group = &plan.groups[0];
    assert_eq!(group.group_id, GroupId::from("workers"));
    assert_eq!(group.provider, ProviderKind::Vastai);
    assert_eq!(group.shape.min_reliability_per_mille, Some(970));
    assert_eq!(group.shape.max_price_cents_per_hour, Some(40));
    assert_eq!(
        group.boot.timeouts.endpoint_timeout,
        Duration::from_secs(900)
    );
    assert_eq!(
        plan.replacement,
        ReplacementPolicy::Bounded {
            attempts_max: 3,
            backoff_base: Duration::from_secs(10),
            backoff_max: Duration::from_secs(120),
            quarantine_after_failures: 2,
        }
    );
}

#[test]
fn the_spec_example_parses() {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/control-plane.md");
    let spec = std::fs::read_to_string(spec).unwrap();
    let section = &spec[spec.find("## Plan files").expect("the section exists")..];
    let start = section.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + section[start..].find("```").expect("the block ends");
    let plan = parse_str(&section[start..end], "spec/control-plane.md")
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(plan.groups[0].shape.min_reliability_per_mille, Some(980));
    assert_eq!(plan.groups[0].shape.min_compute_capability, Some(860));
    assert_eq!(plan.groups[0].shape.max_price_cents_per_hour, Some(45));
    // The defaults the spec lists are the defaults.
    let defaults = core_fsm::plan::TimeoutPolicy::default();
    assert_eq!(plan.groups[0].boot.timeouts, defaults);
    // The static group's block, as a plan of its own.
    let rest = &section[end..];
    let start = rest.find("```toml\n").expect("a static block") + "```toml\n".len();
    let end = start + rest[start..].find("```").expect("the block ends");
    let text = format!("run_id = 1\n{}", &rest[start..end]);
    let plan = parse_str(&text, "spec/control-plane.md").unwrap_or_else(|err| panic!("{err}"));
    let hosts = of_plan(&plan).unwrap();
    assert_eq!(hosts.len(), 2);
    assert_eq!(hosts[&LogicalNodeId::from("gpu-1")].user, "root");
}

#[test]
fn plans_survive_writing_and_reading() {
    let mut full = RunPlan::example_two_workers();
    let shape = &mut full.groups[0].shape;
    shape.min_down_mbps = Some(100);
    shape.min_up_mbps = Some(50);
    shape.min_reliability_per_mille = Some(985);
    shape.require_verified = true;
    shape.min_compute_capability = Some(860);
    shape.max_price_cents_per_hour = Some(45);
    shape
        .provider_labels
        .insert("team \"a\"".to_owned(), "x\\y\u{7f}".to_owned());
    full.groups[0].boot.stdout_sources = vec!["/var/log/a.log".to_owned()];
    full.groups[0].boot.timeouts.join_timeout = Duration::from_millis(90_500);
    full.replacement = ReplacementPolicy::Bounded {
        attempts_max: 4,
        backoff_base: Duration::from_millis(1500),
        backoff_max: Duration::from_secs(3600),
        quarantine_after_failures: 1,
    };
    let mut two = RunPlan::local(3);
    two.groups
        .push(RunPlan::example_two_workers().groups.remove(0));
    two.groups[1].group_id = GroupId::from("gpu");
    let statics = parse_str(&static_plan(), "static.toml").unwrap();
    for plan in [
        RunPlan::local(3),
        RunPlan::example_two_workers(),
        full,
        two,
        statics,
    ] {
        let text = to_string(&plan);
        let back = parse_str(&text, "written.toml").unwrap_or_else(|err| panic!("{err}\n{text}"));
        assert_eq!(back, plan, "{text}");
    }
}

#[test]
fn an_unreadable_file_names_itself() {
    let err = parse(Path::new("/nonexistent/plan.toml")).unwrap_err();
    assert!(matches!(err, PlanFileError::Read { .. }));
    assert!(
        err.to_string().starts_with("/nonexistent/plan.toml: "),
        "{err}"
    );
}

/// A valid group to break one piece at a time.
const GROUP: &str = r#"
[[group]]
name = "workers"
role = "worker"
count = 2
provider = "local"

[group.shape]
image = "local"
disk_gb = 1

[group.boot]
ssh_user = "drover"
start_command = "drover-agent --join ${ORCH_ADDR} --node ${LOGICAL_NODE_ID} --token ${JOIN_TOKEN}"
"#;

fn bad_plans() -> Vec<(&'static str, String)> {
    let valid = format!("run_id = 1\n{GROUP}");
    let with = |from: &str, to: &str| {
        assert!(valid.contains(from), "{from}");
        valid.replacen(from, to, 1)
    };
    vec![
        ("syntax: an unclosed table header", with("[group.shape]", "[group.shape")),
        ("syntax: a value without quotes", with("role = \"worker\"", "role = worker")),
        ("empty file", String::new()),
        ("no groups", "run_id = 1\n".to_owned()),
        ("group as a plain table", with("[[group]]", "[group]")),
        (
            "wrong types",
            with("count = 2", "count = \"two\"")
                .replace("disk_gb = 1", "disk_gb = 8.5\nrequire_verified = \"yes\""),
        ),
        ("negative run id", with("run_id = 1", "run_id = -1")),
        ("count beyond u32", with("count = 2", "count = 5000000000")),
        (
            "unknown fields everywhere",
            with("run_id = 1", "run_id = 1\ncolour = \"blue\"")
                .replace("disk_gb = 1", "disk_gb = 1\ngpu = \"RTX 4090\"")
                .replace("ssh_user", "timeout = \"1s\"\nssh_user"),
        ),
        (
            "missing fields",
            "run_id = 1\n[[group]]\nname = \"workers\"\ncount = 1\n\n[group.boot]\nssh_user = \"root\"\n"
                .to_owned(),
        ),
        ("unknown provider", with("provider = \"local\"", "provider = \"aws\"")),
        (
            "fractions",
            with(
                "disk_gb = 1",
                "disk_gb = 1\nmin_reliability = 0.9875\nmin_compute_capability = 8.655\nmax_price_usd_per_hour = 0.455",
            ),
        ),
        ("reliability above 1", with("disk_gb = 1", "disk_gb = 1\nmin_reliability = 1.5")),
        (
            "durations",
            format!(
                "{valid}\n[group.boot.timeouts]\njoin_timeout = 120\nstart_timeout = \"2 minutes\"\ncommand_timeout = \"0s\"\nendpoint_timeout = \"5m\"\nendpoint_poll_interval = \"10m\"\n"
            ),
        ),
        (
            "rules of the plan",
            with("name = \"workers\"", "name = \"Workers_1\"")
                .replace("count = 2", "count = 0")
                .replace(" --token ${JOIN_TOKEN}", "")
                .replace(
                    "ssh_user",
                    "verify_commands = [\"true\", \"echo ${JOIN_TOKEN}\"]\nssh_user",
                ),
        ),
        ("duplicate groups", format!("{valid}{GROUP}")),
        (
            "a defaulted timeout breaks a rule",
            format!("{valid}\n[group.boot.timeouts]\nendpoint_timeout = \"1s\"\n"),
        ),
        (
            "bounded replacement rules",
            format!(
                "{valid}\n[replacement]\npolicy = \"bounded\"\nattempts_max = 0\nbackoff_base = \"10s\"\nbackoff_max = \"5s\"\nquarantine_after_failures = 0\n"
            ),
        ),
        (
            "replacement keys without bounded",
            format!("{valid}\n[replacement]\npolicy = \"none\"\nattempts_max = 3\n"),
        ),
        ("unknown policy", format!("{valid}\n[replacement]\npolicy = \"sometimes\"\n")),
        (
            "a static group without hosts",
            with("provider = \"local\"", "provider = \"static\""),
        ),
        (
            "static hosts: count, names, port, key, unknown key, a machine twice",
            static_plan()
                .replace("count = 2", "count = 4")
                .replace("host = \"::1\"", "host = \"a b\"\nport = 0\nkey_file = \"\"\nkeyfile = \"x\"")
                .replace("key_file = \"/keys/b\"\n", "")
                .replace("user = \"ops\"", "user = \"a@b\"")
                + "\n[[group.host]]\nhost = \"127.0.0.1\"\nport = 2222\nkey_file = \"/k\"\n",
        ),
        (
            "hosts on a local group, a reserved label",
            format!("{valid}\n[[group.host]]\nhost = \"h\"\nkey_file = \"/k\"\n")
                .replace("disk_gb = 1", "disk_gb = 1\n\n[group.shape.provider_labels]\n\"static.host.0\" = \"x\""),
        ),
        (
            "vastai labels: unknown, a bid in dollars, a bad rate unit and URL",
            with("provider = \"local\"", "provider = \"vastai\"").replace(
                "disk_gb = 1",
                "disk_gb = 1\n\n[group.shape.provider_labels]\n\"vastai.bid_cents_per_hour\" = \"0.30\"\n\"vastai.base_ulr\" = \"http://x\"\n\"vastai.base_url\" = \"ftp://x\"\n\"vastai.rate_unit_ms\" = \"fast\"\nnote = \"mine\"",
            ),
        ),
        (
            "vastai labels on a local group",
            with(
                "disk_gb = 1",
                "disk_gb = 1\n\n[group.shape.provider_labels]\n\"vastai.bid_cents_per_hour\" = \"30\"",
            ),
        ),
        ("hosts as a plain table", static_plan().replacen("[[group.host]]", "[group.host]", 1).replacen("[[group.host]]", "", 1).replace("host = \"::1\"\nuser = \"ops\"\nkey_file = \"/keys/b\"\n", "")),
        (
            "pipeline: split length, threads, ctx, backend, prefill_chunk",
            format!(
                "{valid}\n[model]\npath = \"m.gguf\"\n\n[pipeline]\ngroup = \"workers\"\nsplit = [1, 2, 3]\nthreads = 5000\nctx = -1\nbackend = \"rocm\"\nprefill_chunk = 0.5\n"
            ),
        ),
        (
            "structural and rule errors together",
            with("count = 2", "count = 0").replace("disk_gb = 1", "disk_gb = \"big\""),
        ),
    ]
}

#[test]
fn bad_plans_and_their_errors() {
    let mut out = String::new();
    for (name, text) in bad_plans() {
        let file = format!("{}.toml", name.replace([' ', ':'], "-"));
        let err = match parse_str(&text, &file) {
            Ok(_) => panic!("{name}: accepted"),
            Err(err) => err,
        };
        assert!(matches!(err, PlanFileError::Invalid { .. }));
        out.push_str(&format!("## {name}\n{err}\n\n"));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn errors_never_quote_a_command() {
    let text =
        format!("run_id = 1\n{GROUP}").replace(" --token ${JOIN_TOKEN}", " --password hunter2");
    let err = parse_str(&text, "plan.toml").unwrap_err().to_string();
    assert!(err.contains("boot.start_command"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}
