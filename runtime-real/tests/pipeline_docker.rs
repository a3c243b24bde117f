//! The pipeline on the real Docker engine: two containers of drover's own
//! image, each running one stage; the slices travel over iroh from the
//! orchestrator on the bridge's gateway, the activations from container to
//! container. The text equals `drover-worker generate` on the whole model.

mod docker_support;
mod up_support;

use docker_support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use up_support::*;

const SERVE: Duration = Duration::from_secs(240);
const EXIT: Duration = Duration::from_secs(120);

#[test]
fn two_containers_serve_the_model_as_one_process_does_and_stop_removes_them() {
    let dir = scratch("docker-pipeline");
    let state = dir.join("state");
    let _guard = Guard {
        label: state_label(&state),
    };
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models/stories260k.gguf");
    let model = std::fs::canonicalize(model).expect("../shared/models/stories260k.gguf");
    let sections = format!(
        "[model]\npath = \"{}\"\n\n[pipeline]\ngroup = \"workers\"\n\n[prompt]\nrpc_addr = \"127.0.0.1:0\"\n\n",
        model.display()
    );
    let plan_text = docker_plan(2, "", AGENT_START).replacen(
        "\n[[group]]",
        &format!("\n{sections}[[group]]"),
        1,
    );
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, plan_text).unwrap();
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, |l| l["event"] == "serving");
    assert_eq!(containers_of(&state).len(), 2);
    let out = drover(
        &state,
        &["prompt", "Once upon a time", "--max-tokens", "48"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let worker = Path::new(DROVER).with_file_name("drover-worker");
    let reference = Command::new(worker)
        .args(["generate", "--model"])
        .arg(&model)
        .args(["--prompt", "Once upon a time", "--max-tokens", "48"])
        .output()
        .unwrap();
    assert!(reference.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&reference.stdout)
    );
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    assert_eq!(containers_of(&state), Vec::<(String, String)>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}
