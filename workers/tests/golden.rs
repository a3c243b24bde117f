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
use workers::kernels::Kernels;
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

/// How close a model must come to llama.cpp.
struct Bound {
    /// Largest difference of any logit at any checked position.
    max: f32,
    /// Largest mean difference of a position's logits.
    mean: f32,
    /// Greedy tokens must agree while llama.cpp's two best logits are
    /// further apart than this (0: all 128 tokens must agree).
    flip_margin: f32,
}

/// f32 models match to float rounding. The quantized models re-encode
/// every activation into integers (f16 into f16) before each product, so a
/// last-bit difference in a float sum can move a value across a rounding
/// edge and shift later logits by up to ~0.2; such a drift can only
/// reorder tokens whose logits were close. llama.cpp's kernels sum in an
/// order of the processor's instruction set: its own logits on the same
/// file moved by up to 0.094 (q4_0) and 0.0062 (f16) between the goldens
/// made on an AVX2 machine and these, made on an AVX-512 one
/// (`system_info` in each golden); q8_0's did not move. drover-worker's
/// SIMD kernels sum in the AVX-512 build's order on every x86 processor
/// (attention's lanes of 16 and 64, its `expf`, rope's fused products), so
/// against these q4_0 (packed, as llama.cpp repacks it), q8_0 (as stored,
/// in llama.cpp's eight lanes), iq4_nl (packed, as llama.cpp repacks
/// it), q5_0, q4_1, q5_1 and f16 match bit for bit, and q4_K_M and
/// iq4_xs (packed; llama.cpp does not repack it) within 4e-6; q6_K (and
/// q3_K and q5_K where not packed) match llama.cpp's one-row dot
/// products bit for bit (q3_K_M's and q5_K_M's first prompt within
/// 5e-6, their q3_K and q5_K packed); q2_K (packed) within 6e-6 but a
/// rounding flip (below).
/// The portable kernels sum a q8_0, q5_0, q4_1, q5_1 or iq4_nl block
/// whole (as the GPU does) and f16 rows in another order, so there they
/// drift as a flip moves them. (q5_0 and q5_K_M were made on a Zen 4
/// without AVX-VNNI, the others on Xeons with it; VNNI changes no integer
/// sum.)
fn bound(name: &str, portable: bool) -> Bound {
    match name {
        n if n.ends_with("f32") || n == "stories260k" => Bound {
            max: 1e-4,
            mean: 1e-5,
            flip_margin: 0.0,
        },
        // iq4_xs goes through llama.cpp's tiles (below) too, but came
        // within 3e-6 of them, on the portable kernels too.
        n if n == "small-q4_0"
            || n == "small-q4_k_m"
            || n == "small-iq4_xs"
            || (n == "small-iq4_nl" && !portable)
            || (["small-q5_0", "small-q8_0", "small-q4_1", "small-q5_1"].contains(&n)
                && !portable) =>
        {
            Bound {
                max: 1e-3,
                mean: 1e-4,
                flip_margin: 0.1,
            }
        }
        // llama.cpp multiplies a batch of 8 or more tokens by q4_K, q5_K
        // and q6_K weights in tiles of its own ("tiled", not repacked
        // q4_K), whose float sums take another order than its one-row
        // dot products, which drover-worker's q6_K match (its q5_K is
        // packed: within 4e-6 of llama.cpp's); its own logits at
        // position 0 then differ by up to 5e-6 between a 5-token prompt
        // and a 22-token one. Here that moved an activation across a
        // rounding edge in the third prompt (11 tokens): 0.16 at its
        // last positions, and its greedy tokens part after 5. q3_K_M
        // likewise since its q3_K is packed (within 5e-6, but 0.15 at the
        // third prompt's last positions, on the portable kernels too).
        "small-q5_k_m" | "small-q3_k_m" => Bound {
            max: 0.2,
            mean: 0.05,
            flip_margin: 0.5,
        },
        // llama.cpp repacks q2_K on a processor with AVX-512 (groups of
        // eight rows, `q2_K_8x8`, for one token and a batch alike) and
        // sums those in an order of its own; drover-worker packs q2_K
        // too, in its packed float order (as the portable kernels, a
        // block whole). The logits come within 6e-6 of llama.cpp's but
        // where an activation crosses a rounding edge (the second
        // prompt's last positions: 0.35, on every kernel set), and there
        // the second greedy token, a near-tie in llama.cpp's own logits
        // (its two best 0.163 apart), differs: only the first token of
        // each prompt is compared (the first prompt's first is itself a
        // near-tie, 0.317, and agrees).
        "small-q2_k" => Bound {
            max: 0.5,
            mean: 0.1,
            flip_margin: f32::INFINITY,
        },
        // Every greedy token too: one token's attention (64 lanes) is
        // only met by the decode steps, never by the logits' prefill.
        "small-f16" if !portable => Bound {
            max: 1e-3,
            mean: 1e-4,
            flip_margin: 0.0,
        },
        n if n.ends_with("f16") => Bound {
            max: 1e-2,
            mean: 2e-3,
            flip_margin: 0.0,
        },
        _ => Bound {
            max: 0.3,
            mean: 0.1,
            flip_margin: 0.5,
        },
    }
}

#[test]
fn tokens_logits_and_greedy_continuations_match_llama_cpp() {
    let dir = common::scratch("golden");
    let all = goldens();
    assert!(all.len() >= 8, "stories260k and every fixture have goldens");
    let mut exact_positions = 0;
    let mut positions = 0;
    for (name, golden) in &all {
        let path = model_for(name, golden, &dir);
        let bound = bound(name, Kernels::current().name == "portable");
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
            for (pos, want) in prompt["logits"].as_object().expect("logits") {
                let p: usize = pos.parse().expect("position");
                let got = &logits[p * vocab..(p + 1) * vocab];
                let want = want.as_array().expect("row");
                assert_eq!(want.len(), vocab, "{name} {text:?} position {p}: the row");
                let diffs: Vec<f32> = got
                    .iter()
                    .zip(want)
                    .map(|(g, w)| (g - w.as_f64().expect("logit") as f32).abs())
                    .collect();
                let max = diffs.iter().fold(0f32, |m, &d| m.max(d));
                let mean = diffs.iter().sum::<f32>() / vocab as f32;
                assert!(
                    max <= bound.max && mean <= bound.mean,
                    "{name} {text:?} position {p}: max {max}, mean {mean}"
                );
                positions += 1;
                exact_positions += usize::from(max <= 1e-4);
            }
            let want = ids(&prompt["greedy"]);
            let margins: Vec<f64> = prompt["margins"]
                .as_array()
                .expect("margins")
                .iter()
                .map(|m| m.as_f64().expect("margin"))
                .collect();
            assert!(!want.is_empty(), "{name} {text:?}: greedy tokens");
            assert_eq!(margins.len(), want.len(), "{name} {text:?}: margins");
            let mut got = vec![greedy(&logits[(tokens.len() - 1) * vocab..])];
            while got.len() < want.len() {
                let l = chain
                    .forward(&[*got.last().expect("token")], Logits::Last)
                    .expect("decode");
                got.push(greedy(&l));
            }
            // Compare up to the first near-tie of llama.cpp's own logits.
            let checked = margins
                .iter()
                .position(|&m| m < bound.flip_margin as f64)
                .map_or(want.len(), |i| i + 1);
            assert_eq!(
                got[..checked],
                want[..checked],
                "{name} {text:?}: greedy tokens"
            );
        }
    }
    // Most positions match to float rounding, quantized models included.
    assert!(
        exact_positions * 10 >= positions * 7,
        "{exact_positions} of {positions} positions within 1e-4"
    );
}
