//! The run world's oracle: what every client, stage and the operator saw,
//! judged after every step (RW1..RW7) and at the end (RW1, RW7, RW10);
//! RW0 is a machine's own invariant or a panic, RW8 liveness. The
//! invariants are listed in `spec/simulation.md`.

use super::model;
use conformance::run::RunProfile;
use core_fsm::agent;
use core_fsm::pipeline;
use core_fsm::run::{self, PromptEvent, PromptFault, RequestId, TokenEndpoint};
use core_fsm::stage::{self, Report};
use std::collections::{BTreeMap, BTreeSet};

/// A broken world invariant: its id and what was seen.
pub type Broken = (&'static str, String);

/// One stage controller life: the node, its agent's generation, the
/// agent's incarnation (orchestrator restarts), the controller life.
pub type Life = (u32, u32, u32, u64);

/// What one request's client saw.
#[derive(Clone, Debug)]
struct Request {
    prompt: Vec<u32>,
    max_tokens: u32,
    records: Vec<u32>,
    terminal: Option<PromptEvent>,
    disconnect_after: Option<u64>,
    /// Pending when the orchestrator crashed: its client saw the
    /// connection close, and nothing more is said of it.
    lost: bool,
}

/// The run world's oracle.
pub struct RunOracle {
    /// Names of the faults the world actually injected.
    pub injected: BTreeSet<&'static str>,
    stages: u32,
    layers: u32,
    context: u32,
    fatal: bool,
    requests: BTreeMap<RequestId, Request>,
    weights_ready: BTreeSet<u32>,
    stage_ready: BTreeSet<u32>,
    endpoints: BTreeSet<TokenEndpoint>,
    provisioned: Vec<u32>,
    /// Steps executed by each stage controller life, and by its stage.
    executed: BTreeMap<(Life, u32), u64>,
    finished: Vec<Result<(), run::RunError>>,
}

impl RunOracle {
    /// An oracle for a run of profile `p`.
    pub fn new(p: &RunProfile, fatal: bool) -> RunOracle {
        let stages = p.stages.max(1);
        RunOracle {
            injected: BTreeSet::new(),
            stages,
            layers: p.layers.max(stages),
            context: p.context,
            fatal,
            requests: BTreeMap::new(),
            weights_ready: BTreeSet::new(),
            stage_ready: BTreeSet::new(),
            endpoints: BTreeSet::new(),
            provisioned: Vec::new(),
            executed: BTreeMap::new(),
            finished: Vec::new(),
        }
    }

    /// A client submitted `request`.
    pub fn submitted(
        &mut self,
        request: RequestId,
        prompt: Vec<u32>,
        max_tokens: u32,
        disconnect_after: Option<u64>,
    ) {
        let r = Request {
            prompt,
            max_tokens,
            records: Vec::new(),
            terminal: None,
            disconnect_after,
            lost: false,
        };
        self.requests.insert(request, r);
    }

    /// Whether every submitted request has its terminal event (or was lost
    /// with a crashed orchestrator).
    pub fn all_answered(&self) -> bool {
        self.requests
            .values()
            .all(|r| r.terminal.is_some() || r.lost)
    }

    /// The orchestrator crashed: its pending requests are lost, and the
    /// restarted one's startup is judged from its start (RW4, RW6).
    pub fn orchestrator_crashed(&mut self) {
        for r in self.requests.values_mut() {
            if r.terminal.is_none() {
                r.lost = true;
            }
        }
        self.provisioned.clear();
        self.weights_ready.clear();
        self.stage_ready.clear();
        self.endpoints.clear();
    }

    /// Requests that ended Done.
    pub fn done_requests(&self) -> u32 {
        let done = |r: &&Request| matches!(r.terminal, Some(PromptEvent::Done { .. }));
        self.requests.values().filter(done).count() as u32
    }

    /// An input the host is handed: the readiness facts it heard.
    pub fn host_input(&mut self, input: &pipeline::Input) {
        let pipeline::Input::Run(input) = input else {
            return;
        };
        match input {
            run::Input::Stage(Report::WeightsReady { run_id, stage, .. })
                if *run_id == super::RUN =>
            {
                self.weights_ready.insert(*stage);
            }
            run::Input::Stage(Report::StageReady { run_id, stage, .. })
                if *run_id == super::RUN =>
            {
                self.stage_ready.insert(*stage);
            }
            run::Input::TokenEndpointReady { endpoint, .. } => {
                self.endpoints.insert(*endpoint);
            }
            _ => {}
        }
    }

    /// An effect of the host, judged before it is carried out.
    pub fn host_effect(&mut self, effect: &pipeline::Effect) -> Result<(), Broken> {
        let pipeline::Effect::Run(effect) = effect else {
            return Ok(());
        };
        match effect {
            run::Effect::ProvisionStage { provision, .. } => {
                let s = provision.stage;
                // RW4: one at a time, in order, each after the one before
                // it has its weights.
                let next = self.provisioned.len() as u32;
                if s != next || (s > 0 && !self.weights_ready.contains(&(s - 1))) {
                    let what = format!(
                        "stage {s} provisioned after {:?}, weights ready {:?}",
                        self.provisioned, self.weights_ready
                    );
                    return Err(("RW4", what));
                }
                self.provisioned.push(s);
            }
            run::Effect::OpenPromptService { .. } => {
                // RW6: prompt RPC opens only once every stage has its
                // weights, every stage is ready and both endpoints are open.
                let all = self.stages as usize;
                if self.weights_ready.len() != all
                    || self.stage_ready.len() != all
                    || self.endpoints.len() != 2
                {
                    let what = format!(
                        "prompt service opened with weights {:?}, ready {:?}, endpoints {:?}",
                        self.weights_ready, self.stage_ready, self.endpoints
                    );
                    return Err(("RW6", what));
                }
            }
            run::Effect::Prompt { request, event } => return self.prompt(*request, event),
            run::Effect::Repairing { .. } => {
                // The pipeline is built again: RW4 and RW6 judge the
                // rebuild from its start.
                self.provisioned.clear();
                self.weights_ready.clear();
                self.stage_ready.clear();
                self.endpoints.clear();
            }
            run::Effect::Finished(outcome) => {
                self.finished.push(outcome.clone());
                if self.finished.len() > 1 {
                    return Err(("RW7", "the run finished twice".to_owned()));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn prompt(&mut self, request: RequestId, event: &PromptEvent) -> Result<(), Broken> {
        let Some(r) = self.requests.get_mut(&request) else {
            return Err(("RW1", format!("{request} was never submitted: {event:?}")));
        };
        if r.lost {
            let what = format!("{request} was lost with the crashed orchestrator, then {event:?}");
            return Err(("RW1", what));
        }
        // RW1: one terminal event, nothing after it.
        if let Some(terminal) = &r.terminal {
            let what = format!("{request} ended with {terminal:?}, then {event:?}");
            return Err(("RW1", what));
        }
        match event {
            PromptEvent::Token { seq, token } => {
                // RW2: deltas in order, no duplicate, no gap.
                if *seq != r.records.len() as u64 {
                    let what = format!("{request}: token seq {seq} after {}", r.records.len());
                    return Err(("RW2", what));
                }
                r.records.push(*token);
                if r.disconnect_after == Some(r.records.len() as u64) {
                    self.injected
                        .insert(conformance::run::RunFault::ClientDisconnects.name());
                }
            }
            PromptEvent::Done { tokens, reason } => {
                // RW3: the text is the model's, token for token.
                let (expected, n, why) =
                    model::reference(&r.prompt, self.layers, r.max_tokens, self.context);
                if r.records != expected || *tokens != n || *reason != why {
                    let what = format!(
                        "{request} ended Done {tokens} {reason:?} with {:?}; the model says \
                         {n} {why:?} with {expected:?}",
                        r.records
                    );
                    return Err(("RW3", what));
                }
                r.terminal = Some(event.clone());
            }
            PromptEvent::Fault(_) => r.terminal = Some(event.clone()),
        }
        Ok(())
    }

    /// An effect of node `s`'s agent, judged before it is carried out.
    pub fn agent_effect(&mut self, life: Life, effect: &agent::Effect) -> Result<(), Broken> {
        let s = life.0;
        if let agent::Effect::Stage {
            stage,
            effect: stage::Effect::ExecuteStep { seq },
        } = effect
        {
            // RW5: a stage controller executes its steps in sequence, each
            // once (a repair's rebuilt controller counts from 0 again).
            let next = self.executed.entry((life, *stage)).or_insert(0);
            if *seq != *next {
                let what = format!("node {s} stage {stage} executes step {seq}, {next} was due");
                return Err(("RW5", what));
            }
            *next += 1;
        }
        Ok(())
    }

    /// At the end: every request answered (RW1), every stage stopped or
    /// dead (RW7), and a run without a fatal fault served and stopped
    /// (RW10).
    pub fn check_end<'a>(
        &self,
        live_agents: impl IntoIterator<Item = &'a agent::Machine>,
        host: &pipeline::Machine,
    ) -> Result<(), Broken> {
        for (request, r) in &self.requests {
            if r.terminal.is_none() && !r.lost {
                return Err(("RW1", format!("{request} never got a terminal event")));
            }
        }
        let Some(outcome) = host.run().and_then(|r| r.outcome()) else {
            return Err(("RW7", "the run has not ended".to_owned()));
        };
        if self.finished.len() != 1 {
            return Err(("RW7", "the run ended without Finished".to_owned()));
        }
        for agent in live_agents {
            for (stage, controller) in agent.stages() {
                if !controller.is_stopped() {
                    let what = format!(
                        "the run ended {outcome:?}; stage {stage} on a live node is {:?}",
                        controller.phase()
                    );
                    return Err(("RW7", what));
                }
            }
        }
        if !self.fatal {
            if let Err(error) = outcome {
                return Err((
                    "RW10",
                    format!("no fatal fault, yet the run failed: {error:?}"),
                ));
            }
            let late =
                self.injected.contains("token-late") || self.injected.contains("token-reordered");
            for (request, r) in self.requests.iter().filter(|(_, r)| !r.lost) {
                let ok = match &r.terminal {
                    Some(PromptEvent::Done { .. }) => true,
                    Some(PromptEvent::Fault(PromptFault::Timeout)) => late,
                    _ => false,
                };
                if !ok {
                    let what = format!("no fatal fault, yet {request} ended {:?}", r.terminal);
                    return Err(("RW10", what));
                }
            }
            if self.requests.is_empty() {
                return Err(("RW10", "no fatal fault, yet nothing was served".to_owned()));
            }
        }
        Ok(())
    }

    /// Coverage labels of how the run and its requests ended.
    pub fn end_labels(&self, host: &pipeline::Machine) -> Vec<String> {
        let mut out = Vec::new();
        let head = |text: String| {
            let end = text
                .find(|c: char| !c.is_alphanumeric())
                .unwrap_or(text.len());
            text[..end].to_owned()
        };
        match host.run().and_then(|r| r.outcome()) {
            Some(Ok(())) => out.push("outcome:Stopped".to_owned()),
            Some(Err(e)) => out.push(format!("outcome:{}", head(format!("{e:?}")))),
            None => {}
        }
        for r in self.requests.values() {
            let label = match &r.terminal {
                Some(PromptEvent::Done { reason, .. }) => format!("request:Done/{reason:?}"),
                Some(PromptEvent::Fault(f)) => format!("request:{}", head(format!("{f:?}"))),
                _ => "request:open".to_owned(),
            };
            out.push(label);
        }
        out
    }
}
