//! Request serving (SPEC.md "The run, OrchestratorRun"): one active request, a
//! bounded queue, token records in sequence, exactly one terminal event per
//! request.

use super::types::Active;
use super::{
    DoneReason, Effect, Input, Machine, Phase, PromptEvent, PromptFault, Queued, RequestId,
    RunError, Serving, TimerKind,
};
use crate::time::Instant;

impl Machine {
    pub(super) fn on_submit(
        &mut self,
        now: Instant,
        phase: Phase,
        request: RequestId,
        prompt: Vec<u32>,
        max_tokens: u32,
        out: &mut Vec<Effect>,
    ) -> Phase {
        // Ids only increase, so a request can never be answered twice.
        if self.last_request.is_some_and(|last| request <= last) {
            self.ignored.stale_request += 1;
            return phase;
        }
        self.last_request = Some(request);
        let fault = |fault| Effect::Prompt {
            request,
            event: PromptEvent::Fault(fault),
        };
        let queued = Queued {
            request,
            prompt,
            max_tokens,
        };
        let context = self.config.context as usize;
        let invalid = if queued.prompt.is_empty() {
            Some("the prompt holds no token".to_owned())
        } else if context > 0 && queued.prompt.len() >= context {
            Some(format!(
                "the prompt's {} tokens fill the context of {context}",
                queued.prompt.len()
            ))
        } else {
            None
        };
        let phase = match phase {
            Phase::Serving(serving) => serving,
            // A request while a repair rebuilds the pipeline waits for it.
            phase => {
                let event = match (invalid, self.carry.as_mut()) {
                    (_, None) => PromptFault::NotServing,
                    (Some(reason), Some(_)) => PromptFault::Invalid { reason },
                    (None, Some(carry)) if carry.queue.len() < self.config.queue_max => {
                        carry.queue.push_back(queued);
                        return phase;
                    }
                    (None, Some(_)) => PromptFault::QueueFull,
                };
                out.push(fault(event));
                return phase;
            }
        };
        let mut serving = phase;
        if let Some(reason) = invalid {
            out.push(fault(PromptFault::Invalid { reason }));
        } else if serving.active.is_none() {
            self.start(now, &mut serving, queued, out);
        } else if serving.queue.len() >= self.config.queue_max {
            out.push(fault(PromptFault::QueueFull));
        } else {
            serving.queue.push_back(queued);
        }
        Phase::Serving(serving)
    }

    pub(super) fn start(
        &mut self,
        now: Instant,
        serving: &mut Serving,
        queued: Queued,
        out: &mut Vec<Effect>,
    ) {
        assert!(serving.active.is_none(), "run: one active request at most");
        let prompt_len = u32::try_from(queued.prompt.len()).unwrap_or(u32::MAX);
        out.push(Effect::Inject {
            request: queued.request,
            seq: 0,
            pos: 0,
            tokens: queued.prompt.clone(),
        });
        serving.active = Some(Active {
            request: queued.request,
            max_tokens: queued.max_tokens,
            prompt_len,
            next_seq: 0,
            prompt: queued.prompt,
            generated: Vec::new(),
        });
        self.timers
            .set(TimerKind::TokenGap, self.first_token_due(now, prompt_len));
    }

    /// When the first token of an injection of `injected` tokens is due:
    /// the token gap, plus the prefill's allowance.
    pub(super) fn first_token_due(&self, now: Instant, injected: u32) -> Instant {
        let prefill = self
            .config
            .prefill_per_token
            .saturating_mul(u64::from(injected));
        now + self.config.token_timeout + prefill
    }

    /// Ends the active request with `event` and starts the next one, if any.
    fn end_active(
        &mut self,
        now: Instant,
        mut serving: Serving,
        event: PromptEvent,
        out: &mut Vec<Effect>,
    ) -> Phase {
        assert!(event.is_terminal());
        let active = serving.active.take().expect("an active request to end");
        out.push(Effect::Prompt {
            request: active.request,
            event,
        });
        self.timers.cancel(&TimerKind::TokenGap);
        if let Some(next) = serving.queue.pop_front() {
            self.start(now, &mut serving, next, out);
        }
        Phase::Serving(serving)
    }

    pub(super) fn on_token(
        &mut self,
        now: Instant,
        mut serving: Serving,
        input: Input,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let Input::Token {
            request,
            seq,
            token,
            eos,
            ..
        } = input
        else {
            unreachable!("matched Token");
        };
        let Some(active) = serving.active.as_mut().filter(|a| a.request == request) else {
            // Late records of an ended request land here too.
            self.ignored.wrong_request += 1;
            return Phase::Serving(serving);
        };
        let expected = active.next_seq;
        if seq != expected {
            // Out-of-order output cannot be fed back: the request faults and
            // prompt serving fails (SPEC.md "The run, OrchestratorRun").
            serving.active = None;
            self.timers.cancel(&TimerKind::TokenGap);
            let fault = PromptFault::TokenSequence { expected, got: seq };
            out.push(Effect::Prompt {
                request,
                event: PromptEvent::Fault(fault),
            });
            let error = RunError::TokenSequence {
                request,
                expected,
                got: seq,
            };
            return self.fail_from(now, Phase::Serving(serving), error, out);
        }
        active.next_seq += 1;
        active.generated.push(token);
        let produced = active.next_seq;
        // Token `seq` fed back runs position `prompt_len + seq`.
        let pos = active
            .prompt_len
            .saturating_add(u32::try_from(seq).unwrap_or(u32::MAX));
        let capped = active.max_tokens > 0 && produced >= u64::from(active.max_tokens);
        // Feeding token `k` back runs position `prompt_len + k`, which must
        // be inside the context.
        let context = u64::from(self.config.context);
        let full = context > 0 && u64::from(active.prompt_len) + produced > context;
        out.push(Effect::Prompt {
            request,
            event: PromptEvent::Token { seq, token },
        });
        let done = if eos {
            Some(DoneReason::Eos)
        } else if capped {
            Some(DoneReason::MaxTokens)
        } else if full {
            Some(DoneReason::Context)
        } else {
            None
        };
        if let Some(reason) = done {
            // The end-of-sequence record is not a token of the text.
            let tokens = produced - u64::from(eos);
            let event = PromptEvent::Done { tokens, reason };
            return self.end_active(now, serving, event, out);
        }
        // Feed the token back for the next position.
        out.push(Effect::Inject {
            request,
            seq: seq + 1,
            pos,
            tokens: vec![token],
        });
        self.timers
            .set(TimerKind::TokenGap, now + self.config.token_timeout);
        Phase::Serving(serving)
    }

    pub(super) fn on_prompt_fault(
        &mut self,
        now: Instant,
        serving: Serving,
        request: RequestId,
        reason: String,
        out: &mut Vec<Effect>,
    ) -> Phase {
        if serving.active.as_ref().is_none_or(|a| a.request != request) {
            self.ignored.wrong_request += 1;
            return Phase::Serving(serving);
        }
        // A prompt-level fault ends the request, not the run.
        let event = PromptEvent::Fault(PromptFault::Worker { reason });
        self.end_active(now, serving, event, out)
    }

    pub(super) fn on_token_timeout(
        &mut self,
        now: Instant,
        serving: Serving,
        out: &mut Vec<Effect>,
    ) -> Phase {
        let event = PromptEvent::Fault(PromptFault::Timeout);
        self.end_active(now, serving, event, out)
    }
}
