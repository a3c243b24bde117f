//! Which processors the agents and their workers' threads run on.

use super::processes;
use std::path::Path;

/// The processors thread `tid` (of any process) may run on.
pub fn thread_cpus(tid: u32) -> Vec<usize> {
    workers::affinity::allowed_of(tid).unwrap()
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
/// processor. The worker's main thread keeps every processor. Where
/// pinning is not worth it (one processor, or a CPU quota), nothing is
/// pinned: every thread of the agents and workers keeps every processor.
pub fn agents_share_a_processor_with_their_serving_threads(state: &Path, nodes: usize) {
    let all = workers::affinity::allowed().unwrap();
    let agents = processes(state, "drover-agent");
    let workers = processes(state, "drover-worker");
    assert_eq!(
        (agents.len(), workers.len()),
        (nodes, nodes),
        "{agents:?} {workers:?}"
    );
    if !runtime_real::pipeline::pin::worth_it(&all) {
        for (pid, _) in agents.iter().chain(&workers) {
            for tid in threads_of(*pid) {
                assert_eq!(thread_cpus(tid), all, "process {pid} thread {tid}");
            }
        }
        return;
    }
    for (agent, cwd) in &agents {
        let cpus = thread_cpus(*agent);
        assert_eq!(
            cpus.len(),
            1,
            "agent {agent} runs on one processor: {cpus:?}"
        );
        let (worker, _) = workers
            .iter()
            .find(|(_, c)| c == cwd)
            .unwrap_or_else(|| panic!("agent {agent}'s worker in {}", cwd.display()));
        assert_eq!(thread_cpus(*worker), all, "worker {worker}'s main thread");
        let serving: Vec<u32> = threads_of(*worker)
            .into_iter()
            .filter(|&t| thread_cpus(t) == cpus)
            .collect();
        assert_eq!(serving.len(), 1, "worker {worker}: one thread on {cpus:?}");
    }
}
