//! Edges, both ends, as `runtime-real/src/pipeline/edges.rs` runs them:
//! the sender dials, the connection waits at the receiver until its stage
//! claims it, frames arrive in order after the message latency. A broken
//! connection is noticed by its receiver at once and by its sender at its
//! next write.

use super::{Ev, RunWorld, model, run_input};
use conformance::run::RunFault;
use core_fsm::run::{self, RequestId, TokenEndpoint};
use core_fsm::stage;
use core_fsm::time::{Duration, Instant};

/// One end of an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The orchestrator (token-in sender, token-out receiver).
    Orch,
    /// The node running this stage.
    Node(u32),
}

/// One dialed connection of one edge.
#[derive(Clone, Debug)]
pub struct Conn {
    /// The edge's number.
    pub edge: u32,
    /// Who dialed.
    pub from: End,
    /// Who receives.
    pub to: End,
    /// Whether frames still pass.
    pub open: bool,
    /// When the last frame arrives (frames keep their order).
    pub last_at: Instant,
}

/// What an edge carries (`runtime-real` `EdgeFrame`, rows for activations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// One step's input.
    Step {
        /// The pipeline's step number.
        step: u64,
        /// The request.
        request: u64,
        /// The batch's sequence number within the request.
        seq: u64,
        /// The batch's first position.
        pos: u32,
        /// Token ids (into stage 0) or activation rows.
        rows: Vec<u64>,
        /// The batch's last chunk (only it is sampled on the last stage).
        last: bool,
    },
    /// A sampled token, to the orchestrator.
    Token {
        /// The step that produced it.
        step: u64,
        /// The request.
        request: u64,
        /// Its sequence number.
        seq: u64,
        /// The token.
        token: u32,
    },
}

impl RunWorld<'_> {
    /// Dials edge `edge` from `from` to `to`; the connection reaches the
    /// receiver after the latency. None when the receiver is gone.
    pub(super) fn dial(&mut self, edge: u32, from: End, to: End) -> Option<u32> {
        if let End::Node(s) = to
            && !self.nodes[s as usize].alive
        {
            return None;
        }
        let id = self.conns.len() as u32;
        self.conns.push(Conn {
            edge,
            from,
            to,
            open: true,
            last_at: self.now,
        });
        self.at(self.latency(), Ev::Dialed { conn: id });
        Some(id)
    }

    /// The connection reached its receiver: a stage that asked for it
    /// claims it, the orchestrator accepts only the last stage's.
    pub(super) fn dialed(&mut self, conn: u32) {
        let c = self.conns[conn as usize].clone();
        if !c.open {
            return;
        }
        match c.to {
            End::Node(s) => {
                let node = &mut self.nodes[s as usize];
                if !node.alive {
                    return;
                }
                if node.claiming && node.reader.is_none() {
                    self.claim(s, conn);
                } else {
                    // A newer connection replaces an unclaimed older one.
                    node.arrived = Some(conn);
                }
            }
            End::Orch => {
                let last = End::Node(self.case.profile.stages.max(1) - 1);
                if self.hs.token_out_open && c.from == last && self.hs.token_out.is_none() {
                    self.hs.token_out = Some(conn);
                    let ready = run::Input::TokenEndpointReady {
                        run_id: super::RUN,
                        endpoint: TokenEndpoint::Out,
                    };
                    self.at(Duration::ZERO, Ev::Host(run_input(ready)));
                } else {
                    self.conns[conn as usize].open = false;
                }
            }
        }
    }

    /// Stage `s` takes connection `conn` as its inbound edge, if it comes
    /// from the upstream stage.
    pub(super) fn claim(&mut self, s: u32, conn: u32) {
        let expected = if s == 0 { End::Orch } else { End::Node(s - 1) };
        let from = self.conns[conn as usize].from;
        let input = if from == expected {
            self.nodes[s as usize].reader = Some(conn);
            stage::Input::InboundReady
        } else {
            self.conns[conn as usize].open = false;
            let reason = format!("edge came from {from:?}, not the upstream stage");
            stage::Input::EdgeFault { reason }
        };
        self.stage_answer(s, Duration::ZERO, input);
    }

    /// Writes `frame` on `conn`; false when the connection is broken (the
    /// writer's failure).
    pub(super) fn send_frame(&mut self, conn: u32, frame: Frame) -> bool {
        if !self.conns[conn as usize].open {
            return false;
        }
        let nth = self.frames_sent;
        self.frames_sent += 1;
        if self.planned(RunFault::EdgeClosed, nth).is_some() {
            self.inject(RunFault::EdgeClosed);
            self.close_conn(conn);
            return true;
        }
        let mut extra = 0;
        if let Some(ms) = self.planned(RunFault::EdgeStalled, nth) {
            self.inject(RunFault::EdgeStalled);
            extra += ms;
        }
        if matches!(frame, Frame::Token { .. }) {
            let nth = self.tokens_sent;
            self.tokens_sent += 1;
            if let Some(ms) = self.planned(RunFault::TokenLate, nth) {
                self.inject(RunFault::TokenLate);
                extra += ms;
            }
            if self.planned(RunFault::TokenDuplicated, nth).is_some() {
                self.inject(RunFault::TokenDuplicated);
                self.deliver(conn, frame.clone(), extra);
            }
            if self.planned(RunFault::TokenReordered, nth).is_some() && self.held.is_none() {
                self.inject(RunFault::TokenReordered);
                self.held = Some((conn, frame, extra));
                return true;
            }
            self.deliver(conn, frame, extra);
            // A held record arrives right after the next one.
            self.release_held();
            return true;
        }
        self.deliver(conn, frame, extra);
        true
    }

    /// Delivers a held (reordered) token record now.
    pub(super) fn release_held(&mut self) {
        if let Some((conn, frame, extra)) = self.held.take() {
            self.deliver(conn, frame, extra);
        }
    }

    fn deliver(&mut self, conn: u32, frame: Frame, extra_ms: u64) {
        let when = (self.now + self.latency() + Duration::from_millis(extra_ms))
            .max(self.conns[conn as usize].last_at);
        self.conns[conn as usize].last_at = when;
        self.at_instant(when, Ev::Arrive { conn, frame });
    }

    /// A frame reaches the receiver of `conn`.
    pub(super) fn arrive(&mut self, conn: u32, frame: Frame) {
        let c = &self.conns[conn as usize];
        if !c.open {
            return;
        }
        match (c.to, frame) {
            (End::Node(s), frame @ Frame::Step { .. }) => {
                let node = &mut self.nodes[s as usize];
                if !node.alive || node.reader != Some(conn) {
                    return;
                }
                let Frame::Step { step, .. } = frame else {
                    return;
                };
                node.pending.insert(step, frame);
                self.feed_agent(
                    s,
                    core_fsm::agent::Input::Stage {
                        stage: s,
                        input: stage::Input::StepArrived { seq: step },
                    },
                );
            }
            (
                End::Orch,
                Frame::Token {
                    request,
                    seq,
                    token,
                    ..
                },
            ) if self.hs.token_out == Some(conn) => {
                let input = run::Input::Token {
                    run_id: super::RUN,
                    request: RequestId(request),
                    seq,
                    token,
                    eos: token == model::EOS,
                };
                self.feed_host(run_input(input));
            }
            // Late records of a token-out connection that was closed.
            (End::Orch, Frame::Token { .. }) => {}
            (_, other) => {
                let what = format!("edge {} carried {other:?} to {:?}", c.edge, c.to);
                self.violate("RW0", what);
            }
        }
    }

    /// Breaks `conn`: its receiver notices after the latency.
    pub(super) fn close_conn(&mut self, conn: u32) {
        if std::mem::replace(&mut self.conns[conn as usize].open, false) {
            self.at(self.latency(), Ev::Broken { conn });
        }
    }

    /// The receiver of a broken connection notices: its reader ends.
    pub(super) fn broken(&mut self, conn: u32) {
        let c = self.conns[conn as usize].clone();
        match c.to {
            End::Node(s) if self.nodes[s as usize].reader == Some(conn) => {
                self.nodes[s as usize].reader = None;
                let reason = format!("edge {} closed", c.edge);
                self.stage_answer(s, Duration::ZERO, stage::Input::EdgeFault { reason });
            }
            End::Orch if self.hs.token_out == Some(conn) => {
                self.hs.token_out = None;
                let reason = "the token-out edge closed".to_owned();
                let input = run::Input::EndpointFault {
                    run_id: super::RUN,
                    reason,
                };
                self.feed_host(run_input(input));
            }
            _ => {}
        }
    }
}
