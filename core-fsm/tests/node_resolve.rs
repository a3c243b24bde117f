//! The NodeManager's resolution of an ambiguous intent by listing leases
//! (`node/resolve.rs`): the bound on intents per attempt (give up with "no
//! lease after N intents" once `intents_max` intents were abandoned, not one
//! more, not one fewer) and the list-failure budget, which a clean list that
//! misses the nonce renews. Transcripts in the style of `tests/node.rs`.

use core_fsm::Machine as _;
use core_fsm::ids::OpId;
use core_fsm::node::{self, Effect, Input, Machine};
use core_fsm::plan::{LogicalNodeSpec, RunPlan, expand};
use core_fsm::port::{JournalRecord, ProviderError, ProviderErrorKind};
use core_fsm::rng::DetRng;
use core_fsm::time::Instant;
use std::fmt::Write as _;

/// A node driven by a script of timed inputs, with its transcript.
struct Script {
    node: Machine,
    log: String,
    effects: Vec<Effect>,
    now: u64,
}

fn spec() -> LogicalNodeSpec {
    expand(&RunPlan::example_two_workers()).remove(0)
}

impl Script {
    fn new(config: node::Config) -> Script {
        let node = Machine::new(config, spec(), DetRng::new(1));
        node.check_invariants();
        let mut s = Script {
            node,
            log: String::new(),
            effects: Vec::new(),
            now: 0,
        };
        s.state();
        s
    }

    fn at(&mut self, ms: u64, input: Input) -> &mut Script {
        self.now = ms;
        let line = match &input {
            Input::LeasesListed {
                op,
                result: Ok(leases),
            } => format!("LeasesListed {op} ok {} leases", leases.len()),
            other => format!("{other:?}"),
        };
        writeln!(self.log, "t={ms} {line}").unwrap();
        let effects = self.node.handle(Instant(ms), input);
        self.node.check_invariants();
        for e in &effects {
            writeln!(self.log, "    {}", effect_line(e)).unwrap();
        }
        self.state();
        self.effects.extend(effects);
        self
    }

    fn tick(&mut self) -> &mut Script {
        let at = self.node.next_deadline().expect("a timer is armed");
        self.at(at.0, Input::Tick)
    }

    /// Answers the last operation `delay` ms from now.
    fn answer(&mut self, delay: u64, make: impl FnOnce(OpId) -> Input) -> &mut Script {
        let op = self
            .effects
            .iter()
            .rev()
            .find_map(|e| match e {
                Effect::CreateLease { op, .. } | Effect::ListLeases { op, .. } => Some(*op),
                _ => None,
            })
            .expect("an operation");
        self.at(self.now + delay, make(op))
    }

    fn create_ambiguous(&mut self) -> &mut Script {
        self.answer(100, |op| Input::LeaseCreated {
            op,
            result: Err(err(ProviderErrorKind::Ambiguous, "reset after send")),
        })
    }

    fn list_empty(&mut self) -> &mut Script {
        self.answer(100, |op| Input::LeasesListed {
            op,
            result: Ok(Vec::new()),
        })
    }

    fn list_failed(&mut self) -> &mut Script {
        self.answer(100, |op| Input::LeasesListed {
            op,
            result: Err(err(ProviderErrorKind::Transient, "503")),
        })
    }

    fn state(&mut self) {
        let r = self.node.record();
        let mut line = format!("    = {:?} attempt={}", self.node.stage(), r.attempt);
        if let Some(reason) = &r.failed_reason {
            write!(line, " failed={reason:?}").unwrap();
        }
        if let Some(at) = self.node.next_deadline() {
            write!(line, " next={at}").unwrap();
        }
        writeln!(self.log, "{line}").unwrap();
    }

    fn count(&self, pick: fn(&Effect) -> bool) -> usize {
        self.effects.iter().filter(|e| pick(e)).count()
    }

    fn failed_reason(&self) -> Option<&str> {
        self.node.failed_reason()
    }
}

fn effect_line(e: &Effect) -> String {
    match e {
        Effect::CreateLease { op, request } => {
            format!("CreateLease {op} {} {}", request.node, request.nonce)
        }
        Effect::Persist(record) => format!("Persist({record:?})"),
        other => format!("{other:?}"),
    }
}

fn err(kind: ProviderErrorKind, message: &str) -> ProviderError {
    ProviderError {
        kind,
        message: message.to_owned(),
    }
}

fn is_create(e: &Effect) -> bool {
    matches!(e, Effect::CreateLease { .. })
}

fn is_list(e: &Effect) -> bool {
    matches!(e, Effect::ListLeases { .. })
}

fn is_abandon(e: &Effect) -> bool {
    matches!(e, Effect::Persist(JournalRecord::IntentAbandoned { .. }))
}

/// Every create is ambiguous and every list is clean but lacks the nonce:
/// each intent is abandoned after `list_misses_max` lists, and the node
/// gives up after exactly `intents_max` intents. At most 10 intents are
/// driven, so a node that never gives up fails the test instead of hanging.
fn abandon_every_intent(config: node::Config) -> Script {
    let mut s = Script::new(config);
    s.at(
        0,
        Input::Start {
            excluded_hosts: Vec::new(),
        },
    );
    for _ in 0..10 {
        // The ambiguous answer lists at once; later lists wait a settle.
        s.create_ambiguous().list_empty();
        for _ in 1..config.list_misses_max {
            s.tick().list_empty();
        }
        if s.node.stage() == node::Lifecycle::Failed {
            break;
        }
    }
    s
}

#[test]
fn a_node_gives_up_after_exactly_intents_max_abandoned_intents() {
    let mut log = String::new();
    for intents_max in [1, 2, 3] {
        let config = node::Config {
            intents_max,
            ..node::Config::default()
        };
        let s = abandon_every_intent(config);
        let n = intents_max as usize;
        assert_eq!(
            s.node.stage(),
            node::Lifecycle::Failed,
            "intents_max={intents_max}"
        );
        assert_eq!(s.count(is_create), n, "one create per intent");
        assert_eq!(s.count(is_abandon), n, "each intent journaled abandoned");
        let misses = config.list_misses_max as usize;
        assert_eq!(
            s.count(is_list),
            n * misses,
            "list_misses_max lists per intent"
        );
        assert_eq!(
            s.failed_reason(),
            Some(format!("no lease after {intents_max} intents").as_str())
        );
        assert_eq!(s.node.next_deadline(), None, "nothing left to wait for");
        writeln!(log, "## intents_max={intents_max}\n{}", s.log).unwrap();
    }
    insta::assert_snapshot!(log);
}

#[test]
fn a_clean_list_that_misses_the_nonce_renews_the_list_failure_budget() {
    let config = node::Config::default();
    let budget = config.list_attempts_max;
    let mut s = Script::new(config);
    s.at(
        0,
        Input::Start {
            excluded_hosts: Vec::new(),
        },
    );
    s.create_ambiguous();
    writeln!(s.log, "# {} failed lists, then a clean miss", budget - 1).unwrap();
    for _ in 1..budget {
        s.list_failed().tick();
    }
    s.list_empty();
    assert_eq!(s.node.stage(), node::Lifecycle::LeaseRequested);
    writeln!(
        s.log,
        "# a full fresh budget: {budget} failed lists after the miss"
    )
    .unwrap();
    s.tick();
    for _ in 1..budget {
        s.list_failed();
        assert_ne!(
            s.node.stage(),
            node::Lifecycle::Failed,
            "the budget was renewed"
        );
        s.tick();
    }
    s.list_failed();
    assert_eq!(s.node.stage(), node::Lifecycle::Failed);
    assert_eq!(
        s.failed_reason(),
        Some(format!("lease intent unresolved after {budget} lists: 503").as_str())
    );
    assert_eq!(s.count(is_list), 2 * budget as usize);
    assert_eq!(
        s.count(is_create),
        1,
        "a failed list never abandons the intent"
    );
    assert_eq!(s.count(is_abandon), 0);
    insta::assert_snapshot!(s.log);
}
