//! Faults of the machines' operations, keyed by operation ordinal: the
//! provider's and SSH's answers (errors, blips) and the network's (delay,
//! drop, duplicate).

use super::Gen;
use crate::case::{Item, NetFault, OpFault, OpKind, Profile};

impl Gen {
    /// Faults keyed by operation ordinal.
    pub(super) fn ops(&mut self, p: &Profile) {
        let n = p.node_count().max(1);
        for op in OpKind::ALL {
            let cap = match op {
                OpKind::Create | OpKind::Connect => n * 8,
                OpKind::Lookup => n * 30,
                OpKind::Destroy | OpKind::Close | OpKind::Probe | OpKind::Start => n * 6,
                OpKind::Tail => n * 8,
                OpKind::Verify => n * 6 * p.verify_commands.max(1),
                OpKind::List => 12,
            };
            for nth in 0..cap {
                if let Some(fault) = self.op_fault(op) {
                    self.items.push(Item::Op { op, nth, fault });
                }
                if let Some(fault) = self.net_fault(op) {
                    self.items.push(Item::Net { op, nth, fault });
                }
            }
        }
        for nth in 0..n * 40 {
            if self.hit("crash-after-effect") && self.rng.ratio(1, 4) {
                let restart_after_ms = self.restart_ms();
                self.items.push(Item::CrashAfterEffect {
                    nth,
                    restart_after_ms,
                });
            }
        }
        for nth in 0..n * 10 {
            if self.hit("crash-before-sync") {
                let restart_after_ms = self.restart_ms();
                self.items.push(Item::CrashBeforeSync {
                    nth,
                    restart_after_ms,
                });
            }
        }
    }

    fn op_fault(&mut self, op: OpKind) -> Option<OpFault> {
        let provider_blip = |g: &mut Gen, name: &str| -> Option<OpFault> {
            if g.hit(name) {
                Some(if g.rng.ratio(1, 2) {
                    OpFault::RateLimited
                } else {
                    OpFault::ServerError
                })
            } else {
                None
            }
        };
        match op {
            OpKind::Create => {
                if let Some(f) = provider_blip(self, "create-fails") {
                    return Some(f);
                }
                let table: [(&str, OpFault); 5] = [
                    ("offer-gone", OpFault::OfferGone),
                    ("create-ambiguous", OpFault::AmbiguousCreated),
                    ("create-lost", OpFault::AmbiguousNotCreated),
                    ("double-rent", OpFault::DoubleRent),
                    ("create-invisible", OpFault::Invisible { ms: 0 }),
                ];
                for (name, fault) in table {
                    if self.hit(name) {
                        return Some(match fault {
                            OpFault::Invisible { .. } => OpFault::Invisible {
                                ms: self.rng.between(2_000, 60_000),
                            },
                            other => other,
                        });
                    }
                }
                None
            }
            OpKind::Lookup => provider_blip(self, "rate-limited")
                .or_else(|| self.hit("server-error").then_some(OpFault::ServerError)),
            OpKind::Destroy => provider_blip(self, "destroy-fails"),
            OpKind::List => provider_blip(self, "list-fails"),
            OpKind::Connect => {
                let table = [
                    ("ssh-refused", OpFault::Refused),
                    ("ssh-timeout", OpFault::Timeout),
                    ("ssh-auth-denied", OpFault::AuthDenied),
                ];
                table
                    .into_iter()
                    .find(|(name, _)| self.hit(name))
                    .map(|(_, f)| f)
            }
            OpKind::Probe | OpKind::Verify | OpKind::Start => {
                let exit_name = match op {
                    OpKind::Probe => "probe-fails",
                    OpKind::Verify => "verify-fails",
                    _ => "start-fails",
                };
                let table = [
                    ("ssh-reset", OpFault::Reset),
                    ("ssh-timeout", OpFault::Timeout),
                    (exit_name, OpFault::Exit { code: 1 }),
                ];
                table
                    .into_iter()
                    .find(|(name, _)| self.hit(name))
                    .map(|(_, f)| f)
            }
            OpKind::Tail => self.hit("ssh-reset").then_some(OpFault::Reset),
            OpKind::Close => None,
        }
    }

    fn net_fault(&mut self, op: OpKind) -> Option<NetFault> {
        if self.hit("latency") {
            return Some(NetFault::Delay {
                ms: self.rng.between(500, 20_000),
            });
        }
        // Only answers the machines hold their own deadline for may vanish;
        // the real ports always answer the others (with an error at worst).
        let droppable = matches!(
            op,
            OpKind::Create
                | OpKind::Destroy
                | OpKind::Connect
                | OpKind::Probe
                | OpKind::Verify
                | OpKind::Start
        );
        if droppable && self.hit("answer-dropped") {
            return Some(NetFault::Drop);
        }
        if self.hit("answer-duplicated") {
            return Some(NetFault::Duplicate);
        }
        None
    }
}
