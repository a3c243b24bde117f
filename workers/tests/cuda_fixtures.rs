//! The fixtures `workers/gpu-check.sh` makes beyond the `small` shape (a
//! tied head, a rope over part of each head, heads of their own size) are
//! made and run on the CPU, so the GPU check's failures are the GPU's.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
        .args(args)
        .output()
        .expect("run drover-worker");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
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
        let (ok, text) = run(&[
            "make-model",
            "--shape",
            shape,
            "--type",
            ty,
            "--seed",
            "7",
            path,
        ]);
        assert!(ok, "{shape} {ty}: {text}");
        let (ok, text) = run(&[
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
        assert!(ok && text.contains("\"tokens\":["), "{shape} {ty}: {text}");
    }
    for bad in ["small,rope_dims=3", "small,rope_dims=40"] {
        let path = dir.join("bad.gguf");
        let (ok, text) = run(&[
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
