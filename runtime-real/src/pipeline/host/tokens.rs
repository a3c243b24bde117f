//! The token-out edge on the orchestrator: the last stage's tokens become
//! the run's inputs.

use super::super::edges;
use super::super::run_input;
use super::super::shared::HostShared;
use super::super::wire::{self, EdgeFrame};
use crate::transport::agent_id_of;
use core_fsm::ids::AgentId;
use core_fsm::port::Input;
use core_fsm::run::{self, RequestId, TokenEndpoint};
use iroh::endpoint::Connection;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Accepts the last stage's token-out edge and turns its tokens into the
/// run's inputs.
pub(super) async fn token_out(
    shared: Arc<HostShared>,
    tx: mpsc::Sender<Input>,
    mut conns: mpsc::Receiver<Connection>,
    last: AgentId,
    edge: u32,
) {
    let run_id = shared.run_id;
    while let Some(conn) = conns.recv().await {
        let from = agent_id_of(conn.remote_id());
        if from != last {
            conn.close(3u32.into(), b"not the last stage");
            continue;
        }
        let Ok(mut recv) = conn.accept_uni().await else {
            continue;
        };
        match wire::read::<EdgeFrame, _>(&mut recv).await {
            Ok(EdgeFrame::Hello { run_id: r, edge: e }) if r == run_id && e == edge => {}
            _ => {
                conn.close(2u32.into(), b"expected the token-out hello");
                continue;
            }
        }
        let ready = run::Input::TokenEndpointReady {
            run_id,
            endpoint: TokenEndpoint::Out,
        };
        if tx.send(run_input(ready)).await.is_err() {
            return;
        }
        let reason = loop {
            match edges::next(&mut recv).await {
                Ok(Some(EdgeFrame::Token {
                    request,
                    seq,
                    token,
                    ..
                })) => {
                    let eos = shared.model().tokenizer.is_eog(token);
                    let request = RequestId(request);
                    let input = run::Input::Token {
                        run_id,
                        request,
                        seq,
                        token,
                        eos,
                    };
                    if tx.send(run_input(input)).await.is_err() {
                        return;
                    }
                }
                Ok(Some(other)) => break format!("token-out: unexpected {other:?}"),
                Ok(None) => break "the token-out edge closed".to_owned(),
                Err(e) => break format!("token-out: {e}"),
            }
        };
        let _ = tx
            .send(run_input(run::Input::EndpointFault { run_id, reason }))
            .await;
        return;
    }
}
