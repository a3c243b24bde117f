//! The network and machine faults only the madsim tier has, drawn from the
//! case: packet loss, per-hop latency, partitions (clogged links) and
//! machine reboots. The kit's alphabet has no item for them, so they are
//! derived from the case's seed and profile; a case therefore runs the same
//! way every time, alone or in a batch.
//!
//! Like the kit's faults they apply during the fault phase only: at the heal
//! every link is unclogged and packet loss is switched off.

use conformance::Case;
use core_fsm::rng::DetRng;

/// Which link a partition clogs (both directions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Link {
    /// The orchestrator cannot reach the provider API.
    OrchestratorProvider,
    /// The orchestrator is cut off from everything.
    Orchestrator,
    /// The `nth` created machine is cut off from everything.
    Machine(u32),
}

/// A link clogged for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Partition {
    /// When it starts, in ms since the run epoch.
    pub from_ms: u64,
    /// When it heals, in ms since the run epoch.
    pub until_ms: u64,
    /// What is cut off.
    pub link: Link,
}

/// A machine that is killed and, a little later, boots again (its SSH
/// server and agent service come back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reboot {
    /// When, in ms since the run epoch.
    pub at_ms: u64,
    /// The machine's creation ordinal.
    pub machine: u32,
    /// How long it stays down, in ms.
    pub down_ms: u64,
}

/// Whether the tier-2 faults are drawn at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Level {
    /// Drawn from the case (the battery's default).
    #[default]
    On,
    /// None: only the kit's faults (to compare verdicts with tier 1).
    Off,
}

/// The tier-2 faults of one case.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chaos {
    /// Packet loss on every link, per mille (integer; madsim wants a float
    /// only at its boundary).
    pub loss_per_mille: u32,
    /// Latency of one network hop, in ms (low, high).
    pub hop_ms: (u64, u64),
    /// Clogged links, in start order.
    pub partitions: Vec<Partition>,
    /// Machine reboots, in time order.
    pub reboots: Vec<Reboot>,
}

/// Partitions and reboots are drawn on this grid across the fault phase.
const GRID_MS: u64 = 10_000;

/// Draws the tier-2 faults of `case`.
pub fn draw(case: &Case, level: Level) -> Chaos {
    let profile = &case.profile;
    // One hop is a quarter to a half of the profile's answer latency, so a
    // request and its answer take about what tier 1 charges for an answer.
    let low = (profile.latency_ms / 4).max(1);
    let hop_ms = (low, (profile.latency_ms / 2).max(low));
    if level == Level::Off {
        return Chaos {
            hop_ms,
            ..Chaos::default()
        };
    }
    let mut rng = DetRng::new(case.seed).derive(0x6d61_6473_696d);
    // Swarm testing: each kind is on for about half the seeds.
    let loss_per_mille = if rng.ratio(1, 2) {
        rng.between(1, 30) as u32
    } else {
        0
    };
    let partition_rate = if rng.ratio(1, 2) {
        rng.between(20, 150)
    } else {
        0
    };
    let reboot_rate = if rng.ratio(1, 2) {
        rng.between(20, 100)
    } else {
        0
    };
    let machines = profile.node_count().max(1) * 3;
    let mut partitions = Vec::new();
    let mut reboots = Vec::new();
    let mut at = 0;
    while at + GRID_MS < profile.heal_at_ms {
        at += GRID_MS;
        // Every draw is made, used or not, so one kind never shifts another.
        let jitter = rng.below(GRID_MS);
        let start = at + jitter;
        if rng.ratio(partition_rate, 1000) {
            let link = match rng.below(3) {
                0 => Link::OrchestratorProvider,
                1 => Link::Orchestrator,
                _ => Link::Machine(rng.below(u64::from(machines)) as u32),
            };
            let until_ms = (start + rng.between(1_000, 25_000)).min(profile.heal_at_ms);
            if start < until_ms {
                partitions.push(Partition {
                    from_ms: start,
                    until_ms,
                    link,
                });
            }
        }
        if rng.ratio(reboot_rate, 1000) {
            let machine = rng.below(u64::from(machines)) as u32;
            let down_ms = rng.between(500, 15_000);
            if start < profile.heal_at_ms {
                reboots.push(Reboot {
                    at_ms: start,
                    machine,
                    down_ms,
                });
            }
        }
    }
    Chaos {
        loss_per_mille,
        hop_ms,
        partitions,
        reboots,
    }
}

impl Chaos {
    /// The fault names this chaos injects at most (for coverage reports).
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.loss_per_mille > 0 {
            names.push("packet-loss");
        }
        if !self.partitions.is_empty() {
            names.push("partition");
        }
        if !self.reboots.is_empty() {
            names.push("machine-reboot");
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conformance::Scenario;

    #[test]
    fn chaos_is_a_function_of_the_case_and_ends_before_the_heal() {
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let case = conformance::generate(Scenario::SmallPool, seed);
            let a = draw(&case, Level::On);
            assert_eq!(a, draw(&case, Level::On), "seed {seed}");
            assert!(a.hop_ms.0 >= 1 && a.hop_ms.0 <= a.hop_ms.1);
            for p in &a.partitions {
                assert!(p.from_ms < p.until_ms, "seed {seed}: {p:?}");
                assert!(p.until_ms <= case.profile.heal_at_ms, "seed {seed}: {p:?}");
            }
            for r in &a.reboots {
                assert!(r.at_ms < case.profile.heal_at_ms, "seed {seed}: {r:?}");
            }
            assert!(a.loss_per_mille <= 30);
            kinds.extend(a.names());
            let off = draw(&case, Level::Off);
            assert!(off.names().is_empty() && off.hop_ms == a.hop_ms);
        }
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            ["machine-reboot", "packet-loss", "partition"],
            "every kind is drawn by some seed"
        );
    }
}
