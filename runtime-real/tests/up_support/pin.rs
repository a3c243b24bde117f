//! Which processors the agents and their workers' threads run on.

use super::processes;
use std::path::Path;

/// The processors thread `tid` of process `pid` may run on
/// (`Cpus_allowed_list`, `0-1,3` read as 0, 1, 3).
pub fn thread_cpus(pid: u32, tid: u32) -> Vec<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}

/// The thread ids of process `pid`.
pub fn threads_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect()
}

/// Each of the `nodes` agents under `state` runs on one processor, and so
/// does one thread of its worker (the one serving steps): the same
/// processor. The worker's main thread keeps every processor. Checks
/// nothing where nothing is pinned (one processor, or a CPU quota).
pub fn agents_share_a_processor_with_their_serving_threads(state: &Path, nodes: usize) {
    let all = workers::affinity::allowed().unwrap();
    if !runtime_real::pipeline::pin::worth_it(&all) {
        return;
    }
    let agents = processes(state, "drover-agent");
    let workers = processes(state, "drover-worker");
    assert_eq!(
        (agents.len(), workers.len()),
        (nodes, nodes),
        "{agents:?} {workers:?}"
    );
    for (agent, cwd) in &agents {
        let cpus = thread_cpus(*agent, *agent);
        assert_eq!(
            cpus.len(),
            1,
            "agent {agent} runs on one processor: {cpus:?}"
        );
        let (worker, _) = workers
            .iter()
            .find(|(_, c)| c == cwd)
            .unwrap_or_else(|| panic!("agent {agent}'s worker in {}", cwd.display()));
        assert_eq!(
            thread_cpus(*worker, *worker),
            all,
            "worker {worker}'s main thread"
        );
        let serving: Vec<u32> = threads_of(*worker)
            .into_iter()
            .filter(|&t| thread_cpus(*worker, t) == cpus)
            .collect();
        assert_eq!(serving.len(), 1, "worker {worker}: one thread on {cpus:?}");
    }
}
