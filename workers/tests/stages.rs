//! A model split into stages computes exactly what one stage computes, and
//! each stage maps only its own slice of the file.

mod common;

use workers::engine::{Chain, balanced_split, split_from_sizes};
use workers::gguf::file::ModelFile;
use workers::model::weights::stage_tensor_names;
use workers::model::{Config, Logits, Stage};

const PROMPT: [u32; 9] = [1, 403, 407, 261, 378, 432, 383, 286, 261];

fn logits_of(split: &[std::ops::Range<usize>]) -> Vec<Vec<f32>> {
    let mut chain = Chain::open(&common::stories(), split, 64).expect("open");
    let mut all = vec![chain.forward(&PROMPT, Logits::All).expect("prefill")];
    for t in [300u32, 301, 302] {
        all.push(chain.forward(&[t], Logits::Last).expect("decode"));
    }
    all
}

#[test]
fn every_split_of_stories260k_gives_bit_identical_logits() {
    let one = logits_of(&balanced_split(5, 1));
    assert_eq!(one[0].len(), PROMPT.len() * 512);
    for split in [
        balanced_split(5, 2),
        balanced_split(5, 3),
        balanced_split(5, 5),
        split_from_sizes(&[1, 3, 1]),
        split_from_sizes(&[4, 1]),
    ] {
        let got = logits_of(&split);
        let lengths = |all: &[Vec<f32>]| all.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(lengths(&got), lengths(&one), "split {split:?}");
        let same = got
            .iter()
            .zip(&one)
            .all(|(a, b)| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(same, "split {split:?} differs from one stage");
    }
}

/// A model whose heads are not `dim / heads` wide (`attention.key_length`,
/// as in Mistral-NeMo): made with the size asked for, read back with it,
/// and split into stages with bit-identical logits. (llama.cpp's logits
/// for it are the `heads-f32` golden.)
#[test]
fn heads_of_their_own_size_are_made_read_and_split() {
    use workers::fixture::{Recipe, Shape, make_model};
    let shape = Shape::parse("small,heads=4,kv_heads=2,head_dim=48").expect("shape");
    assert_eq!((shape.q_dim(), shape.kv_dim()), (192, 96));
    let path = common::scratch("head-dim").join("heads.gguf");
    make_model(&shape, Recipe::parse("f32").expect("f32"), 3, None)
        .expect("make")
        .write_file(&path)
        .expect("write");
    let file = ModelFile::open(&path).expect("open");
    let config = Config::from_header(file.header(), "heads").expect("config");
    assert_eq!(
        (config.head_dim, config.q_dim(), config.embedding),
        (48, 192, 256)
    );
    let elements: u64 = file.header().tensors.iter().map(|t| t.elements()).sum();
    assert_eq!(elements, shape.parameters());
    let q = file.header().tensor("blk.0.attn_q.weight").expect("q");
    let o = file.header().tensor("blk.0.attn_output.weight").expect("o");
    assert_eq!(
        (q.dims.as_slice(), o.dims.as_slice()),
        (&[256, 192][..], &[192, 256][..])
    );
    let prompt = [1u32, 300, 301, 302, 303];
    let logits = |split: &[std::ops::Range<usize>]| {
        let mut chain = Chain::open(&path, split, 32).expect("chain");
        let mut all = vec![chain.forward(&prompt, Logits::All).expect("prefill")];
        all.push(chain.forward(&[304], Logits::Last).expect("decode"));
        all
    };
    let one = logits(&balanced_split(4, 1));
    assert!(one.iter().flatten().all(|x| x.is_finite()));
    for split in [balanced_split(4, 2), split_from_sizes(&[1, 3])] {
        let bits =
            |v: &[Vec<f32>]| -> Vec<u32> { v.iter().flatten().map(|x| x.to_bits()).collect() };
        assert_eq!(bits(&logits(&split)), bits(&one), "split {split:?}");
    }
}

#[test]
fn balanced_splits_are_contiguous_and_front_loaded() {
    assert_eq!(balanced_split(5, 3), vec![0..2, 2..4, 4..5]);
    assert_eq!(balanced_split(5, 1), vec![0..5]);
    assert_eq!(balanced_split(4, 4), vec![0..1, 1..2, 2..3, 3..4]);
}

#[test]
fn a_stage_maps_only_its_own_tensors() {
    let path = common::stories();
    let file = ModelFile::open(&path).expect("open");
    let config = Config::from_header(file.header(), "stories").expect("config");
    let file_len = std::fs::metadata(&path).expect("len").len();
    let mut total = 0;
    for range in balanced_split(5, 3) {
        let names = stage_tensor_names(&file, &config, &range);
        let slice: u64 = names
            .iter()
            .map(|n| file.header().tensor(n).expect("tensor").bytes())
            .sum();
        let stage = Stage::open(&path, range.clone(), 16).expect("stage");
        // Tensors are mapped in runs; a run may span the alignment padding
        // between neighbours, never a tensor of another stage.
        let padding = names.len() as u64 * file.header().alignment;
        assert!(stage.bytes_mapped() >= slice, "{range:?}");
        assert!(
            stage.bytes_mapped() <= slice + padding,
            "{range:?}: {} > {slice}",
            stage.bytes_mapped()
        );
        total += stage.bytes_mapped();
        assert!(file.header_bytes_read() <= file.header().data_offset + 64 * 1024);
    }
    assert!(
        total <= file_len,
        "the stages together map no more than the file"
    );
    let middle = stage_tensor_names(&file, &config, &(2..4));
    assert!(
        middle
            .iter()
            .all(|n| n.starts_with("blk.2.") || n.starts_with("blk.3.")),
        "{middle:?}"
    );
}

#[test]
fn bad_stage_inputs_are_errors() {
    let path = common::stories();
    for layers in [3..7, 2..2] {
        let e = match Stage::open(&path, layers.clone(), 16) {
            Ok(_) => panic!("layers {layers:?} opened"),
            Err(e) => e.to_string(),
        };
        let says = format!("layers {layers:?} are not a non-empty range of the model's 5 blocks");
        assert!(e.contains(&says), "{e}");
    }
    let mut first = Stage::open(&path, 0..2, 4).expect("stage");
    let e = first.forward(
        workers::model::StageInput::Tokens(&[1, 2, 3, 4, 5]),
        Logits::Last,
    );
    assert!(
        e.expect_err("over context")
            .to_string()
            .contains("exceed the context of 4")
    );
    let e = first.forward(workers::model::StageInput::Tokens(&[9999]), Logits::Last);
    assert!(e.expect_err("bad id").to_string().contains("9999"));
    let e = first.forward(
        workers::model::StageInput::Activations(&[0.0; 64]),
        Logits::Last,
    );
    let e = e.expect_err("activations into the first stage").to_string();
    assert!(
        e.contains("the first stage takes tokens, not activations"),
        "{e}"
    );
    let mut second = Stage::open(&path, 2..5, 4).expect("stage");
    let e = second.forward(
        workers::model::StageInput::Activations(&[0.0; 65]),
        Logits::Last,
    );
    assert!(
        e.expect_err("ragged")
            .to_string()
            .contains("65 activations")
    );
}
