//! Shared by the run transcripts and the run properties: a three-stage run,
//! input builders and a readable transcript.

#![allow(dead_code)]

use core_fsm::Machine as _;
use core_fsm::ids::{AgentId, LogicalNodeId, OpId, RunId};
use core_fsm::membership::Liveness;
use core_fsm::run::{Config, Effect, Input, Machine, RequestId, TokenEndpoint, exit_code};
use core_fsm::stage::{Fault, Report};
use core_fsm::time::{Duration, Instant};
use std::fmt::Write as _;

pub const RUN: RunId = RunId(7);

pub fn node(i: u32) -> LogicalNodeId {
    LogicalNodeId::new(format!("workers-{i}"))
}

pub fn agent(i: u32) -> AgentId {
    AgentId::new(format!("agent-{i}"))
}

pub fn config() -> Config {
    Config {
        run_id: RUN,
        orchestrator: AgentId::from("orch"),
        model_id: "tiny-llama".into(),
        layers: 10,
        stages: 3,
        nodes: (0..3).map(node).collect(),
        split: Vec::new(),
        readiness_timeout: Duration::from_secs(60),
        ack_retry_interval: Duration::from_secs(1),
        ack_attempts_max: 3,
        ack_timeout: Duration::from_secs(5),
        weights_timeout: Duration::from_secs(30),
        stage_ready_timeout: Duration::from_secs(10),
        prompt_open_timeout: Duration::from_secs(5),
        token_timeout: Duration::from_secs(2),
        prefill_per_token: Duration::from_millis(0),
        queue_max: 2,
        context: 0,
        stop_timeout: Duration::from_secs(10),
        repairs_max: 0,
        repair_timeout: Duration::from_secs(30),
    }
}

pub fn alive(i: u32) -> Input {
    liveness(i, Liveness::Alive)
}

pub fn liveness(i: u32, liveness: Liveness) -> Input {
    Input::Liveness {
        node: node(i),
        agent: agent(i),
        liveness,
    }
}

pub fn ready(i: u32) -> Input {
    Input::RuntimeReady {
        run_id: RUN,
        node: node(i),
        stage: i,
        agent: agent(i),
        readiness_id: 100 + u64::from(i),
    }
}

pub fn acked(i: u32) -> Input {
    acked_report(i, 100 + u64::from(i))
}

/// Node `i`'s agent acknowledges its report `readiness_id`.
pub fn acked_report(i: u32, readiness_id: u64) -> Input {
    Input::ReadyAcked {
        run_id: RUN,
        node: node(i),
        stage: i,
        agent: agent(i),
        readiness_id,
    }
}

pub fn weights(i: u32) -> Input {
    Input::Stage(Report::WeightsReady {
        run_id: RUN,
        node: node(i),
        stage: i,
    })
}

pub fn stage_ready(i: u32) -> Input {
    Input::Stage(Report::StageReady {
        run_id: RUN,
        node: node(i),
        stage: i,
    })
}

pub fn stage_fault(i: u32, reason: &str) -> Input {
    Input::Stage(Report::StageFault {
        run_id: Some(RUN),
        node: node(i),
        stage: Some(i),
        fault: Fault::WorkerCrashed {
            reason: reason.into(),
        },
    })
}

pub fn stopped(i: u32) -> Input {
    Input::Stage(Report::StageStopped {
        run_id: RUN,
        node: node(i),
        stage: Some(i),
        clean: true,
    })
}

pub fn endpoint(endpoint: TokenEndpoint) -> Input {
    Input::TokenEndpointReady {
        run_id: RUN,
        endpoint,
    }
}

pub fn closed() -> Input {
    Input::TokenEndpointsClosed { run_id: RUN }
}

pub fn submit(request: u64, max_tokens: u32) -> Input {
    Input::Submit {
        request: RequestId(request),
        prompt: vec![1, 2, 3],
        max_tokens,
    }
}

pub fn token(request: u64, seq: u64, eos: bool) -> Input {
    Input::Token {
        run_id: RUN,
        request: RequestId(request),
        seq,
        token: 500 + seq as u32,
        eos,
    }
}

pub fn opened() -> Input {
    Input::PromptServiceOpened {
        op: OpId(1),
        result: Ok(()),
    }
}

/// Inputs that take a fresh run from nothing to serving, starting at `t`.
pub fn to_serving(t: u64) -> Vec<(u64, Input)> {
    let mut s = Vec::new();
    for i in 0..3 {
        s.push((t, alive(i)));
    }
    for i in 0..3 {
        s.push((t + 1, ready(i)));
    }
    for i in 0..3 {
        s.push((t + 10, acked(i)));
    }
    for i in 0..3 {
        s.push((t + 20 + u64::from(i), weights(i)));
    }
    s.push((t + 30, endpoint(TokenEndpoint::In)));
    s.push((t + 30, endpoint(TokenEndpoint::Out)));
    for i in 0..3 {
        s.push((t + 31, stage_ready(i)));
    }
    s.push((t + 40, opened()));
    s
}

/// `Debug` text without the id wrappers, so transcripts read easily.
pub fn tidy(text: String) -> String {
    let mut s = text;
    for wrapper in ["LogicalNodeId(", "AgentId("] {
        while let Some(at) = s.find(wrapper) {
            let inner = at + wrapper.len();
            let close = inner + s[inner..].find(')').expect("closing parenthesis");
            let value = s[inner..close].trim_matches('"').to_owned();
            s.replace_range(at..=close, &value);
        }
    }
    s.replace("RunId(7)", "run-7")
}

pub fn effect(e: &Effect) -> String {
    match e {
        Effect::SendReadyAck {
            node,
            stage,
            readiness_id,
            ..
        } => format!("ack {node} stage={stage} readiness={readiness_id}"),
        Effect::ProvisionStage {
            node, provision, ..
        } => format!(
            "provision stage={} node={node} layers={} in={:?} out={:?}",
            provision.stage, provision.layers, provision.inbound, provision.outbound
        ),
        Effect::Inject {
            request,
            seq,
            pos,
            tokens,
        } => format!("inject {request} seq={seq} pos={pos} tokens={tokens:?}"),
        Effect::Prompt { request, event } => format!("prompt {request} {event:?}"),
        Effect::StopStage { node, stage } => format!("stop stage={stage} node={node}"),
        Effect::Finished(outcome) => {
            format!(
                "finished exit={} {outcome:?}",
                exit_code(outcome.as_ref().map(|_| ()))
            )
        }
        other => tidy(format!("{other:?}")),
    }
}

/// Drives `m` through `script`, checking invariants after every step.
pub fn drive(m: &mut Machine, script: Vec<(u64, Input)>) -> String {
    let mut text = String::new();
    for (t, input) in script {
        let shown = tidy(format!("{input:?}"));
        let effects = m.handle(Instant(t), input);
        m.check_invariants();
        writeln!(text, "t={t:<6} {shown}").unwrap();
        writeln!(text, "         phase: {}", tidy(format!("{:?}", m.phase()))).unwrap();
        for e in &effects {
            writeln!(text, "         => {}", effect(e)).unwrap();
        }
    }
    writeln!(text, "ignored: {:?}", m.ignored()).unwrap();
    text
}

/// A fresh run driven through `script`.
pub fn transcript(script: Vec<(u64, Input)>) -> String {
    let mut m = Machine::new(config(), Instant(0)).expect("plannable");
    drive(&mut m, script)
}

/// A run brought to serving silently (its startup has its own transcript),
/// then driven through `script`.
pub fn serving_transcript(script: Vec<(u64, Input)>) -> String {
    let mut m = Machine::new(config(), Instant(0)).expect("plannable");
    drive(&mut m, to_serving(0));
    assert!(matches!(m.phase(), core_fsm::run::Phase::Serving(_)));
    let text = drive(&mut m, script);
    format!("(startup as in happy_path_from_barrier_to_stopped)\n{text}")
}
