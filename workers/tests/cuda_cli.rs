//! `--backend cuda` through the real binary: where no NVIDIA driver can be
//! loaded (every machine CI runs on), each subcommand that takes it exits
//! 1 with an error naming the missing library, and never panics.

mod common;

use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
        .args(args)
        .output()
        .expect("run drover-worker");
    let code = out.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn cuda_without_a_driver_is_a_clear_error_in_every_subcommand() {
    let model = common::stories().display().to_string();
    let runs = [
        vec![
            "generate",
            "--model",
            &model,
            "--prompt",
            "x",
            "--backend",
            "cuda",
        ],
        vec![
            "bench",
            "--model",
            &model,
            "--prefill",
            "4",
            "--decode",
            "1",
            "--backend",
            "cuda",
        ],
        vec![
            "stage",
            "--model",
            &model,
            "--layers",
            "0..5",
            "--backend",
            "cuda",
        ],
    ];
    let driver = workers::cuda::Libraries::find().driver;
    for args in runs {
        let (code, e) = run(&args);
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        if driver {
            // A machine with a driver: the run may succeed; any failure
            // must still be an error, not a panic (checked above).
            continue;
        }
        assert_eq!(code, 1, "{args:?}: {e}");
        assert!(
            e.contains(
                "--backend cuda: the CUDA driver library (libcuda.so.1) could not be loaded"
            ),
            "{args:?}: {e}"
        );
        assert!(e.contains("use --backend cpu"), "{args:?}: {e}");
    }
}

#[test]
fn an_unknown_backend_is_named() {
    let model = common::stories().display().to_string();
    let (code, e) = run(&[
        "generate",
        "--model",
        &model,
        "--prompt",
        "x",
        "--backend",
        "tpu",
    ]);
    assert_eq!(code, 1, "{e}");
    assert!(e.contains("--backend tpu: unknown (cpu, cuda)"), "{e}");
}
