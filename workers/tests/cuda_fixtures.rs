//! The fixtures `workers/gpu-check.sh` makes beyond the `small` shape (a
//! tied head, a rope over part of each head, heads of their own size) are
//! made and run on the CPU, so the GPU check's failures are the GPU's.

use std::process::Command;

/// Runs drover-worker: whether it succeeded, its stdout and its stderr.
fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
        .args(args)
        .output()
        .expect("run drover-worker");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_gpu_checks_fixtures_are_made_and_generate_on_the_cpu() {
    let dir = std::env::temp_dir().join(format!("drover-cuda-fixtures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (shape, ty) in [
        ("small,tied=1", "q8_0"),
        ("small,tied=1", "q4_k_m"),
        ("small,rope_dims=16", "q8_0"),
        ("small,arch=qwen2,rope_dims=8", "q4_k"),
        ("small,heads=4,kv_heads=2,head_dim=48", "q8_0"),
    ] {
        let path = dir.join(format!("{}-{ty}.gguf", shape.replace([',', '='], "-")));
        let path = path.to_str().unwrap();
        let (ok, _, e) = run(&[
            "make-model",
            "--shape",
            shape,
            "--type",
            ty,
            "--seed",
            "7",
            path,
        ]);
        assert!(ok, "{shape} {ty}: {e}");
        let (ok, out, e) = run(&[
            "generate",
            "--model",
            path,
            "--prompt",
            "Once",
            "--max-tokens",
            "4",
            "--temperature",
            "0",
            "--json",
            "--backend",
            "cpu",
        ]);
        assert!(ok, "{shape} {ty}: {e}");
        let json: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|error| panic!("{shape} {ty}: {error}: {out}"));
        let tokens = json["tokens"].as_array().map(Vec::len);
        assert_eq!(tokens, Some(4), "{shape} {ty}: {json}");
        assert_eq!(json["reason"], "max_tokens", "{shape} {ty}: {json}");
    }
    for bad in ["small,rope_dims=3", "small,rope_dims=40"] {
        let path = dir.join("bad.gguf");
        let (ok, _, text) = run(&[
            "make-model",
            "--shape",
            bad,
            "--type",
            "f32",
            path.to_str().unwrap(),
        ]);
        let says = "must be even and from 2 to the head's size, 32";
        assert!(!ok && text.contains(says), "{bad}: {text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
