//! `drover-worker generate` as a user runs it.

mod common;

use std::process::Command;
use workers::gguf::file::ModelFile;
use workers::tokenizer::Tokenizer;

/// Runs drover-worker on stories260K (`args` then `--model` and `extra`),
/// `DROVER_KERNELS` set when given; its JSON line and its stderr.
fn worker_json(
    kernels: Option<&str>,
    args: &[&str],
    extra: &[&str],
) -> (serde_json::Value, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_drover-worker"));
    if let Some(kernels) = kernels {
        command.env("DROVER_KERNELS", kernels);
    }
    let out = command
        .args(args)
        .arg("--model")
        .arg(common::stories())
        .args(extra)
        .output()
        .expect("run drover-worker");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{kernels:?} {args:?}: {stderr}");
    let json = serde_json::from_slice(&out.stdout).expect("one JSON object");
    (json, stderr)
}

fn generate(extra: &[&str]) -> serde_json::Value {
    let args = [
        "generate",
        "--json",
        "--threads",
        "1",
        "--prompt",
        "Once upon a time",
    ];
    worker_json(None, &args, extra).0
}

/// llama.cpp's prompt tokens and greedy tokens of "Once upon a time" on
/// stories260K, from its golden.
fn golden_once_upon_a_time() -> (Vec<u64>, Vec<u64>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/stories260k.json");
    let text = std::fs::read_to_string(path).expect("the stories260k golden");
    let golden: serde_json::Value = serde_json::from_str(&text).expect("golden JSON");
    let prompt = golden["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["text"] == "Once upon a time")
        .expect("the golden's \"Once upon a time\"");
    let ids = |v: &serde_json::Value| -> Vec<u64> {
        let ids = v.as_array().expect("ids").iter();
        ids.map(|t| t.as_u64().expect("id")).collect()
    };
    (ids(&prompt["tokens"]), ids(&prompt["greedy"]))
}

#[test]
fn the_text_is_the_same_whatever_the_stage_split() {
    let one = generate(&["--max-tokens", "64"]);
    // llama.cpp's tokens, and their text as stories260K's vocabulary spells it.
    let (prompt, greedy) = golden_once_upon_a_time();
    assert_eq!(one["prompt_tokens"], serde_json::json!(prompt));
    assert_eq!(one["tokens"], serde_json::json!(greedy[..64]));
    assert_eq!(one["reason"], "max_tokens");
    let file = ModelFile::open(&common::stories()).expect("stories");
    let tokenizer = Tokenizer::from_gguf(file.header()).expect("its tokenizer");
    let ids: Vec<u32> = greedy[..64].iter().map(|&t| t as u32).collect();
    assert_eq!(one["text"], tokenizer.decode(&ids, false));
    for split in ["2,2,1", "1,3,1", "1,1,1,1,1", "4,1"] {
        assert_eq!(
            generate(&["--max-tokens", "64", "--split", split])["text"],
            one["text"],
            "split {split}"
        );
    }
}

#[test]
fn logits_out_holds_the_row_each_token_was_sampled_from() {
    let path = std::env::temp_dir().join(format!("drover-logits-{}.f32", std::process::id()));
    let path_text = path.to_str().expect("a UTF-8 temp path");
    let out = generate(&["--max-tokens", "12", "--logits-out", path_text]);
    let bytes = std::fs::read(&path).expect("the logits file");
    std::fs::remove_file(&path).ok();
    let tokens = out["tokens"].as_array().expect("tokens");
    assert_eq!(tokens.len(), 12);
    let vocab = 512; // stories260K's
    assert_eq!(bytes.len(), tokens.len() * vocab * 4, "one row per token");
    for (step, (row, token)) in bytes.chunks(vocab * 4).zip(tokens).enumerate() {
        let logits: Vec<f32> = row
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // Greedy: the token is the row's first largest logit.
        let best = logits
            .iter()
            .enumerate()
            .fold(0, |best, (i, &x)| if x > logits[best] { i } else { best });
        assert_eq!(Some(best as u64), token.as_u64(), "step {step}");
    }
}

#[test]
fn a_seed_fixes_a_sampled_completion() {
    let sampled = |seed: &str| {
        generate(&[
            "--max-tokens",
            "24",
            "--temperature",
            "0.9",
            "--top-k",
            "40",
            "--seed",
            seed,
        ])
    };
    let (a, b, c) = (sampled("5"), sampled("5"), sampled("6"));
    assert_eq!(a["tokens"], b["tokens"]);
    assert_ne!(a["tokens"], c["tokens"]);
}

#[test]
fn bad_arguments_are_named() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
            .args(args)
            .output()
            .expect("run");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let model = common::stories().display().to_string();
    let generate = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", &model, "--prompt", "x"];
        args.extend_from_slice(extra);
        run(&args)
    };
    // Where a CUDA driver loads, `--backend cuda` may run (as in
    // `tests/cuda_cli.rs`); elsewhere it is an error naming the flag.
    if workers::cuda::Libraries::find().driver {
        println!("--backend cuda not checked: this machine has a CUDA driver, so it may run");
    } else {
        let e = generate(&["--backend", "cuda"]);
        assert!(
            e.contains(
                "--backend cuda: the CUDA driver library (libcuda.so.1) could not be loaded"
            ),
            "{e}"
        );
    }
    let e = generate(&["--split", "2,2"]);
    assert!(e.contains("does not cover blocks 0..5"), "{e}");
    let e = run(&["generate", "--model", "/nonexistent.gguf", "--prompt", "x"]);
    assert!(e.contains("/nonexistent.gguf"), "{e}");
    let e = generate(&["--logits-out", "/nonexistent-dir/logits.f32"]);
    assert!(
        e.contains("--logits-out /nonexistent-dir/logits.f32"),
        "{e}"
    );
    let e = run(&["make-model", "--type", "iq2_xs", "/tmp/x.gguf"]);
    assert!(e.contains("--type iq2_xs"), "{e}");
    let e = run(&["make-model", "--type", "q8_1", "/tmp/x.gguf"]);
    assert!(e.contains("--type q8_1"), "{e}");
    let e = run(&["make-model", "--shape", "heads=3", "/tmp/x.gguf"]);
    assert!(
        e.contains("--shape: dim=64 does not divide into heads=3"),
        "{e}"
    );
    // Sampling flags outside what a plan's `[sampling]` takes.
    for (flag, value) in [
        ("--temperature", "nan"),
        ("--temperature", "-1"),
        ("--temperature", "101"),
        ("--top-p", "1.5"),
    ] {
        let e = generate(&[&format!("{flag}={value}")]);
        assert!(
            e.contains(&format!("invalid value '{value}' for '{flag}")),
            "{e}"
        );
        assert!(e.contains("not a number from 0 to"), "{e}");
    }
}

#[test]
fn a_reader_that_closed_stdout_ends_a_command_quietly() {
    // `drover-worker ... | head` where `head` has already gone: stdout is a
    // pipe without a reader, so the first write fails. Each command stops
    // without a panic or an error, and exits 0.
    let model = common::stories().display().to_string();
    for args in [
        &[
            "generate",
            "--model",
            &model,
            "--prompt",
            "Once upon a time",
        ][..],
        &["generate", "--json", "--model", &model, "--prompt", "Once"][..],
        &["inspect", &model][..],
        &["inspect", "--json", &model][..],
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
            .args(args)
            .stdout(writer)
            .output()
            .expect("run drover-worker");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn a_reader_that_closed_stderr_changes_nothing() {
    // `drover-worker make-model ... 2>&1 | head -1`: the progress lines on
    // stderr have no reader. The model is written all the same and the
    // command exits 0 (it used to abort at its first line); a failure
    // still exits 1.
    let dir = std::env::temp_dir().join(format!("drover-closed-stderr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join("tiny.gguf");
    for (shape, code) in [
        ("dim=64,layers=1,heads=4,kv_heads=2,ff=96,vocab=300", 0),
        ("dim=64,heads=3", 1),
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let status = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
            .args([
                "make-model",
                "--shape",
                shape,
                "--type",
                "f32",
                "--seed",
                "1",
            ])
            .arg(&out_path)
            .stderr(writer)
            .status()
            .expect("run drover-worker");
        assert_eq!(status.code(), Some(code), "{shape}: {status}");
    }
    let model = std::fs::read(&out_path).expect("the model was written");
    assert_eq!(&model[..4], b"GGUF");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `DROVER_KERNELS` picks the kernel set `bench` reports and computes
/// with: `avx2` is the AVX2 set without AVX-512 tiles where the processor
/// has AVX2 (the fallback elsewhere); another value is named on stderr and
/// the detected set used. Every set gives stories260K the same tokens.
#[test]
fn drover_kernels_picks_the_kernel_set() {
    let run = |kernels: &str| {
        let args = [
            "bench",
            "--json",
            "--threads",
            "1",
            "--prefill",
            "8",
            "--decode",
            "4",
        ];
        let (json, stderr) = worker_json(Some(kernels), &args, &[]);
        (
            json["kernels"].as_str().expect("kernels").to_owned(),
            stderr,
        )
    };
    let (portable, _) = run("portable");
    assert_eq!(portable, "portable");
    let (avx2, _) = run("avx2");
    let has_avx2 = cfg!(target_arch = "x86_64")
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c");
    if has_avx2 {
        // With AVX-VNNI's q8_0 tile where the processor has it.
        let set = if std::is_x86_feature_detected!("avxvnni") {
            "avx2+avx-vnni"
        } else {
            "avx2"
        };
        let tuned = [
            set.to_owned(),
            format!("{set}, amd"),
            format!("{set}, zen 5"),
        ];
        assert!(tuned.contains(&avx2.to_owned()), "{avx2}");
    } else {
        assert_eq!(avx2, "portable");
    }
    let (detected, warning) = run("avx9000");
    assert!(
        warning.contains("DROVER_KERNELS=\"avx9000\" is neither"),
        "{warning}"
    );
    assert_eq!(
        detected,
        run("").0,
        "an unknown value falls back to detection"
    );
    let tokens = |kernels: &str| {
        let args = [
            "generate",
            "--json",
            "--max-tokens",
            "32",
            "--prompt",
            "Once upon a time",
        ];
        worker_json(Some(kernels), &args, &[]).0["tokens"].clone()
    };
    assert_eq!(tokens("avx2"), tokens("portable"));
}
