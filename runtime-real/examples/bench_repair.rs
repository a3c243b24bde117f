//! `cargo xtask bench repair`: how fast a dead node is noticed and
//! replaced. A real `drover up` of 20 local nodes with bounded replacement
//! and the default liveness bounds (Suspect 2 s, Dead 5 s of silence); then
//! 20 times, one node's agent and node process are killed with SIGKILL
//! (each node once, so no replacement waits out the plan's backoff for a
//! node that keeps dying; at a moment drawn from a fixed seed) and the
//! clock runs from the kill to membership's `Dead`, and from `Dead` to the
//! replacement's `Dormant` (ready, on a new lease). Printed: each kill,
//! then p50/max of both against the targets (Dead <= 5 s, the replacement
//! ready <= 1 s after Dead). There is no pipeline here: `bench_resume`
//! times a request's resume after a stage's death.

#[path = "common/mod.rs"]
mod common;

use core_fsm::plan::{ReplacementPolicy, RunPlan};
use core_fsm::time::Duration as D;
use std::process::Command;
use std::time::{Duration, Instant};

const NODES: u32 = 20;
const KILLS: u32 = 20;
const BOUND: Duration = Duration::from_secs(60);
const AGENT_START: &str = "DROVER_JOIN_TOKEN='${JOIN_TOKEN}' nohup drover-agent \
     --join '${ORCH_ADDR}' --node '${LOGICAL_NODE_ID}' > agent.log 2>&1 &";

fn main() {
    let drover = common::build_binaries("bench_repair");
    let dir = std::env::temp_dir().join(format!("drover-bench-repair-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let state = dir.join("state");
    let mut plan = RunPlan::local(NODES);
    plan.groups[0].boot.start_command = AGENT_START.into();
    plan.replacement = ReplacementPolicy::Bounded {
        attempts_max: 16,
        backoff_base: D::from_millis(100),
        backoff_max: D::from_secs(1),
        quarantine_after_failures: 1000,
    };
    let plan_path = dir.join("plan.toml");
    std::fs::write(&plan_path, runtime_real::plan_toml::to_string(&plan)).expect("plan");
    let up = common::UpLines::start(
        &drover,
        &state,
        &plan_path,
        &["--no-dashboard"],
        "bench_repair",
        BOUND,
    );
    let wait = |what: &str, want: &dyn Fn(&serde_json::Value) -> bool| up.wait(what, want);
    wait("settled line", &|v| v["event"] == "settled");
    let mut leases: Vec<String> = (0..NODES)
        .map(|i| common::lease_of(&drover, &state, &format!("workers-{i}")))
        .collect();
    let mut seed = 0x5eed_u64;
    let (mut to_dead, mut to_ready) = (Vec::new(), Vec::new());
    println!(
        "{:>5} {:>10} {:>14} {:>20}",
        "kill", "node", "to Dead ms", "Dead to ready ms"
    );
    for k in 0..KILLS {
        let i = k % NODES;
        let node = format!("workers-{i}");
        // A moment within the heartbeat period, drawn from the seed.
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis((seed >> 33) % 1000));
        let pids = common::node_pids(&state, &leases[i as usize]);
        assert!(
            !pids.is_empty(),
            "{node}: no processes for {}",
            leases[i as usize]
        );
        let killed = Instant::now();
        for pid in &pids {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let (dead, _) = wait("Dead", &|v| {
            v["event"] == "liveness" && v["id"] == node.as_str() && v["liveness"] == "Dead"
        });
        let old = leases[i as usize].clone();
        let (ready, line) = wait("replacement", &|v| {
            v["id"] == node.as_str() && v["stage"] == "Dormant" && v["lease"] != old.as_str()
        });
        leases[i as usize] = line["lease"].as_str().expect("a lease").to_owned();
        let (d, r) = (dead - killed, ready - dead);
        println!(
            "{:>5} {node:>10} {:>14} {:>20}",
            k + 1,
            d.as_millis(),
            r.as_millis()
        );
        to_dead.push(d.as_millis());
        to_ready.push(r.as_millis());
    }
    up.stop();
    to_dead.sort_unstable();
    to_ready.sort_unstable();
    let p50 = |v: &[u128]| v[v.len() / 2];
    let max = |v: &[u128]| *v.last().expect("kills");
    let met = max(&to_dead) <= 5_000 && max(&to_ready) <= 1_000;
    println!(
        "{KILLS} kills: kill to Dead p50 {} ms, max {} ms (target <= 5000); Dead to ready again \
         p50 {} ms, max {} ms (target <= 1000): {}",
        p50(&to_dead),
        max(&to_dead),
        p50(&to_ready),
        max(&to_ready),
        if met { "met" } else { "NOT met" }
    );
    let _ = std::fs::remove_dir_all(&dir);
}
