//! `[pipeline] backend = "cuda"` reaches every stage's worker. On a machine
//! that cannot run CUDA (CI's: no GPU, no driver) the first stage's load
//! fails naming what is missing, the run ends with exit code 1 and nothing
//! is left; where the machine can, the pipeline serves. Real processes,
//! real SSH, real iroh; every wait is on an event with a bound.

mod up_support;

use std::time::Duration;
use up_support::*;

const SERVE: Duration = Duration::from_secs(120);
const EXIT: Duration = Duration::from_secs(90);

#[test]
fn a_cuda_pipeline_loads_on_the_gpu_or_fails_naming_what_is_missing() {
    let dir = scratch("pipe-cuda");
    let state = dir.join("state");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, pipeline_plan_text(2, "true", "backend = \"cuda\"")).unwrap();
    let mut up = Up::start(&state, &plan);
    up.wait_line(SERVE, |l| l["event"] == "stage" && l["state"] == "loading");
    let pids = node_pids(&state);
    match workers::cuda::probe() {
        Err(missing) => {
            let failed = up.wait_line(SERVE, |l| l["event"] == "pipeline_failed");
            let error = failed["error"].as_str().unwrap();
            assert!(
                error.starts_with("stage 0 failed to load its weights")
                    && error.contains("libcuda.so.1"),
                "{error}"
            );
            assert!(missing.contains("libcuda.so.1"), "{missing}");
            assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));
            assert!(
                !up.seen.iter().any(|l| l.contains("\"serving\"")),
                "never served"
            );
        }
        Ok(_) => {
            up.wait_line(SERVE, |l| l["event"] == "serving");
            let out = drover(&state, &["prompt", "Once upon a time", "--max-tokens", "8"]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            up.type_stop();
            assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
        }
    }
    assert_eq!(running(&pids), Vec::<u32>::new(), "node processes left");
    assert_all_destroyed(&status(&state), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
