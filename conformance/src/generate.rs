//! The seeded swarm generator: a seed first draws a swarm profile (which
//! faults are on, at which integer per-mille rates, node counts, plan shape,
//! replacement policy, timings), then a timed explicit plan of items.
//!
//! Swarm testing (Groce et al.): each fault is switched on for only some
//! seeds, so rare interleavings are not drowned by the common faults.

mod ops;

use crate::case::{Action, Case, HostFault, Item, LeaseFault, Profile};
use core_fsm::plan::ReplacementPolicy;
use core_fsm::rng::DetRng;
use core_fsm::time::Duration;
use std::collections::BTreeMap;

/// A named family of profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// A small pool with bounded replacement and light faults of every kind.
    SmallPool,
    /// The MVP rule: replacement `none`, faults on.
    Mvp,
    /// Bounded replacement, 30% of the hosts bad, quarantine on.
    BadHosts,
    /// The orchestrator is killed and restarted again and again.
    CrashStorm,
    /// The bench's standard run: 3 nodes, 10 simulated minutes, faults on.
    Standard,
}

impl Scenario {
    /// Every scenario.
    pub const ALL: [Scenario; 5] = [
        Scenario::SmallPool,
        Scenario::Mvp,
        Scenario::BadHosts,
        Scenario::CrashStorm,
        Scenario::Standard,
    ];

    /// The scenario's name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::SmallPool => "small-pool",
            Scenario::Mvp => "mvp",
            Scenario::BadHosts => "bad-hosts",
            Scenario::CrashStorm => "crash-storm",
            Scenario::Standard => "standard",
        }
    }

    /// Parses a scenario name.
    pub fn parse(text: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == text)
    }

    /// The fault names the scenario may switch on, with their rate range in
    /// per mille.
    fn palette(self) -> Vec<(&'static str, u32, u32)> {
        // `operator-scale` is drawn on its own stream (`draw_scale`), so
        // that adding it moved no other draw of any seed.
        let all: Vec<(&'static str, u32, u32)> = crate::fault::ALL
            .iter()
            .filter(|(name, _)| *name != SCALE)
            .map(|(name, _)| (*name, 10, 80))
            .collect();
        match self {
            Scenario::SmallPool | Scenario::Standard | Scenario::Mvp => all
                .into_iter()
                .map(|(n, lo, hi)| match n {
                    "crash" | "crash-after-effect" | "crash-before-sync" => (n, 5, 20),
                    "early-teardown" | "operator-destroy" | "bad-host" => (n, 5, 30),
                    _ => (n, lo, hi),
                })
                .collect(),
            Scenario::BadHosts => all
                .into_iter()
                .filter(|(n, _, _)| !n.starts_with("crash") && *n != "early-teardown")
                .map(|(n, lo, hi)| {
                    if n == "bad-host" {
                        (n, 300, 300)
                    } else {
                        (n, lo / 2, hi / 2)
                    }
                })
                .collect(),
            Scenario::CrashStorm => all
                .into_iter()
                .map(|(n, lo, hi)| match n {
                    "crash" => (n, 150, 400),
                    "crash-after-effect" => (n, 20, 60),
                    "crash-before-sync" => (n, 50, 200),
                    "create-ambiguous" | "create-lost" => (n, 50, 200),
                    _ => (n, lo / 2, hi / 2),
                })
                .collect(),
        }
    }
}

/// Draws the case of `seed` in `scenario`.
pub fn generate(scenario: Scenario, seed: u64) -> Case {
    let rng = DetRng::new(seed).derive(scenario as u64 + 1);
    let profile = draw_profile(scenario, &mut rng.derive(1));
    let rates: BTreeMap<String, u32> = profile.rates.iter().cloned().collect();
    let mut draw = Gen {
        rng: rng.derive(2),
        rates,
        items: Vec::new(),
    };
    draw.timed(&profile);
    draw.ops(&profile);
    draw.leases(&profile);
    draw.hosts(scenario, &profile);
    draw.scales(&profile, rng.derive(SCALE_STREAM));
    Case {
        scenario: scenario.name().to_owned(),
        seed,
        profile,
        items: draw.items,
    }
}

fn draw_profile(scenario: Scenario, rng: &mut DetRng) -> Profile {
    let groups = match scenario {
        Scenario::Standard => vec![3],
        Scenario::BadHosts => vec![rng.between(2, 4) as u32],
        _ if rng.ratio(1, 3) => vec![rng.between(1, 2) as u32, rng.between(1, 2) as u32],
        _ => vec![rng.between(1, 3) as u32],
    };
    let replacement = match scenario {
        Scenario::Mvp => ReplacementPolicy::None,
        Scenario::BadHosts => ReplacementPolicy::Bounded {
            attempts_max: 4,
            backoff_base: Duration::from_secs(2),
            backoff_max: Duration::from_secs(20),
            quarantine_after_failures: 1,
        },
        _ => ReplacementPolicy::Bounded {
            attempts_max: rng.between(2, 3) as u32,
            backoff_base: Duration::from_secs(rng.between(1, 5)),
            backoff_max: Duration::from_secs(30),
            quarantine_after_failures: rng.between(1, 3) as u32,
        },
    };
    // Swarm testing: each fault of the palette is on with probability 1/2
    // (always on where the scenario is about it).
    let mut rates = Vec::new();
    for (name, lo, hi) in scenario.palette() {
        let forced = matches!(
            (scenario, name),
            (Scenario::BadHosts, "bad-host") | (Scenario::CrashStorm, "crash")
        );
        if forced || rng.ratio(1, 2) {
            rates.push((
                name.to_owned(),
                rng.between(u64::from(lo), u64::from(hi)) as u32,
            ));
        }
    }
    if let Some(rate) = draw_scale(scenario, &rng.derive(SCALE_STREAM)) {
        rates.push((SCALE.to_owned(), rate));
    }
    rates.sort();
    Profile {
        groups,
        verify_commands: rng.between(0, 2) as u32,
        replacement,
        hosts: if scenario == Scenario::BadHosts {
            10
        } else {
            rng.between(3, 8) as u32
        },
        endpoint_on_create: rng.ratio(1, 4),
        fsync_ms: rng.between(1, 10),
        latency_ms: rng.between(50, 800),
        boot_ms: rng.between(5_000, 60_000),
        ssh_ms: rng.between(1_000, 15_000),
        join_ms: rng.between(300, 3_000),
        system_seed: rng.next_u64() >> 16,
        heal_at_ms: match scenario {
            Scenario::Standard => 600_000,
            _ => rng.between(120_000, 300_000),
        },
        rates,
    }
}

/// The operator's +1 / -1 (`Action::Scale`).
const SCALE: &str = "operator-scale";
/// The stream `operator-scale` draws from, apart from every other draw.
const SCALE_STREAM: u64 = 0x5ca1e;

/// Whether a profile scales, and how often (per mille per 5 s slot): on
/// with probability 1/2, except where the scenario is about something else.
fn draw_scale(scenario: Scenario, rng: &DetRng) -> Option<u32> {
    let mut rng = rng.derive(1);
    if scenario == Scenario::BadHosts || !rng.ratio(1, 2) {
        return None;
    }
    Some(rng.between(20, 120) as u32)
}

struct Gen {
    rng: DetRng,
    rates: BTreeMap<String, u32>,
    items: Vec<Item>,
}

impl Gen {
    /// Draws `name` at its rate; false when the fault is off.
    fn hit(&mut self, name: &str) -> bool {
        match self.rates.get(name) {
            Some(rate) => self.rng.ratio(u64::from(*rate), 1000),
            None => false,
        }
    }

    fn restart_ms(&mut self) -> u64 {
        self.rng.between(500, 20_000)
    }

    /// Timed actions, on a 5 s grid across the fault phase.
    fn timed(&mut self, p: &Profile) {
        let mut at = 0;
        let mut teardown = false;
        while at < p.heal_at_ms {
            at += 5_000;
            let jitter = self.rng.below(5_000);
            if self.hit("crash") {
                let restart_after_ms = self.restart_ms();
                self.push_at(at + jitter, Action::Crash { restart_after_ms });
            }
            if self.hit("storm-429") {
                let ms = self.rng.between(2_000, 30_000);
                self.push_at(at + jitter, Action::Storm { ms });
            }
            if self.hit("unknown-answer") {
                self.push_at(at + jitter, Action::UnknownAnswer);
            }
            if self.hit("operator-destroy") && self.rng.ratio(1, 4) {
                let node = self.rng.below(u64::from(p.node_count())) as u32;
                self.push_at(at + jitter, Action::Destroy { node });
            }
            if !teardown && self.hit("early-teardown") && self.rng.ratio(1, 8) {
                teardown = true;
                self.push_at(at + jitter, Action::Teardown);
            }
        }
    }

    /// The operator's scale actions, on the 5 s grid of the fault phase:
    /// a group's count one up or one down (sometimes to 0), at most two
    /// above the plan's, drawn from `rng` so no other item moves.
    fn scales(&mut self, p: &Profile, rng: DetRng) {
        let Some(rate) = self.rates.get(SCALE).copied() else {
            return;
        };
        let mut rng = rng.derive(2);
        let mut counts = p.groups.clone();
        let mut at = 0;
        while at < p.heal_at_ms && !counts.is_empty() {
            at += 5_000;
            let jitter = rng.below(5_000);
            if !rng.ratio(u64::from(rate), 1000) {
                continue;
            }
            let group = rng.below(counts.len() as u64) as usize;
            let planned = p.groups[group];
            let count = &mut counts[group];
            *count = match (*count, rng.ratio(1, 2)) {
                (c, true) if c < planned + 2 => c + 1,
                (0, _) => 1,
                (c, _) => c - 1,
            };
            let action = Action::Scale {
                group: group as u32,
                count: *count,
            };
            self.push_at(at + jitter, action);
        }
    }

    fn push_at(&mut self, at: u64, action: Action) {
        self.items.push(Item::At { at, action });
    }

    /// Faults of created leases, by creation ordinal.
    fn leases(&mut self, p: &Profile) {
        for nth in 0..p.node_count().max(1) * 8 {
            let life = self.rng.between(5_000, 120_000);
            let extra = self.rng.between(5_000, 90_000);
            let table = [
                ("stuck-loading", LeaseFault::StuckLoading),
                ("slow-boot", LeaseFault::SlowBoot { ms: extra }),
                ("ssh-late", LeaseFault::SshLate { ms: extra }),
                ("exited", LeaseFault::Exits { after_ms: life }),
                ("offline", LeaseFault::Offline { after_ms: life }),
                ("outbid", LeaseFault::Outbid { after_ms: life }),
                ("agent-never-joins", LeaseFault::AgentNeverJoins),
                ("agent-wrong-token", LeaseFault::AgentWrongToken),
                ("agent-joins-twice", LeaseFault::AgentJoinsTwice),
                ("agent-crashes", LeaseFault::AgentCrashesAfterHandoff),
                ("agent-stale-join", LeaseFault::StaleJoin),
            ];
            for (name, fault) in table {
                if self.hit(name) {
                    self.items.push(Item::Lease { nth, fault });
                    break;
                }
            }
        }
    }

    /// Bad hosts: exactly the rate's share of hosts, at least one when on.
    fn hosts(&mut self, scenario: Scenario, p: &Profile) {
        let Some(rate) = self.rates.get("bad-host").copied() else {
            return;
        };
        let bad = if scenario == Scenario::BadHosts {
            (p.hosts * rate).div_ceil(1000)
        } else {
            u32::from(self.rng.ratio(u64::from(rate) * 10, 1000))
        };
        for host in 0..bad.min(p.hosts.saturating_sub(1)) {
            let fault = match self.rng.below(3) {
                0 => HostFault::Refuses,
                1 => HostFault::VerifyFails,
                _ => HostFault::Exits,
            };
            // Spread bad hosts over the pool rather than the first few.
            let host = (host * 7 + self.rng.below(u64::from(p.hosts)) as u32) % p.hosts;
            if !self
                .items
                .iter()
                .any(|i| matches!(i, Item::Host { host: h, .. } if *h == host))
            {
                self.items.push(Item::Host { host, fault });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_round_trips_as_text() {
        for scenario in Scenario::ALL {
            for seed in 0..20 {
                let a = generate(scenario, seed);
                assert_eq!(a, generate(scenario, seed));
                let text = crate::trace::write(&a);
                let mut back = crate::trace::parse(&text).expect("parses");
                back.items.sort();
                let mut items = a.items.clone();
                items.sort();
                assert_eq!(back.items, items);
                assert_eq!(back.profile, a.profile);
            }
        }
    }

    #[test]
    fn bad_hosts_has_thirty_percent_bad() {
        for seed in 0..10 {
            let case = generate(Scenario::BadHosts, seed);
            let bad = case
                .items
                .iter()
                .filter(|i| matches!(i, Item::Host { .. }))
                .count();
            assert!((1..=3).contains(&bad), "seed {seed}: {bad} bad hosts");
        }
    }
}
