#![allow(clippy::err_expect)]
//! A stage's slice as a GGUF of its own: stages opened on their slices give
//! the logits of the whole file, and a slice holds no more than its tensors
//! plus the header.

mod common;

use std::io::{Read, Seek, SeekFrom};
use workers::engine::balanced_split;
use workers::gguf::file::ModelFile;
use workers::gguf::slice::{SlicePlan, SliceWriter, remove_stale_partials, slice_head};
use workers::model::{Logits, Stage, StageInput, StageOutput};

#[test]
fn stages_on_their_slices_compute_what_the_whole_file_computes() {
    let dir = common::scratch("slice");
    let (whole, header, mut file) = stories();
    let mut stages = Vec::new();
    let mut fetched = 0u64;
    for (i, layers) in balanced_split(5, 3).into_iter().enumerate() {
        let plan = SlicePlan::new(&header, layers.clone()).expect("plan");
        let path = dir.join(format!("stage{i}.gguf"));
        // Each tensor's bytes arrive in pieces.
        let mut writer = SliceWriter::create(&header, &plan, &path).expect("create");
        for &r in &plan.ranges {
            fetched += r.1;
            for piece in range(&mut file, r).chunks(4093) {
                writer.write(piece).expect("write");
            }
        }
        writer.finish().expect("finish");
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

/// The whole of one range's bytes at `offset`.
fn range(file: &mut std::fs::File, (offset, len): (u64, u64)) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    file.seek(SeekFrom::Start(offset)).expect("seek");
    file.read_exact(&mut buf).expect("read");
    buf
}

#[test]
fn a_slice_is_the_same_in_any_pieces_and_never_half_written() {
    let dir = common::scratch("slice-pieces");
    let (_, header, mut file) = stories();
    let plan = SlicePlan::new(&header, 1..3).expect("plan");
    let data: Vec<u8> = plan
        .ranges
        .iter()
        .flat_map(|&r| range(&mut file, r))
        .collect();
    assert_eq!(data.len() as u64, plan.data_bytes());
    // Whole, byte by byte where tensors meet, and in odd pieces: the
    // same file.
    let mut files = Vec::new();
    for piece in [data.len(), 1, 333] {
        let path = dir.join(format!("by{piece}.gguf"));
        let mut writer = SliceWriter::create(&header, &plan, &path).expect("create");
        for chunk in data.chunks(piece) {
            writer.write(chunk).expect("write");
        }
        assert!(!path.exists(), "in place before it is finished");
        writer.finish().expect("finish");
        files.push(std::fs::read(&path).expect("slice"));
    }
    assert!(files.windows(2).all(|w| w[0] == w[1]));
    let slice = ModelFile::open(&dir.join("by1.gguf")).expect("the slice opens");
    // What a cached slice's head is checked against: its bytes before
    // the tensor data.
    let head = slice_head(&header, &plan);
    assert_eq!(head.len() as u64, slice.header().data_offset);
    assert_eq!(&files[0][..head.len()], head.as_slice());
    assert_eq!(slice.header().tensors.len(), plan.tensors.len());
    let kept = names_in(&dir);

    // A byte too many is refused; one too few fails `finish`; a writer
    // dropped half way: none of them leaves a file behind.
    let path = dir.join("bad.gguf");
    let mut writer = SliceWriter::create(&header, &plan, &path).expect("create");
    writer.write(&data).expect("every byte");
    let e = writer.write(&[0]).expect_err("one past the end");
    assert_eq!(
        e.to_string(),
        format!("1 bytes past the slice's {} tensors", plan.tensors.len())
    );
    drop(writer);
    let mut writer = SliceWriter::create(&header, &plan, &path).expect("create");
    writer.write(&data[..data.len() - 1]).expect("all but one");
    assert_eq!(writer.missing(), 1);
    let e = writer.finish().expect_err("one short");
    assert_eq!(e.to_string(), "the slice misses 1 bytes of its tensors");
    let mut writer = SliceWriter::create(&header, &plan, &path).expect("create");
    writer.write(&data[..1000]).expect("a start");
    drop(writer);
    assert_eq!(names_in(&dir), kept);
    std::fs::remove_dir_all(&dir).expect("clean");
}

#[test]
fn partial_files_of_dead_writers_are_removed_and_no_others() {
    let dir = common::scratch("slice-stale");
    let (_, header, _) = stories();
    let plan = SlicePlan::new(&header, 1..3).expect("plan");
    let out = dir.join("m-1-3-v1.gguf");
    let name = |tail: &str| dir.join(format!("m-1-3-v1.gguf.{tail}"));
    // A dead writer's file: no one holds it.
    let dead = name("4242-0-1.partial");
    std::fs::write(&dead, b"half").expect("write");
    // A writer that runs, in this process: its file is held.
    let live = SliceWriter::create(&header, &plan, &out).expect("create");
    // One held by another open file, as another process's writer holds
    // its own.
    let held = name("1-0-2.partial");
    let holder = std::fs::File::create(&held).expect("create");
    holder.try_lock().expect("lock");
    let others = [
        dir.join("m-3-5-v1.gguf.4242-0-1.partial"),
        name("4242-0-1.part"),
        dir.join("m-1-3-v1.gguf"),
    ];
    for path in &others {
        std::fs::write(path, b"half").expect("write");
    }
    let before = names_in(&dir);
    let tried = remove_stale_partials(&out);
    assert_eq!(tried.len(), 1, "{tried:?}");
    assert_eq!(tried[0].0, dead);
    assert!(tried[0].1.is_ok(), "{tried:?}");
    let after = names_in(&dir);
    let dead_name = dead
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let kept: Vec<&String> = before.iter().filter(|n| **n != dead_name).collect();
    assert_eq!(after.iter().collect::<Vec<_>>(), kept);
    assert_eq!(after.len(), 2 + others.len(), "{after:?}");
    drop(live);
    drop(holder);
    // Once their writers are gone, both are stale (the live writer's was
    // removed as it dropped).
    let tried = remove_stale_partials(&out);
    assert_eq!(
        tried.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
        std::slice::from_ref(&held)
    );
    // A cache that does not exist yet holds nothing to remove.
    let none = dir.join("missing").join("m-1-3-v1.gguf");
    assert!(remove_stale_partials(&none).is_empty());
    std::fs::remove_dir_all(&dir).expect("clean");
}

/// The names in `dir`, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The trained model: its path, its header, the file open.
fn stories() -> (std::path::PathBuf, workers::gguf::Header, std::fs::File) {
    let whole = common::stories();
    let header = ModelFile::open(&whole).expect("open").header().clone();
    let file = std::fs::File::open(&whole).expect("file");
    (whole, header, file)
}
