#![allow(clippy::err_expect)]
//! A stage's slice as a GGUF of its own: stages opened on their slices give
//! the logits of the whole file, and a slice holds no more than its tensors
//! plus the header.

mod common;

use std::io::{Read, Seek, SeekFrom};
use workers::engine::balanced_split;
use workers::gguf::file::ModelFile;
use workers::gguf::slice::{SlicePlan, write_slice};
use workers::model::{Logits, Stage, StageInput, StageOutput};

#[test]
fn stages_on_their_slices_compute_what_the_whole_file_computes() {
    let dir = common::scratch("slice");
    let whole = common::stories();
    let header = ModelFile::open(&whole).expect("open").header().clone();
    let mut file = std::fs::File::open(&whole).expect("file");
    let mut stages = Vec::new();
    let mut fetched = 0u64;
    for (i, layers) in balanced_split(5, 3).into_iter().enumerate() {
        let plan = SlicePlan::new(&header, layers.clone()).expect("plan");
        let path = dir.join(format!("stage{i}.gguf"));
        write_slice(
            &header,
            &plan,
            |offset, len| {
                fetched += len;
                let mut buf = vec![0u8; len as usize];
                file.seek(SeekFrom::Start(offset))?;
                file.read_exact(&mut buf)?;
                Ok(buf)
            },
            &path,
        )
        .expect("slice");
        let size = std::fs::metadata(&path).expect("size").len();
        assert!(
            size <= plan.data_bytes() + header.data_offset + 64 * 1024,
            "stage {i}: {size} bytes"
        );
        stages.push(Stage::open(&path, layers, 32).expect("stage on its slice"));
    }
    assert!(fetched <= std::fs::metadata(&whole).expect("len").len());
    let mut one = Stage::open(&whole, 0..5, 32).expect("whole");
    let tokens = [1u32, 403, 407, 261, 378];
    let StageOutput::Logits(want) = one
        .forward(StageInput::Tokens(&tokens), Logits::All)
        .expect("one")
    else {
        panic!("logits")
    };
    let mut out = stages[0]
        .forward(StageInput::Tokens(&tokens), Logits::All)
        .expect("s0");
    for s in &mut stages[1..] {
        let StageOutput::Activations(a) = out else {
            panic!("activations")
        };
        out = s
            .forward(StageInput::Activations(&a), Logits::All)
            .expect("stage");
    }
    let StageOutput::Logits(got) = out else {
        panic!("logits")
    };
    assert_eq!(want.len(), tokens.len() * 512, "a row per token");
    assert_eq!(got.len(), want.len(), "the slices' logits");
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "the slices' logits differ from the whole file's"
    );
    // A slice does not hold another stage's blocks.
    let s1 = ModelFile::open(&dir.join("stage1.gguf")).expect("slice");
    assert!(
        s1.header()
            .tensors
            .iter()
            .all(|t| t.name.starts_with("blk.2.") || t.name.starts_with("blk.3."))
    );
    let e = Stage::open(&dir.join("stage1.gguf"), 0..2, 8)
        .err()
        .expect("blocks 0..2 are not in it");
    assert!(e.to_string().contains("not in the file"), "{e}");
}
