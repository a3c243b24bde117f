//! drover-worker against llama.cpp: the goldens in `tests/golden/` hold
//! llama.cpp's tokens, logits and greedy continuations on stories260K and on
//! fixtures this test makes again from their seeds (`cargo xtask reference`
//! rewrites them).

mod common;

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use workers::engine::Chain;
use workers::fixture::GOLDEN_FIXTURES;
use workers::gguf::file::ModelFile;
use workers::model::Logits;
use workers::sample::greedy;
use workers::tokenizer::{Tokenizer, Vocab};

fn goldens() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("tests/golden")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("golden");
            let name = p.file_stem().expect("stem").to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).expect("golden JSON"))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("model");
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The model a golden was made on: stories260K, or its fixture made again.
fn model_for(name: &str, golden: &Value, dir: &Path) -> PathBuf {
    let path = if name == "stories260k" {
        common::stories()
    } else {
        let f = GOLDEN_FIXTURES
            .iter()
            .find(|f| f.name == name)
            .expect("a fixture for every golden");
        let vocab = ModelFile::open(&common::stories()).expect("stories");
        let path = dir.join(format!("{name}.gguf"));
        f.write(vocab.header(), &path).expect("fixture");
        path
    };
    assert_eq!(
        sha256(&path),
        golden["sha256"].as_str().expect("sha256"),
        "{name}: the model differs from the one the golden was made on; run `cargo xtask reference`"
    );
    path
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|t| t.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn logits_and_greedy_tokens_match_llama_cpp() {
    let dir = common::scratch("golden");
    let all = goldens();
    assert!(all.len() >= 7, "stories260k and every fixture have goldens");
    for (name, golden) in &all {
        let path = model_for(name, golden, &dir);
        let tolerance = if name.ends_with("f32") || name == "stories260k" {
            1e-4
        } else {
            1e-3
        };
        let mut chain = Chain::open(&path, &[], 512).expect("open");
        let header = ModelFile::open(&path).expect("model").header().clone();
        let tokenizer =
            Tokenizer::new(Vocab::from_gguf(&header).expect("vocab")).expect("tokenizer");
        let vocab = chain.first().config().vocab;
        for prompt in golden["prompts"].as_array().expect("prompts") {
            let tokens = ids(&prompt["tokens"]);
            let text = prompt["text"].as_str().expect("text");
            assert_eq!(
                tokenizer.encode(text, true),
                tokens,
                "{name} {text:?}: tokenization"
            );
            chain.truncate(0);
            let logits = chain.forward(&tokens, Logits::All).expect("prefill");
            let mut worst = 0f32;
            for (pos, want) in prompt["logits"].as_object().expect("logits") {
                let p: usize = pos.parse().expect("position");
                let got = &logits[p * vocab..(p + 1) * vocab];
                for (g, w) in got.iter().zip(want.as_array().expect("row")) {
                    worst = worst.max((g - w.as_f64().expect("logit") as f32).abs());
                }
            }
            assert!(
                worst <= tolerance,
                "{name} {:?}: logits differ by {worst}",
                prompt["text"]
            );
            let want = ids(&prompt["greedy"]);
            let mut got = vec![greedy(&logits[(tokens.len() - 1) * vocab..])];
            while got.len() < want.len() {
                let l = chain
                    .forward(&[*got.last().expect("token")], Logits::Last)
                    .expect("decode");
                got.push(greedy(&l));
            }
            assert_eq!(got, want, "{name} {:?}: greedy tokens", prompt["text"]);
        }
    }
}
