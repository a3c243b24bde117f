//! The token edges on the orchestrator: token-in, a prompt (or a fed-back
//! token) cut into chunks for stage 0; token-out, the last stage's tokens
//! become the run's inputs.

use super::super::edges;
use super::super::run_input;
use super::super::shared::HostShared;
use super::super::wire::{self, EdgeFrame, Payload, Step};
use super::HostSink;
use crate::transport::agent_id_of;
use core_fsm::ids::AgentId;
use core_fsm::port::Input;
use core_fsm::run::{self, RequestId, TokenEndpoint};
use iroh::endpoint::Connection;
use std::sync::{Arc, Mutex};
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

impl HostSink {
    /// Sends `tokens` of `request` (from position `pos`, its token `seq`)
    /// into stage 0.
    pub(super) fn inject(&mut self, request: RequestId, seq: u64, pos: u32, tokens: Vec<u32>) {
        // A prompt travels in chunks, several in flight, so the stages
        // overlap; a fed-back token is one chunk.
        let chunks = super::super::prefill_chunks(
            tokens.len(),
            self.shared.model().config.embedding,
            self.shared.spec().prefill_chunk,
        );
        let count = chunks.len();
        if seq == 0 {
            self.shared.update(|s| s.started(request.0));
            self.shared.prompt_event(format!(
                "request {} dispatched: {} prompt tokens into stage 0, in {count} chunk(s)",
                request.0,
                tokens.len()
            ));
        } else if pos == 0 {
            self.shared.prompt_event(format!(
                "request {} resumed: its prompt and {seq} generated tokens into stage 0, in {count} chunk(s)",
                request.0,
            ));
        }
        let mut steps = Vec::new();
        let mut at = 0;
        for (i, len) in chunks.into_iter().enumerate() {
            steps.push(Step {
                step: self.next_step,
                request: request.0,
                seq,
                pos: pos + at as u32,
                payload: Payload::Tokens(tokens[at..at + len].to_vec()),
                last: i + 1 == count,
            });
            self.next_step += 1;
            at += len;
        }
        let run_id = self.shared.run_id;
        let tx = self.tx.clone();
        let token_in = self.token_in.clone();
        // A prompt's chunks may wait for room (stage 0 reads only so far
        // ahead): an injection sends after the one before it on the same
        // edge, so stage 0 gets every step in order (closing the edge stops
        // the last one, so a rebuilt pipeline's injections never wait on an
        // old edge).
        let mut edge = token_in.lock().expect("token in");
        let (queue, before, life) = (edge.queue.clone(), edge.sending.take(), edge.life);
        let sending = token_in.clone();
        let task = tokio::spawn(async move {
            if let Some(before) = before {
                let _ = before.await;
            }
            let mut sent = queue.is_some();
            if let Some(queue) = queue {
                for step in steps {
                    if queue.send(EdgeFrame::Step(step)).await.is_err() {
                        sent = false;
                        break;
                    }
                }
            }
            if !sent {
                let reason = "the token-in edge is closed".to_owned();
                TokenIn::fault(&sending, life, &tx, run_id, reason);
            }
        });
        edge.sending = Some(task);
    }
}

/// The token-in edge: its queue once dialed, the last injection's sending
/// task, and its life, counted up each time the token endpoints close, so
/// that what a closed edge (a rebuilt pipeline's old one) says is not the
/// run's.
#[derive(Default)]
pub(super) struct TokenIn {
    pub(super) life: u64,
    queue: Option<mpsc::Sender<EdgeFrame>>,
    sending: Option<tokio::task::JoinHandle<()>>,
}

impl TokenIn {
    /// The edge of life `life` is dialed: its queue is kept, unless the
    /// endpoints closed meanwhile (then `false`).
    pub(super) fn open(this: &Mutex<TokenIn>, life: u64, queue: mpsc::Sender<EdgeFrame>) -> bool {
        let mut edge = this.lock().expect("token in");
        if edge.life != life {
            return false;
        }
        edge.queue = Some(queue);
        true
    }

    /// The token endpoints close: the queue goes, the last injection's
    /// sending stops, and the life after begins.
    pub(super) fn close(&mut self) {
        self.life += 1;
        self.queue = None;
        if let Some(sending) = self.sending.take() {
            sending.abort();
        }
    }

    /// A fault of the edge of life `life`, said to the run only while that
    /// life lasts.
    pub(super) fn fault(
        this: &Mutex<TokenIn>,
        life: u64,
        tx: &mpsc::Sender<Input>,
        run_id: core_fsm::ids::RunId,
        reason: String,
    ) {
        if this.lock().expect("token in").life != life {
            return;
        }
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx
                .send(run_input(run::Input::EndpointFault { run_id, reason }))
                .await;
        });
    }
}
