//! The processor a node's agent shares with its worker's serving thread.
//!
//! A decode step passes from the agent to the worker and back on every
//! stage. When the two threads sit on different processors, each hand-off
//! wakes the other processor, which costs tens of microseconds on a VM
//! whose idle vCPUs halt. So the agent keeps its own thread on one
//! processor and starts its worker with `--serve-cpu` for the same one.
//! The worker's other threads (its pool, unless the plan gives a stage one
//! thread), and the agent's blocking threads, run on every processor the
//! agent was given. (`cargo xtask bench pipeline --hop` on a 2-core Xeon
//! VM, per extra stage: the 256-byte row 176-187 µs unpinned, 126-154
//! pinned; the 6 KiB row 226-283 µs, 167-180.)
//!
//! Nothing is pinned where the agent has one processor, nor where it may
//! use fewer processors than it sees (a CPU quota, as on hosts shared by
//! containers): there another tenant may keep any one processor busy.

use std::sync::OnceLock;
use workers::affinity;

/// The agent's processor and the ones it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// Where the agent's thread and its worker's serving thread run.
    pub cpu: usize,
    /// Every processor the agent may use (its other threads' set).
    pub allowed: Vec<usize>,
}

static PIN: OnceLock<Pin> = OnceLock::new();

/// Keeps the calling thread (the agent's) on one of its processors, chosen
/// by the node's name so that local nodes on one host spread over them;
/// nothing where pinning is not [`worth_it`].
pub fn hold(node: &str) -> Result<(), String> {
    let allowed = match affinity::allowed() {
        Ok(allowed) => allowed,
        // Not Linux: nothing to pin, and nothing to say.
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => return Ok(()),
        Err(e) => return Err(format!("its processors: {e}")),
    };
    if !worth_it(&allowed) {
        return Ok(());
    }
    let cpu = choose(node, &allowed);
    affinity::restrict(&[cpu]).map_err(|e| format!("processor {cpu}: {e}"))?;
    PIN.get_or_init(|| Pin { cpu, allowed });
    Ok(())
}

/// Whether an agent that may run on `allowed` pins: with two processors
/// or more, and no CPU quota below them (std reads the cgroup's quota into
/// `available_parallelism`).
pub fn worth_it(allowed: &[usize]) -> bool {
    let share = std::thread::available_parallelism().map_or(allowed.len(), |n| n.get());
    allowed.len() >= 2 && share >= allowed.len()
}

/// The pin [`hold`] made, if any.
pub fn current() -> Option<&'static Pin> {
    PIN.get()
}

/// Gives the calling thread every processor back (a runtime thread the
/// pinned agent thread started).
pub fn release_current() {
    if let Some(pin) = current() {
        let _ = affinity::restrict(&pin.allowed);
    }
}

/// The processor for `node` among `allowed` (FNV-1a of its name); at
/// least one.
fn choose(node: &str, allowed: &[usize]) -> usize {
    let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    });
    allowed[(hash % allowed.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_keeps_its_processor_and_nodes_spread() {
        // The choice is FNV-1a of the name, with no seed of the process's
        // own: a restarted agent takes the processor it had. The hashes are
        // FNV-1a's published values for "a" and "foobar".
        let many: Vec<usize> = (100..197).collect();
        let a = 100 + (0xaf63_dc4c_8601_ec8c_u64 % 97) as usize;
        let foobar = 100 + (0x8594_4171_f739_67e8_u64 % 97) as usize;
        assert_eq!((choose("a", &many), choose("foobar", &many)), (a, foobar));
        // A group's first nodes on as many processors take one each.
        for n in 2..=4 {
            let cpus: Vec<usize> = (0..n).collect();
            let used: std::collections::BTreeSet<usize> = (0..n)
                .map(|i| choose(&format!("workers-{i}"), &cpus))
                .collect();
            assert_eq!(used.len(), n, "{n} nodes on {n} processors: {used:?}");
        }
        assert!(!worth_it(&[5]), "one processor: no pin");
        assert!(!worth_it(&[]));
    }
}
