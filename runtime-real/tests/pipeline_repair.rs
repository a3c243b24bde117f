//! A request that survives a stage's death: `drover up` serves the real
//! model on three local nodes with `bounded` replacement; while a 64-token
//! request streams, stage 1's node (its agent, its worker and its node
//! process) is killed with SIGKILL. Membership finds it Dead, the
//! reconciler replaces it, the run rebuilds the pipeline and resumes the
//! request from its next token: the client's text is the undisturbed
//! run's, with nothing repeated and nothing missing. Real processes, real
//! SSH, real iroh; every wait is on an event with a bound.

mod up_support;

use std::time::Duration;
use up_support::*;

const SERVE: Duration = Duration::from_secs(120);
const REPAIR: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(90);
const PROMPT: &str = "Once upon a time";

#[test]
fn a_stage_killed_mid_request_is_replaced_and_the_request_resumes_with_the_same_text() {
    let Victim {
        dir,
        state,
        mut up,
        lease: old_lease,
        pids: victims,
        ..
    } = serving_with_victim("pipe-repair", SERVE);

    // The client streams; at its first bytes, stage 1's node is killed.
    let client = streaming_prompt(&state, PROMPT, 64);
    kill_9(&victims);
    // The client waits through the repair: a node brought up again.
    let answer = client.finish(SERVE + REPAIR);
    let code = answer.status.code();
    let text = String::from_utf8(answer.stdout).unwrap();

    // The story in up's lines: a repair that carried the request, the
    // node Dead and replaced on a new lease, and the request resumed at a
    // token in the middle.
    let repairing = up.wait_line(REPAIR, |l| l["event"] == "repairing");
    assert_eq!(repairing["repair"], 1, "{repairing}");
    assert!(repairing["request"].is_u64(), "{repairing}");
    let repaired = up.wait_line(REPAIR, |l| l["event"] == "repaired");
    let next = repaired["next_token"].as_u64().expect("a resumed request");
    assert!((1..64).contains(&next), "{repaired}");
    assert_eq!(code, Some(0), "the client's exit; text {text:?}");
    assert_eq!(text, generated(PROMPT, 64), "the resumed text");

    let after = status(&state);
    let row = node(&after, "workers-1");
    assert_ne!(row["lease"].as_str().unwrap(), old_lease, "{after}");
    assert_eq!(row["ready"], true, "{after}");
    assert_eq!(row["liveness"], "Alive", "{after}");
    let pipeline: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("pipeline.json")).unwrap()).unwrap();
    assert_eq!(pipeline["serving"]["repairs"], 1, "{pipeline}");
    assert_eq!(pipeline["serving"]["repairing"], false, "{pipeline}");

    // The repaired pipeline serves the next request whole.
    assert_served(&state, PROMPT, 40);

    up.type_stop();
    let code = up.wait_exit(EXIT);
    // The replaced lease was destroyed once, at the replacement.
    let destroying = up
        .seen
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["stage"] == "Destroying" && v["lease"] == old_lease.as_str())
        .count();
    assert_eq!(destroying, 1, "{}", up.seen.join("\n"));
    // A node failed during the run: exit 1, as for any node failure.
    assert_eq!(code, 1, "{}", up.seen.join("\n"));
    assert_eq!(running(&victims), Vec::<u32>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_stage_s_worker_killed_mid_request_is_started_again_and_the_request_resumes() {
    let Victim {
        dir,
        state,
        mut up,
        lease,
        ..
    } = serving_with_victim("pipe-worker", SERVE);
    let worker = processes_named(&state, &lease, &["drover-worker"]);
    assert_eq!(worker.len(), 1, "workers-1's worker: {worker:?}");

    // At the client's first bytes, only stage 1's worker is killed: its
    // agent and node live on.
    let client = streaming_prompt(&state, PROMPT, 64);
    kill_9(&worker);
    // The client waits through the repair: its worker started again.
    let answer = client.finish(SERVE + REPAIR);
    let code = answer.status.code();
    let text = String::from_utf8(answer.stdout).unwrap();

    // The first word of the crash is the stage's: its step's pipe broke,
    // or the worker's exit.
    let repairing = up.wait_line(REPAIR, |l| l["event"] == "repairing");
    assert!(
        repairing["cause"].as_str().unwrap().contains("stage 1 "),
        "{repairing}"
    );
    let repaired = up.wait_line(REPAIR, |l| l["event"] == "repaired");
    let next = repaired["next_token"].as_u64().expect("a resumed request");
    assert!((1..64).contains(&next), "{repaired}");
    assert_eq!(code, Some(0), "the client's exit; text {text:?}");
    assert_eq!(text, generated(PROMPT, 64), "the resumed text");

    // The same node, the same lease, a new worker.
    let after = status(&state);
    let row = node(&after, "workers-1");
    assert_eq!(row["lease"].as_str().unwrap(), lease, "{after}");
    assert_eq!(row["ready"], true, "{after}");
    let now = processes_named(&state, &lease, &["drover-worker"]);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, worker, "a new worker process");
    assert_served(&state, PROMPT, 40);
    // The new worker serves on its agent's processor too.
    agents_share_a_processor_with_their_serving_threads(&state, 3);

    up.type_stop();
    let code = up.wait_exit(EXIT);
    // No node failed and nothing was replaced: a clean stop.
    let replaced = up
        .seen
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|v| {
            v["stage"] == "Destroying"
                && v["lease"] == lease.as_str()
                && v["replacement"].is_string()
        });
    assert!(!replaced, "{}", up.seen.join("\n"));
    assert_eq!(code, 0, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
