//! The trace format: a case as versioned, line-oriented text.
//!
//! ```text
//! drover-trace v1
//! scenario bad-hosts
//! seed 17
//! profile groups=2,1 verify=1 replacement=bounded/3/5000/60000/2 hosts=6 ...
//! rates exited=120 ssh-refused=40
//! at 35000 crash restart=4000
//! op create#2 ambiguous-created
//! net lookup#4 delay ms=3000
//! lease 0 stale-join
//! host 3 verify-fails
//! end
//! ```
//!
//! `#` starts a comment line. Every item is one line; the order of items does
//! not matter to the world (it keys them by time or ordinal), but writing
//! sorts them so a trace diff reads well.

use crate::case::{Action, Case, HostFault, Item, LeaseFault, NetFault, OpFault, OpKind, Profile};
use core_fsm::plan::ReplacementPolicy;
use core_fsm::time::Duration;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The first line of every trace.
pub const HEADER: &str = "drover-trace v1";

/// Writes a case as trace text.
pub fn write(case: &Case) -> String {
    let p = &case.profile;
    let mut out = String::new();
    let groups: Vec<String> = p.groups.iter().map(u32::to_string).collect();
    let _ = writeln!(out, "{HEADER}");
    let _ = writeln!(out, "scenario {}", case.scenario);
    let _ = writeln!(out, "seed {}", case.seed);
    let _ = writeln!(
        out,
        "profile groups={} verify={} replacement={} hosts={} endpoint-on-create={} \
         fsync={} latency={} boot={} ssh={} join={} heal={} system-seed={}",
        groups.join(","),
        p.verify_commands,
        replacement_text(&p.replacement),
        p.hosts,
        p.endpoint_on_create,
        p.fsync_ms,
        p.latency_ms,
        p.boot_ms,
        p.ssh_ms,
        p.join_ms,
        p.heal_at_ms,
        p.system_seed
    );
    let rates: Vec<String> = p.rates.iter().map(|(n, r)| format!("{n}={r}")).collect();
    let _ = writeln!(out, "rates {}", rates.join(" "));
    let mut items = case.items.clone();
    items.sort();
    for item in &items {
        let _ = writeln!(out, "{}", item_text(item));
    }
    out.push_str("end\n");
    out
}

fn replacement_text(policy: &ReplacementPolicy) -> String {
    match policy {
        ReplacementPolicy::None => "none".to_owned(),
        ReplacementPolicy::Bounded {
            attempts_max,
            backoff_base,
            backoff_max,
            quarantine_after_failures,
        } => format!(
            "bounded/{attempts_max}/{}/{}/{quarantine_after_failures}",
            backoff_base.as_millis(),
            backoff_max.as_millis()
        ),
    }
}

/// One item as a trace line.
pub fn item_text(item: &Item) -> String {
    match item {
        Item::At { at, action } => format!("at {at} {}", action_text(action)),
        Item::Op { op, nth, fault } => format!("op {op}#{nth} {}", op_fault_text(fault)),
        Item::Net { op, nth, fault } => format!("net {op}#{nth} {}", net_fault_text(fault)),
        Item::CrashAfterEffect {
            nth,
            restart_after_ms,
        } => format!("crash-after-effect {nth} restart={restart_after_ms}"),
        Item::CrashBeforeSync {
            nth,
            restart_after_ms,
        } => format!("crash-before-sync {nth} restart={restart_after_ms}"),
        Item::Lease { nth, fault } => format!("lease {nth} {}", lease_fault_text(fault)),
        Item::Host { host, fault } => format!("host {host} {}", host_fault_text(fault)),
    }
}

fn action_text(action: &Action) -> String {
    match action {
        Action::Crash { restart_after_ms } => format!("crash restart={restart_after_ms}"),
        Action::Storm { ms } => format!("storm ms={ms}"),
        Action::Teardown => "teardown".to_owned(),
        Action::Destroy { node } => format!("destroy node={node}"),
        Action::Scale { group, count } => format!("scale group={group} count={count}"),
        Action::UnknownAnswer => "unknown-answer".to_owned(),
    }
}

fn op_fault_text(fault: &OpFault) -> String {
    match fault {
        OpFault::RateLimited => "rate-limited".to_owned(),
        OpFault::ServerError => "server-error".to_owned(),
        OpFault::OfferGone => "offer-gone".to_owned(),
        OpFault::AmbiguousCreated => "ambiguous-created".to_owned(),
        OpFault::AmbiguousNotCreated => "ambiguous-not-created".to_owned(),
        OpFault::DoubleRent => "double-rent".to_owned(),
        OpFault::Invisible { ms } => format!("invisible ms={ms}"),
        OpFault::Refused => "refused".to_owned(),
        OpFault::Timeout => "timeout".to_owned(),
        OpFault::AuthDenied => "auth-denied".to_owned(),
        OpFault::Reset => "reset".to_owned(),
        OpFault::Exit { code } => format!("exit code={code}"),
    }
}

fn net_fault_text(fault: &NetFault) -> String {
    match fault {
        NetFault::Delay { ms } => format!("delay ms={ms}"),
        NetFault::Drop => "drop".to_owned(),
        NetFault::Duplicate => "duplicate".to_owned(),
    }
}

fn lease_fault_text(fault: &LeaseFault) -> String {
    match fault {
        LeaseFault::StuckLoading => "stuck-loading".to_owned(),
        LeaseFault::SlowBoot { ms } => format!("slow-boot ms={ms}"),
        LeaseFault::SshLate { ms } => format!("ssh-late ms={ms}"),
        LeaseFault::Exits { after_ms } => format!("exits after={after_ms}"),
        LeaseFault::Offline { after_ms } => format!("offline after={after_ms}"),
        LeaseFault::Outbid { after_ms } => format!("outbid after={after_ms}"),
        LeaseFault::AgentNeverJoins => "agent-never-joins".to_owned(),
        LeaseFault::AgentWrongToken => "agent-wrong-token".to_owned(),
        LeaseFault::AgentJoinsTwice => "agent-joins-twice".to_owned(),
        LeaseFault::AgentCrashesAfterHandoff => "agent-crashes-after-handoff".to_owned(),
        LeaseFault::StaleJoin => "stale-join".to_owned(),
    }
}

fn host_fault_text(fault: &HostFault) -> &'static str {
    match fault {
        HostFault::Refuses => "refuses",
        HostFault::VerifyFails => "verify-fails",
        HostFault::Exits => "exits",
    }
}

/// Parses trace text into a case; the error names the line.
pub fn parse(text: &str) -> Result<Case, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    match lines.next() {
        Some((_, HEADER)) => {}
        Some((n, other)) => return Err(format!("line {n}: expected `{HEADER}`, got `{other}`")),
        None => return Err("empty trace".to_owned()),
    }
    let mut scenario = None;
    let mut seed = None;
    let mut profile = None;
    let mut rates = Vec::new();
    let mut items = Vec::new();
    let mut ended = false;
    for (n, line) in lines {
        let at = |e: String| format!("line {n}: {e}");
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "scenario" => scenario = Some(rest.to_owned()),
            "seed" => seed = Some(rest.parse::<u64>().map_err(|e| at(e.to_string()))?),
            "profile" => profile = Some(parse_profile(rest).map_err(at)?),
            "rates" => rates = parse_rates(rest).map_err(at)?,
            "end" => {
                ended = true;
                break;
            }
            _ => items.push(parse_item(word, rest).map_err(at)?),
        }
    }
    if !ended {
        return Err("trace has no `end` line (truncated?)".to_owned());
    }
    let mut profile = profile.ok_or("trace has no `profile` line")?;
    profile.rates = rates;
    Ok(Case {
        scenario: scenario.ok_or("trace has no `scenario` line")?,
        seed: seed.ok_or("trace has no `seed` line")?,
        profile,
        items,
    })
}

fn keyed(rest: &str) -> Result<BTreeMap<&str, &str>, String> {
    rest.split_whitespace()
        .map(|kv| {
            kv.split_once('=')
                .ok_or(format!("expected key=value, got `{kv}`"))
        })
        .collect()
}

fn num(map: &BTreeMap<&str, &str>, key: &str) -> Result<u64, String> {
    let text = map.get(key).ok_or(format!("missing `{key}=`"))?;
    text.parse::<u64>()
        .map_err(|e| format!("`{key}={text}`: {e}"))
}

fn parse_profile(rest: &str) -> Result<Profile, String> {
    let map = keyed(rest)?;
    let groups = map
        .get("groups")
        .ok_or("missing `groups=`")?
        .split(',')
        .map(|g| g.parse::<u32>().map_err(|e| format!("groups: {e}")))
        .collect::<Result<Vec<u32>, String>>()?;
    let small =
        |key: &str| num(&map, key).and_then(|v| u32::try_from(v).map_err(|e| e.to_string()));
    Ok(Profile {
        groups,
        verify_commands: small("verify")?,
        replacement: parse_replacement(map.get("replacement").ok_or("missing `replacement=`")?)?,
        hosts: small("hosts")?,
        endpoint_on_create: match map.get("endpoint-on-create") {
            Some(&"true") => true,
            Some(&"false") => false,
            other => return Err(format!("endpoint-on-create: {other:?}")),
        },
        fsync_ms: num(&map, "fsync")?,
        latency_ms: num(&map, "latency")?,
        boot_ms: num(&map, "boot")?,
        ssh_ms: num(&map, "ssh")?,
        join_ms: num(&map, "join")?,
        heal_at_ms: num(&map, "heal")?,
        system_seed: num(&map, "system-seed")?,
        rates: Vec::new(),
    })
}

fn parse_replacement(text: &str) -> Result<ReplacementPolicy, String> {
    if text == "none" {
        return Ok(ReplacementPolicy::None);
    }
    let parts: Vec<&str> = text.split('/').collect();
    let n = |i: usize| -> Result<u64, String> {
        parts
            .get(i)
            .ok_or(format!("replacement `{text}`: too few fields"))?
            .parse::<u64>()
            .map_err(|e| format!("replacement `{text}`: {e}"))
    };
    if parts.first() != Some(&"bounded") || parts.len() != 5 {
        return Err(format!(
            "replacement `{text}`: expected none or bounded/a/b/m/q"
        ));
    }
    let small = |i: usize| n(i).and_then(|v| u32::try_from(v).map_err(|e| e.to_string()));
    Ok(ReplacementPolicy::Bounded {
        attempts_max: small(1)?,
        backoff_base: Duration::from_millis(n(2)?),
        backoff_max: Duration::from_millis(n(3)?),
        quarantine_after_failures: small(4)?,
    })
}

fn parse_rates(rest: &str) -> Result<Vec<(String, u32)>, String> {
    keyed(rest)?
        .into_iter()
        .map(|(k, v)| {
            v.parse::<u32>()
                .map(|r| (k.to_owned(), r))
                .map_err(|e| format!("rate {k}: {e}"))
        })
        .collect()
}

fn ordinal(text: &str) -> Result<(OpKind, u32), String> {
    let (kind, nth) = text
        .split_once('#')
        .ok_or(format!("expected kind#n, got `{text}`"))?;
    let op = OpKind::parse(kind).ok_or(format!("unknown operation `{kind}`"))?;
    Ok((
        op,
        nth.parse::<u32>().map_err(|e| format!("`{text}`: {e}"))?,
    ))
}

fn parse_item(word: &str, rest: &str) -> Result<Item, String> {
    let (head, tail) = rest.split_once(' ').unwrap_or((rest, ""));
    let (name, args) = tail.split_once(' ').unwrap_or((tail, ""));
    let small = |t: &str| t.parse::<u32>().map_err(|e| format!("`{t}`: {e}"));
    match word {
        "at" => Ok(Item::At {
            at: head.parse::<u64>().map_err(|e| format!("`{head}`: {e}"))?,
            action: parse_action(name, &keyed(args)?)?,
        }),
        "op" => {
            let (op, nth) = ordinal(head)?;
            let fault = parse_op_fault(name, &keyed(args)?)?;
            Ok(Item::Op { op, nth, fault })
        }
        "net" => {
            let (op, nth) = ordinal(head)?;
            let fault = parse_net_fault(name, &keyed(args)?)?;
            Ok(Item::Net { op, nth, fault })
        }
        "crash-after-effect" | "crash-before-sync" => {
            let nth = small(head)?;
            let restart_after_ms = num(&keyed(tail)?, "restart")?;
            Ok(if word == "crash-after-effect" {
                Item::CrashAfterEffect {
                    nth,
                    restart_after_ms,
                }
            } else {
                Item::CrashBeforeSync {
                    nth,
                    restart_after_ms,
                }
            })
        }
        "lease" => Ok(Item::Lease {
            nth: small(head)?,
            fault: parse_lease_fault(name, &keyed(args)?)?,
        }),
        "host" => Ok(Item::Host {
            host: small(head)?,
            fault: match tail {
                "refuses" => HostFault::Refuses,
                "verify-fails" => HostFault::VerifyFails,
                "exits" => HostFault::Exits,
                other => return Err(format!("unknown host fault `{other}`")),
            },
        }),
        other => Err(format!("unknown line kind `{other}`")),
    }
}

fn parse_action(name: &str, args: &BTreeMap<&str, &str>) -> Result<Action, String> {
    Ok(match name {
        "crash" => Action::Crash {
            restart_after_ms: num(args, "restart")?,
        },
        "storm" => Action::Storm {
            ms: num(args, "ms")?,
        },
        "teardown" => Action::Teardown,
        "destroy" => Action::Destroy {
            node: u32::try_from(num(args, "node")?).map_err(|e| e.to_string())?,
        },
        "unknown-answer" => Action::UnknownAnswer,
        "scale" => Action::Scale {
            group: u32::try_from(num(args, "group")?).map_err(|e| e.to_string())?,
            count: u32::try_from(num(args, "count")?).map_err(|e| e.to_string())?,
        },
        other => return Err(format!("unknown action `{other}`")),
    })
}

fn parse_op_fault(name: &str, args: &BTreeMap<&str, &str>) -> Result<OpFault, String> {
    Ok(match name {
        "rate-limited" => OpFault::RateLimited,
        "server-error" => OpFault::ServerError,
        "offer-gone" => OpFault::OfferGone,
        "ambiguous-created" => OpFault::AmbiguousCreated,
        "ambiguous-not-created" => OpFault::AmbiguousNotCreated,
        "double-rent" => OpFault::DoubleRent,
        "invisible" => OpFault::Invisible {
            ms: num(args, "ms")?,
        },
        "refused" => OpFault::Refused,
        "timeout" => OpFault::Timeout,
        "auth-denied" => OpFault::AuthDenied,
        "reset" => OpFault::Reset,
        "exit" => {
            let text = args.get("code").ok_or("missing `code=`")?;
            OpFault::Exit {
                code: text.parse::<i32>().map_err(|e| format!("code: {e}"))?,
            }
        }
        other => return Err(format!("unknown operation fault `{other}`")),
    })
}

fn parse_net_fault(name: &str, args: &BTreeMap<&str, &str>) -> Result<NetFault, String> {
    Ok(match name {
        "delay" => NetFault::Delay {
            ms: num(args, "ms")?,
        },
        "drop" => NetFault::Drop,
        "duplicate" => NetFault::Duplicate,
        other => return Err(format!("unknown network fault `{other}`")),
    })
}

fn parse_lease_fault(name: &str, args: &BTreeMap<&str, &str>) -> Result<LeaseFault, String> {
    Ok(match name {
        "stuck-loading" => LeaseFault::StuckLoading,
        "slow-boot" => LeaseFault::SlowBoot {
            ms: num(args, "ms")?,
        },
        "ssh-late" => LeaseFault::SshLate {
            ms: num(args, "ms")?,
        },
        "exits" => LeaseFault::Exits {
            after_ms: num(args, "after")?,
        },
        "offline" => LeaseFault::Offline {
            after_ms: num(args, "after")?,
        },
        "outbid" => LeaseFault::Outbid {
            after_ms: num(args, "after")?,
        },
        "agent-never-joins" => LeaseFault::AgentNeverJoins,
        "agent-wrong-token" => LeaseFault::AgentWrongToken,
        "agent-joins-twice" => LeaseFault::AgentJoinsTwice,
        "agent-crashes-after-handoff" => LeaseFault::AgentCrashesAfterHandoff,
        "stale-join" => LeaseFault::StaleJoin,
        other => return Err(format!("unknown lease fault `{other}`")),
    })
}
