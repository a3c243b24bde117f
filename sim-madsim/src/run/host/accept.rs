//! The orchestrator's listeners: agents' control connections (each join
//! an `AgentJoined` on the agent's lease, its frames the host's inputs,
//! its end reported) and the last stage's token-out edge.

use super::{DIAL_FOR, Joined, Shelf};
use crate::run::net::{EdgeOpen, Msg};
use crate::run::shared::{Shared, pipe};
use core_fsm::membership;
use core_fsm::pipeline::Input;
use core_fsm::port;
use core_fsm::run::{self, RequestId, TokenEndpoint};
use madsim::net::Endpoint;
use sim::run_world::kit::Frame;
use sim::run_world::{RUN, model};
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// Agents dial in: each joins on its lease (the composite hands it the
/// node, and membership watches it), its frames become the host's inputs,
/// and its connection's end is reported.
pub(super) async fn accept_agents(ep: Endpoint, io: Shelf, tx: UnboundedSender<port::Input>) {
    while let Ok((sender, mut receiver, _)) = ep.accept1().await {
        let Ok(Ok(first)) = madsim::time::timeout(DIAL_FOR, receiver.recv()).await else {
            continue;
        };
        let Ok(hello) = first.downcast::<Msg>() else {
            continue;
        };
        let Msg::Hello {
            stage,
            node,
            lease_id,
            agent,
        } = *hello
        else {
            continue;
        };
        let conn = {
            let mut io = io.borrow_mut();
            io.conns += 1;
            let conn = io.conns;
            let joined = Joined {
                agent: agent.clone(),
                conn,
                sender: Rc::new(sender),
            };
            io.agents.insert(stage, joined);
            conn
        };
        let joined = port::Input::AgentJoined {
            node: node.clone(),
            lease_id,
            agent: agent.clone(),
        };
        let _ = tx.send(joined);
        let (io, tx) = (Rc::clone(&io), tx.clone());
        madsim::task::spawn_local(async move {
            while let Ok(payload) = receiver.recv().await {
                if let Ok(msg) = payload.downcast::<Msg>()
                    && let Msg::ToHost(input) = *msg
                {
                    let _ = tx.send(pipe(input));
                }
            }
            let mut io = io.borrow_mut();
            if io.agents.get(&stage).is_some_and(|j| j.conn == conn) {
                io.agents.remove(&stage);
            }
            let lost = membership::Input::ConnectionLost { node, agent };
            let _ = tx.send(pipe(Input::Membership(lost)));
        });
    }
}

/// The last stage's token-out edge: accepted only while the endpoint is
/// open, from the last stage, one at a time.
pub(super) async fn accept_token_out(
    shared: Arc<Shared>,
    ep: Endpoint,
    io: Shelf,
    tx: UnboundedSender<port::Input>,
) {
    let last = shared.lock().case.profile.stages.max(1) - 1;
    while let Ok((_sender, mut receiver, _)) = ep.accept1().await {
        let Ok(Ok(first)) = madsim::time::timeout(DIAL_FOR, receiver.recv()).await else {
            continue;
        };
        let from = first.downcast::<EdgeOpen>().ok().and_then(|o| o.from);
        let conn = {
            let mut io = io.borrow_mut();
            if !io.token_out_open || from != Some(last) || io.token_out.is_some() {
                continue;
            }
            io.conns += 1;
            io.token_out = Some(io.conns);
            io.conns
        };
        let ready = run::Input::TokenEndpointReady {
            run_id: RUN,
            endpoint: TokenEndpoint::Out,
        };
        let _ = tx.send(pipe(Input::Run(ready)));
        let (io, tx) = (Rc::clone(&io), tx.clone());
        madsim::task::spawn_local(async move {
            while let Ok(payload) = receiver.recv().await {
                if io.borrow().token_out != Some(conn) {
                    return;
                }
                if let Ok(frame) = payload.downcast::<Frame>()
                    && let Frame::Token {
                        request,
                        seq,
                        token,
                        ..
                    } = *frame
                {
                    let input = run::Input::Token {
                        run_id: RUN,
                        request: RequestId(request),
                        seq,
                        token,
                        eos: token == model::EOS,
                    };
                    let _ = tx.send(pipe(Input::Run(input)));
                }
            }
            let mut io = io.borrow_mut();
            if io.token_out == Some(conn) {
                io.token_out = None;
                let reason = "the token-out edge closed".to_owned();
                let fault = run::Input::EndpointFault {
                    run_id: RUN,
                    reason,
                };
                let _ = tx.send(pipe(Input::Run(fault)));
            }
        });
    }
}
