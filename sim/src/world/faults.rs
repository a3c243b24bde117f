//! The plan's items, indexed the way the world looks them up.

use conformance::case::{Action, HostFault, Item, LeaseFault, NetFault, OpFault, OpKind};
use std::collections::BTreeMap;

/// Faults by key. When two items share a key, the later one wins.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Request faults by (kind, ordinal).
    pub op: BTreeMap<(OpKind, u32), OpFault>,
    /// Answer faults by (kind, ordinal).
    pub net: BTreeMap<(OpKind, u32), NetFault>,
    /// Lease faults by creation ordinal.
    pub lease: BTreeMap<u32, Vec<LeaseFault>>,
    /// Bad hosts.
    pub host: BTreeMap<u32, HostFault>,
    /// Crash after the n-th dispatched effect, with its downtime.
    pub crash_after_effect: BTreeMap<u32, u64>,
    /// Crash before the n-th journal write is synced, with its downtime.
    pub crash_before_sync: BTreeMap<u32, u64>,
    /// Timed actions, in item order.
    pub timed: Vec<(u64, Action)>,
}

impl Faults {
    /// Indexes a plan.
    pub fn index(items: &[Item]) -> Faults {
        let mut f = Faults::default();
        for item in items {
            match item {
                Item::At { at, action } => f.timed.push((*at, action.clone())),
                Item::Op { op, nth, fault } => {
                    f.op.insert((*op, *nth), *fault);
                }
                Item::Net { op, nth, fault } => {
                    f.net.insert((*op, *nth), *fault);
                }
                Item::CrashAfterEffect {
                    nth,
                    restart_after_ms,
                } => {
                    f.crash_after_effect.insert(*nth, *restart_after_ms);
                }
                Item::CrashBeforeSync {
                    nth,
                    restart_after_ms,
                } => {
                    f.crash_before_sync.insert(*nth, *restart_after_ms);
                }
                Item::Lease { nth, fault } => f.lease.entry(*nth).or_default().push(*fault),
                Item::Host { host, fault } => {
                    f.host.insert(*host, *fault);
                }
            }
        }
        f
    }

    /// Whether lease `nth` has `fault` (compared by variant).
    pub fn lease_has(&self, nth: u32, pred: impl Fn(&LeaseFault) -> bool) -> bool {
        self.lease.get(&nth).is_some_and(|v| v.iter().any(pred))
    }
}
