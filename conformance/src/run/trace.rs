//! A run case as versioned, line-oriented text:
//!
//! ```text
//! drover-run-trace v1
//! scenario run-fatal
//! seed 17
//! profile stages=2 layers=5 requests=3 prompt-seed=99 prompt-max=4 ...
//! rates step-fails=1000
//! fault step-fails 3 0
//! end
//! ```
//!
//! `#` starts a comment line; items are written sorted.

use super::{RunCase, RunFault, RunItem, RunProfile};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The first line of every run trace.
pub const RUN_HEADER: &str = "drover-run-trace v1";

/// Writes a run case as trace text.
pub fn write_run(case: &RunCase) -> String {
    let p = &case.profile;
    let mut out = String::new();
    let _ = writeln!(out, "{RUN_HEADER}");
    let _ = writeln!(out, "scenario {}", case.scenario);
    let _ = writeln!(out, "seed {}", case.seed);
    let _ = writeln!(
        out,
        "profile stages={} layers={} requests={} prompt-seed={} prompt-max={} \
         max-tokens-max={} context={} latency={} spawn={} fetch={} load={} step={} \
         conn-loss={} submit-gap={} heal={} repairs={} replace={}",
        p.stages,
        p.layers,
        p.requests,
        p.prompt_seed,
        p.prompt_max,
        p.max_tokens_max,
        p.context,
        p.latency_ms,
        p.spawn_ms,
        p.fetch_ms,
        p.load_ms,
        p.step_ms,
        p.conn_loss_ms,
        p.submit_gap_ms,
        p.heal_at_ms,
        p.repairs,
        p.replace_ms
    );
    let rates: Vec<String> = p.rates.iter().map(|(n, r)| format!("{n}={r}")).collect();
    let _ = writeln!(out, "rates {}", rates.join(" "));
    let mut items = case.items.clone();
    items.sort();
    for item in &items {
        let _ = writeln!(
            out,
            "fault {} {} {}",
            item.fault.name(),
            item.target,
            item.arg
        );
    }
    out.push_str("end\n");
    out
}

/// Parses run trace text.
pub fn parse_run(text: &str) -> Result<RunCase, String> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    if lines.next() != Some(RUN_HEADER) {
        return Err(format!("a run trace starts with `{RUN_HEADER}`"));
    }
    let mut scenario = None;
    let mut seed = None;
    let mut profile = None;
    let mut rates = Vec::new();
    let mut items = Vec::new();
    for line in lines {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "scenario" => scenario = Some(rest.to_owned()),
            "seed" => seed = Some(number(rest)?),
            "profile" => profile = Some(parse_profile(rest)?),
            "rates" => {
                for pair in rest.split_whitespace() {
                    let (name, rate) = pair.split_once('=').ok_or("rates: name=rate")?;
                    rates.push((name.to_owned(), number(rate)? as u32));
                }
            }
            "fault" => {
                let parts: Vec<&str> = rest.split_whitespace().collect();
                let [name, target, arg] = parts[..] else {
                    return Err(format!("fault: three fields in `{line}`"));
                };
                let fault = RunFault::parse(name).ok_or_else(|| format!("no fault `{name}`"))?;
                let target = number(target)? as u32;
                let arg = number(arg)?;
                items.push(RunItem { fault, target, arg });
            }
            "end" => {
                let mut profile: RunProfile = profile.ok_or("no profile line")?;
                profile.rates = rates;
                return Ok(RunCase {
                    scenario: scenario.ok_or("no scenario line")?,
                    seed: seed.ok_or("no seed line")?,
                    profile,
                    items,
                });
            }
            other => return Err(format!("unknown line `{other}`")),
        }
    }
    Err("no `end` line".to_owned())
}

fn number(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|e| format!("`{text}` is not a number: {e}"))
}

fn parse_profile(text: &str) -> Result<RunProfile, String> {
    let fields: BTreeMap<&str, &str> = text
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let get = |key: &str| -> Result<u64, String> {
        number(
            fields
                .get(key)
                .ok_or_else(|| format!("profile: no `{key}`"))?,
        )
    };
    Ok(RunProfile {
        stages: get("stages")? as u32,
        layers: get("layers")? as u32,
        requests: get("requests")? as u32,
        prompt_seed: get("prompt-seed")?,
        prompt_max: get("prompt-max")? as u32,
        max_tokens_max: get("max-tokens-max")? as u32,
        context: get("context")? as u32,
        latency_ms: get("latency")?,
        spawn_ms: get("spawn")?,
        fetch_ms: get("fetch")?,
        load_ms: get("load")?,
        step_ms: get("step")?,
        conn_loss_ms: get("conn-loss")?,
        submit_gap_ms: get("submit-gap")?,
        heal_at_ms: get("heal")?,
        // Traces written before repairs existed hold neither.
        repairs: get("repairs").unwrap_or(0) as u32,
        replace_ms: get("replace").unwrap_or(0),
        rates: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunScenario, generate_run};

    #[test]
    fn run_traces_round_trip() {
        for scenario in RunScenario::ALL {
            for seed in 0..20 {
                let mut case = generate_run(scenario, seed);
                let back = parse_run(&write_run(&case)).expect("parses");
                case.items.sort();
                assert_eq!(back, case);
            }
        }
        assert!(parse_run("drover-trace v1\nend\n").is_err());
    }
}
