//! A first stage's embedding stays out of the resident set when the rows
//! of a step are looked up (`Stage::forward` reads them from the file).

use super::*;
use crate::fixture::{Recipe, Shape, make_model};

/// How many pages of `len` bytes at `addr` this process has mapped in,
/// from `/proc/self/pagemap` (bit 63 of each page's entry: present).
#[cfg(target_os = "linux")]
fn present_pages(addr: usize, len: usize) -> usize {
    use std::io::{Read, Seek, SeekFrom};
    let page = 4096;
    let mut map = std::fs::File::open("/proc/self/pagemap").expect("pagemap");
    let (first, last) = (addr / page, (addr + len - 1) / page);
    map.seek(SeekFrom::Start(8 * first as u64)).expect("seek");
    let mut entries = vec![0u8; 8 * (last - first + 1)];
    map.read_exact(&mut entries).expect("pagemap entries");
    entries
        .chunks_exact(8)
        .filter(|e| u64::from_le_bytes((*e).try_into().expect("8 bytes")) >> 63 == 1)
        .count()
}

/// A one-block stage (the first, and the last too when the model has
/// one block) of a model of `shape` in `ty`, from a file that is gone
/// once the stage has mapped it.
#[cfg(target_os = "linux")]
fn first_stage(shape: &str, ty: &str, name: &str) -> Stage {
    let shape = Shape::parse(shape).expect("shape");
    let model = make_model(&shape, Recipe::parse(ty).expect("type"), 3, None).expect("model");
    let path = std::env::temp_dir().join(format!("drover-{name}-{}.gguf", std::process::id()));
    model.write_file(&path).expect("write");
    let stage = Stage::open(&path, 0..1, 64).expect("stage");
    let _ = std::fs::remove_file(&path);
    stage
}

/// Where the stage's embedding is mapped: its address and length.
#[cfg(target_os = "linux")]
fn embedding_range(stage: &Stage) -> (usize, usize) {
    let embd = stage.weights.embedding.as_ref().expect("a first stage");
    let bytes = embd.matrix().data;
    (bytes.as_ptr() as usize, bytes.len())
}

/// Token ids a page or more apart in a 16384-row table, all over it.
#[cfg(target_os = "linux")]
fn spread_tokens() -> Vec<u32> {
    (0..64).map(|i| i * 256 + 7).collect()
}

#[cfg(target_os = "linux")]
#[test]
fn looked_up_embedding_rows_never_enter_the_resident_set() {
    // A 4 MiB f32 embedding (vocab 16384 x dim 64), the first of two blocks.
    let mut stage = first_stage(
        "tiny,dim=64,layers=2,heads=4,kv_heads=4,ff=128,vocab=16384",
        "f32",
        "resident",
    );
    assert!(!stage.weights.head_reads_embedding());
    let (addr, len) = embedding_range(&stage);
    let tokens = spread_tokens();
    let out = stage.forward(StageInput::Tokens(&tokens), Logits::Last);
    assert!(matches!(out, Ok(StageOutput::Activations(_))));
    // The step reads block 0's tensors, which follow the embedding in the
    // file, and a fault maps up to 64 KiB around it (`fault_around_bytes`):
    // at most the embedding's last 16 pages come in that way.
    let after = present_pages(addr, len);
    assert!(
        after <= 16,
        "{after} pages of the embedding mapped after a step"
    );
    // The rows read from the file are the mapped rows; and the check
    // itself: reading them through the mapping maps their pages.
    let embd = stage.weights.embedding.as_ref().expect("a first stage");
    for &t in &tokens {
        let read = embd.read_row_f32(t as usize).expect("read");
        assert_eq!(read, embd.row_f32(t as usize), "token {t}");
    }
    let mapped = present_pages(addr, len);
    assert!(
        mapped >= tokens.len(),
        "reading {} rows mapped only {mapped} pages",
        tokens.len()
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_packed_tied_head_leaves_the_embedding_out_of_the_resident_set_too() {
    // q4_0, the head tied to a 0.6 MiB embedding, one stage that is first
    // and last. Where the kernels pack q4_0 the head multiplies by its
    // packed copy, and neither it nor the lookups read the mapping.
    let mut stage = first_stage(
        "tiny,dim=64,layers=1,heads=4,kv_heads=4,ff=128,vocab=16384,tied=true",
        "q4_0",
        "resident-tied",
    );
    let head = stage.weights.head.as_ref().expect("a last stage");
    let packed = head.output.matrix().packed;
    let (addr, len) = embedding_range(&stage);
    let tokens = spread_tokens();
    let out = stage.forward(StageInput::Tokens(&tokens), Logits::Last);
    assert!(matches!(out, Ok(StageOutput::Logits(_))));
    let after = present_pages(addr, len);
    if packed {
        assert!(!stage.weights.head_reads_embedding());
        assert!(
            after <= 16,
            "{after} pages of a packed tied head's embedding mapped after a step"
        );
    } else {
        // The portable kernels: the head reads every mapped byte a token.
        assert!(stage.weights.head_reads_embedding());
        assert!(
            after >= len / 4096,
            "{after} of {} pages mapped",
            len / 4096
        );
    }
}
