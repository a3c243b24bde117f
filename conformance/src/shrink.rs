//! The shrinker: makes a failing case small by editing its explicit plan
//! (never its seed). It drops items (delta debugging), removes nodes, weakens
//! faults and shortens delays, keeping every edit after which the case still
//! fails the same way.

use crate::case::{Action, Case, Item, LeaseFault, NetFault, OpFault};
use core_fsm::plan::ReplacementPolicy;

/// Shrinks `case` while `still_fails` holds, running it at most `budget`
/// times. Returns the smallest failing case found.
pub fn shrink(case: &Case, budget: u32, still_fails: &mut dyn FnMut(&Case) -> bool) -> Case {
    let mut best = case.clone();
    let mut runs = 0u32;
    let mut attempt = |candidate: &Case, runs: &mut u32| -> bool {
        if *runs >= budget {
            return false;
        }
        *runs += 1;
        still_fails(candidate)
    };
    loop {
        let before = best.clone();
        drop_items(&mut best, &mut runs, &mut attempt);
        shrink_profile(&mut best, &mut runs, &mut attempt);
        weaken_items(&mut best, &mut runs, &mut attempt);
        if best == before || runs >= budget {
            return best;
        }
    }
}

type Attempt<'a> = dyn FnMut(&Case, &mut u32) -> bool + 'a;

/// Delta debugging over the items: drop chunks, halving the chunk size.
fn drop_items(best: &mut Case, runs: &mut u32, attempt: &mut Attempt<'_>) {
    let mut chunk = best.items.len().div_ceil(2).max(1);
    loop {
        let mut start = 0;
        while start < best.items.len() {
            let mut candidate = best.clone();
            let end = (start + chunk).min(candidate.items.len());
            candidate.items.drain(start..end);
            if attempt(&candidate, runs) {
                *best = candidate;
            } else {
                start += chunk;
            }
        }
        if chunk == 1 {
            return;
        }
        chunk = chunk.div_ceil(2);
    }
}

fn shrink_profile(best: &mut Case, runs: &mut u32, attempt: &mut Attempt<'_>) {
    let mut candidates: Vec<Case> = Vec::new();
    if best.profile.groups.len() > 1 {
        for g in 0..best.profile.groups.len() {
            let mut c = best.clone();
            c.profile.groups.remove(g);
            candidates.push(c);
        }
    }
    for g in 0..best.profile.groups.len() {
        if best.profile.groups[g] > 1 {
            let mut c = best.clone();
            c.profile.groups[g] -= 1;
            candidates.push(c);
        }
    }
    if best.profile.verify_commands > 0 {
        let mut c = best.clone();
        c.profile.verify_commands -= 1;
        candidates.push(c);
    }
    if let ReplacementPolicy::Bounded { attempts_max, .. } = best.profile.replacement {
        let mut c = best.clone();
        c.profile.replacement = ReplacementPolicy::None;
        candidates.push(c);
        if attempts_max > 2 {
            let mut c = best.clone();
            if let ReplacementPolicy::Bounded { attempts_max, .. } = &mut c.profile.replacement {
                *attempts_max -= 1;
            }
            candidates.push(c);
        }
    }
    for field in 0..3 {
        let mut c = best.clone();
        let value = match field {
            0 => &mut c.profile.boot_ms,
            1 => &mut c.profile.ssh_ms,
            _ => &mut c.profile.heal_at_ms,
        };
        if *value > 1_000 {
            *value /= 2;
            candidates.push(c);
        }
    }
    for candidate in candidates {
        if attempt(&candidate, runs) {
            *best = candidate;
            return;
        }
    }
}

/// A milder or shorter form of an item, if it has one.
fn weaker(item: &Item) -> Option<Item> {
    let half = |ms: u64| (ms > 100).then_some(ms / 2);
    Some(match item.clone() {
        Item::At { at, action } => match action {
            Action::Crash { restart_after_ms } if restart_after_ms > 500 => Item::At {
                at,
                action: Action::Crash {
                    restart_after_ms: 500,
                },
            },
            Action::Storm { ms } => Item::At {
                at,
                action: Action::Storm { ms: half(ms)? },
            },
            action => Item::At {
                at: half(at)?,
                action,
            },
        },
        Item::Op { op, nth, fault } => Item::Op {
            op,
            nth,
            fault: match fault {
                OpFault::Invisible { ms } => OpFault::Invisible { ms: half(ms)? },
                OpFault::AmbiguousCreated | OpFault::AmbiguousNotCreated | OpFault::OfferGone => {
                    OpFault::ServerError
                }
                _ => return None,
            },
        },
        Item::Net {
            op,
            nth,
            fault: NetFault::Delay { ms },
        } => Item::Net {
            op,
            nth,
            fault: NetFault::Delay { ms: half(ms)? },
        },
        Item::CrashAfterEffect {
            nth,
            restart_after_ms,
        } if restart_after_ms > 500 => Item::CrashAfterEffect {
            nth,
            restart_after_ms: 500,
        },
        Item::CrashBeforeSync {
            nth,
            restart_after_ms,
        } if restart_after_ms > 500 => Item::CrashBeforeSync {
            nth,
            restart_after_ms: 500,
        },
        Item::Lease { nth, fault } => Item::Lease {
            nth,
            fault: match fault {
                LeaseFault::SlowBoot { ms } => LeaseFault::SlowBoot { ms: half(ms)? },
                LeaseFault::SshLate { ms } => LeaseFault::SshLate { ms: half(ms)? },
                LeaseFault::Exits { after_ms } => LeaseFault::Exits {
                    after_ms: half(after_ms)?,
                },
                LeaseFault::Offline { after_ms } => LeaseFault::Offline {
                    after_ms: half(after_ms)?,
                },
                LeaseFault::Outbid { after_ms } => LeaseFault::Outbid {
                    after_ms: half(after_ms)?,
                },
                _ => return None,
            },
        },
        _ => return None,
    })
}

fn weaken_items(best: &mut Case, runs: &mut u32, attempt: &mut Attempt<'_>) {
    let mut i = 0;
    while i < best.items.len() {
        match weaker(&best.items[i]) {
            Some(item) => {
                let mut candidate = best.clone();
                candidate.items[i] = item;
                if attempt(&candidate, runs) {
                    *best = candidate;
                    continue;
                }
                i += 1;
            }
            None => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{Scenario, generate};

    #[test]
    fn shrinks_to_the_one_item_that_matters() {
        let mut case = generate(Scenario::CrashStorm, 3);
        let needle = Item::At {
            at: 77_777,
            action: Action::Crash {
                restart_after_ms: 9_000,
            },
        };
        case.items.push(needle);
        let shrunk = shrink(&case, 10_000, &mut |c: &Case| {
            c.items
                .iter()
                .any(|i| matches!(i, Item::At { action: Action::Crash { .. }, at } if *at > 1_000))
        });
        assert_eq!(shrunk.items.len(), 1, "{:?}", shrunk.items);
        assert!(matches!(
            shrunk.items[0],
            Item::At {
                action: Action::Crash {
                    restart_after_ms: 500
                },
                ..
            }
        ));
        assert_eq!(shrunk.profile.node_count(), 1);
    }
}
