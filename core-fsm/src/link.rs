//! The agent's control link (SPEC.md "The agent's control link"): how
//! `drover-agent` reaches the orchestrator, which hello it sends, when it
//! dials again, and when it gives up.
//!
//! The agent dials and sends a hello: `Join` with its one-time token until
//! it has been welcomed once, `Rejoin` (by endpoint id, no token) after.
//! A dial or hello that fails is tried again after the one [`backoff`],
//! until the link has been down for `reconnect_for`; then the agent exits
//! unreachable. A welcomed connection that is lost is dialled again at once
//! with a fresh deadline. A refusal is final, with one exception: a `Join`
//! refused after an earlier `Join` went unanswered may have been redeemed
//! by an orchestrator that then restarted, so the agent tries `Rejoin` once
//! before it gives up. A shutdown is final.
//!
//! What the link may be told depends on where it stands, so the standing
//! of the token is part of the phase ([`Standing`]), not flags beside it.

use crate::ids::LogicalNodeId;
use crate::time::{Duration, Instant, backoff};
use serde::{Deserialize, Serialize};

/// The link's node and bounds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The node the agent runs on.
    pub node: LogicalNodeId,
    /// How long the link may be down before the agent gives up.
    pub reconnect_for: Duration,
    /// The wait after the first failed dial; doubles per failure.
    pub backoff_base: Duration,
    /// The longest wait between dials.
    pub backoff_max: Duration,
}

/// The hello a dial sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hello {
    /// With the one-time join token.
    Join,
    /// By endpoint id: the orchestrator admitted this agent before.
    Rejoin,
}

/// Where the agent stands with the orchestrator before a welcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Standing {
    /// Never welcomed; every `Join` so far was answered (or none was sent).
    Token,
    /// Never welcomed, and a `Join` went unanswered: the orchestrator may
    /// have redeemed the token and restarted before answering.
    Unanswered,
    /// Never welcomed; its `Join` was refused after an unanswered one, so
    /// it tries `Rejoin`, once: a refusal of that is final.
    RejoinOnce,
    /// Welcomed once: it always rejoins.
    Welcomed,
}

impl Standing {
    /// The hello this standing sends.
    pub fn hello(self) -> Hello {
        match self {
            Standing::Token | Standing::Unanswered => Hello::Join,
            Standing::RejoinOnce | Standing::Welcomed => Hello::Rejoin,
        }
    }
}

/// How the agent ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Exit {
    /// The orchestrator shut it down (exit code 0).
    Shutdown,
    /// The orchestrator refused it (exit code 3).
    Rejected {
        /// The orchestrator's reason.
        reason: String,
    },
    /// It could not reach the orchestrator for `reconnect_for` (exit code 4).
    Unreachable,
}

impl Exit {
    /// The process exit code.
    pub fn code(&self) -> i32 {
        match self {
            Exit::Shutdown => 0,
            Exit::Rejected { .. } => 3,
            Exit::Unreachable => 4,
        }
    }
}

/// What the link is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// Begin: dial for the first time.
    Start,
    /// A wait may be over.
    Tick,
    /// The dial, or writing the hello, failed: nothing reached the
    /// orchestrator.
    DialFailed {
        /// Why.
        reason: String,
    },
    /// The hello was sent and never answered (no answer in time, or the
    /// connection ended first).
    Unanswered {
        /// Why.
        reason: String,
    },
    /// The hello was answered with `Welcome`.
    Welcomed,
    /// The orchestrator refused the agent (before or after a welcome).
    Refused {
        /// Its reason.
        reason: String,
    },
    /// A welcomed connection was lost.
    Lost {
        /// Why.
        reason: String,
    },
    /// The orchestrator shut the agent down.
    Shutdown,
}

/// What the link asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Dial, send `hello`, and report the outcome; the dial and its answer
    /// never wait past `deadline` (a dial to a dead port hangs otherwise).
    Dial {
        /// The hello to send.
        hello: Hello,
        /// When the link gives up.
        deadline: Instant,
    },
    /// A line of progress for people.
    Say(String),
    /// A line about a problem, for people.
    Warn(String),
    /// End the agent.
    Exit(Exit),
}

/// Where the link stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Not started.
    Idle,
    /// A dial is in flight.
    Dialing {
        /// The standing it dialled with.
        standing: Standing,
        /// When the link gives up.
        deadline: Instant,
        /// Failed dials since the link went down.
        failures: u32,
    },
    /// Waiting before the next dial.
    Waiting {
        /// The standing the next dial has.
        standing: Standing,
        /// When the link gives up.
        deadline: Instant,
        /// Failed dials since the link went down.
        failures: u32,
        /// When it dials.
        until: Instant,
    },
    /// Welcomed; the connection is up.
    Connected,
    /// Ended.
    Exited(Exit),
}

/// Inputs the link ignored: answers that do not fit its phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// How many.
    pub out_of_phase: u64,
}

/// The agent's control link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    config: Config,
    phase: Phase,
    ignored: Ignored,
}

impl Machine {
    /// A link not started yet.
    pub fn new(config: Config) -> Machine {
        Machine {
            config,
            phase: Phase::Idle,
            ignored: Ignored::default(),
        }
    }

    /// Where it stands.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Inputs ignored so far.
    pub fn ignored(&self) -> Ignored {
        self.ignored
    }

    /// A dial with `standing`, from a link down since `deadline` was set.
    fn dial(standing: Standing, deadline: Instant, failures: u32, out: &mut Vec<Effect>) -> Phase {
        out.push(Effect::Dial {
            hello: standing.hello(),
            deadline,
        });
        Phase::Dialing {
            standing,
            deadline,
            failures,
        }
    }

    /// A dial that failed: wait and dial again, or give up at the deadline.
    fn retry(
        &self,
        now: Instant,
        (standing, deadline, failures): (Standing, Instant, u32),
        reason: &str,
        out: &mut Vec<Effect>,
    ) -> Phase {
        if now >= deadline {
            out.push(Effect::Warn(format!("giving up: {reason}")));
            return self.exit(Exit::Unreachable, out);
        }
        let failures = failures.saturating_add(1);
        let wait = backoff(failures, self.config.backoff_base, self.config.backoff_max);
        out.push(Effect::Warn(format!(
            "dial failed ({reason}); retrying in {} ms",
            wait.as_millis()
        )));
        Phase::Waiting {
            standing,
            deadline,
            failures,
            until: now + wait,
        }
    }

    fn exit(&self, exit: Exit, out: &mut Vec<Effect>) -> Phase {
        out.push(Effect::Exit(exit.clone()));
        Phase::Exited(exit)
    }
}

impl crate::Machine for Machine {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        self.phase = match (phase, input) {
            (Phase::Idle, Input::Start) => {
                let deadline = now + self.config.reconnect_for;
                Machine::dial(Standing::Token, deadline, 0, &mut out)
            }
            (
                Phase::Waiting {
                    standing,
                    deadline,
                    failures,
                    until,
                },
                Input::Tick,
            ) if now >= until => Machine::dial(standing, deadline, failures, &mut out),
            (
                Phase::Dialing {
                    standing,
                    deadline,
                    failures,
                },
                Input::DialFailed { reason },
            ) => self.retry(now, (standing, deadline, failures), &reason, &mut out),
            (
                Phase::Dialing {
                    standing,
                    deadline,
                    failures,
                },
                Input::Unanswered { reason },
            ) => {
                // The orchestrator may have admitted a `Join` it never
                // answered: remember it for a refusal to come.
                let standing = match standing {
                    Standing::Token => Standing::Unanswered,
                    other => other,
                };
                self.retry(now, (standing, deadline, failures), &reason, &mut out)
            }
            (Phase::Dialing { standing, .. }, Input::Welcomed) => {
                let verb = match standing {
                    Standing::Welcomed => "rejoined",
                    _ => "joined",
                };
                let node = &self.config.node;
                out.push(Effect::Say(format!(
                    "{verb} the orchestrator as node {node}"
                )));
                Phase::Connected
            }
            (
                Phase::Dialing {
                    standing: Standing::Unanswered,
                    deadline,
                    failures,
                },
                Input::Refused { reason },
            ) => {
                let reason = format!("join refused ({reason}) after an unanswered join");
                let dial = (Standing::RejoinOnce, deadline, failures);
                self.retry(now, dial, &reason, &mut out)
            }
            (Phase::Dialing { .. } | Phase::Connected, Input::Refused { reason }) => {
                out.push(Effect::Warn(format!("rejected: {reason}")));
                self.exit(Exit::Rejected { reason }, &mut out)
            }
            (Phase::Dialing { .. } | Phase::Connected, Input::Shutdown) => {
                self.exit(Exit::Shutdown, &mut out)
            }
            (Phase::Connected, Input::Lost { reason }) => {
                out.push(Effect::Warn(format!(
                    "connection lost ({reason}); rejoining"
                )));
                let deadline = now + self.config.reconnect_for;
                Machine::dial(Standing::Welcomed, deadline, 0, &mut out)
            }
            (phase, Input::Tick) => phase,
            (phase, _) => {
                self.ignored.out_of_phase += 1;
                phase
            }
        };
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Waiting { until, .. } => Some(until),
            _ => None,
        }
    }

    fn check_invariants(&self) {
        // L1: a wait ends before the link would give up plus one backoff
        // (the dial after it is the one that finds the deadline passed).
        // That a welcomed agent never sends its token again holds by
        // construction: the hello is derived from the standing.
        if let Phase::Waiting {
            deadline, until, ..
        } = &self.phase
        {
            assert!(
                *until < *deadline + self.config.backoff_max,
                "L1: a wait until {until} past the deadline {deadline}"
            );
        }
    }
}
