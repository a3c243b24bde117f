//! The GGUF reader and writer: real files, every value type, and a corpus
//! of broken files that must give clear errors, never a panic.

mod common;

use workers::gguf::file::ModelFile;
use workers::gguf::read::parse_header;
use workers::gguf::write::{GgufOut, TensorOut};
use workers::gguf::{Error, Value};
use workers::tensor::GgmlType;

#[test]
fn stories260k_reads_as_version_3_and_version_1_alike() {
    let v3 = ModelFile::open(&common::stories()).expect("v3");
    let v1 = ModelFile::open(&common::stories_v1()).expect("v1");
    assert_eq!(v3.header().version, 3);
    assert_eq!(v1.header().version, 1);
    assert_eq!(v3.header().tensors.len(), 48);
    let names = |f: &ModelFile| {
        f.header()
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone(), t.ty))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&v3), names(&v1));
    assert_eq!(
        v3.header().get("llama.block_count").and_then(Value::as_u64),
        Some(5)
    );
    let tokens = v3
        .header()
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .expect("tokens");
    assert_eq!(tokens.len(), 512);
    assert_eq!(tokens[1].as_str(), Some("<s>"));
    // Both files hold the same weights.
    let a = v3.map(&["blk.4.ffn_down.weight".into()]).expect("map");
    let b = v1.map(&["blk.4.ffn_down.weight".into()]).expect("map");
    assert_eq!(
        a.tensors["blk.4.ffn_down.weight"].1.bytes(),
        b.tensors["blk.4.ffn_down.weight"].1.bytes()
    );
}

fn every_value() -> Vec<(String, Value)> {
    vec![
        ("u8".into(), Value::U8(200)),
        ("i8".into(), Value::I8(-100)),
        ("u16".into(), Value::U16(60000)),
        ("i16".into(), Value::I16(-30000)),
        ("u32".into(), Value::U32(4_000_000_000)),
        ("i32".into(), Value::I32(-2_000_000_000)),
        ("f32".into(), Value::F32(1.5)),
        ("bool".into(), Value::Bool(true)),
        ("string".into(), Value::String("héllo ▁world".into())),
        (
            "array".into(),
            Value::Array(vec![Value::I32(1), Value::I32(-2)]),
        ),
        (
            "strings".into(),
            Value::Array(vec![Value::String("a".into()), Value::String("".into())]),
        ),
        ("u64".into(), Value::U64(u64::MAX)),
        ("i64".into(), Value::I64(i64::MIN)),
        ("f64".into(), Value::F64(-0.25)),
        (
            "nested".into(),
            Value::Array(vec![
                Value::Array(vec![Value::U8(1)]),
                Value::Array(vec![Value::U8(2)]),
            ]),
        ),
    ]
}

fn small_file(version: u32) -> Vec<u8> {
    let mut out = GgufOut::new();
    out.version = version;
    out.metadata = every_value();
    out.metadata
        .push(("general.alignment".into(), Value::U32(64)));
    out.tensors.push(TensorOut {
        name: "a".into(),
        dims: vec![32, 2],
        ty: GgmlType::Q8_0,
        data: vec![7; 68],
    });
    out.tensors.push(TensorOut {
        name: "b".into(),
        dims: vec![3],
        ty: GgmlType::F32,
        data: vec![1; 12],
    });
    let mut bytes = Vec::new();
    out.write_to(&mut bytes).expect("write");
    bytes
}

#[test]
fn every_value_type_round_trips_in_every_version() {
    for version in 1..=3 {
        let bytes = small_file(version);
        let h = parse_header(&bytes, "mem").expect("parse");
        assert_eq!(h.version, version);
        assert_eq!(&h.metadata[..15], &every_value()[..], "version {version}");
        assert_eq!(h.alignment, 64);
        assert_eq!(h.data_offset % 64, 0);
        assert_eq!(
            h.tensors[1].offset, 128,
            "the second tensor starts on the next 64-byte boundary"
        );
        assert_eq!(bytes.len() as u64, h.data_offset + 128 + 64);
    }
}

fn format_error(bytes: &[u8]) -> (u64, String, String) {
    match parse_header(bytes, "bad.gguf") {
        Err(Error::Format {
            offset,
            field,
            reason,
            ..
        }) => (offset, field, reason),
        Err(other) => panic!("not a format error: {other}"),
        Ok(_) => panic!("a broken file parsed"),
    }
}

#[test]
fn every_truncation_is_an_error_naming_a_field() {
    let bytes = small_file(3);
    // The file ends with padding after the last tensor's 12 bytes; a cut
    // anywhere before the end of those bytes breaks the file.
    let data_end = parse_header(&bytes, "ok").expect("parse").data_offset as usize + 128 + 12;
    for cut in 0..data_end {
        let r = parse_header(&bytes[..cut], "cut.gguf");
        let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with("cut.gguf: offset "),
            "cut at {cut}: {msg:?}"
        );
    }
}

/// Bytes of `bytes` with byte `at` set to `to`, for a seeded stream of
/// (at, to) pairs.
fn corruptions(bytes: &[u8], within: usize, count: usize) -> impl Iterator<Item = Vec<u8>> + '_ {
    let mut state = 0x1234_5678u64;
    (0..count).map(move |_| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut b = bytes.to_vec();
        let at = (state >> 33) as usize % within;
        b[at] = (state >> 13) as u8;
        b
    })
}

#[test]
fn random_corruption_never_panics() {
    let bytes = small_file(3);
    for b in corruptions(&bytes, bytes.len(), 20_000) {
        if let Err(e) = parse_header(&b, "corrupt.gguf") {
            let msg = e.to_string();
            assert!(msg.starts_with("corrupt.gguf: offset "), "{msg}");
        }
    }
}

/// A corrupted model header that still parses goes on to the model's
/// shape, its tokenizer and a stage's slice plan: each refuses it with an
/// error or takes it, and none panics or allocates without bound.
#[test]
fn a_corrupted_model_header_is_refused_by_what_reads_it_next() {
    use workers::gguf::slice::SlicePlan;
    use workers::model::Config;
    use workers::tokenizer::Tokenizer;
    let bytes = std::fs::read(common::stories()).expect("stories260k");
    let header_len = parse_header(&bytes, "m.gguf").expect("header").data_offset as usize;
    let (mut parsed, mut shaped) = (0, 0);
    for b in corruptions(&bytes, header_len, 3_000) {
        let Ok(header) = parse_header(&b, "m.gguf") else {
            continue;
        };
        parsed += 1;
        let _ = Tokenizer::from_gguf(&header);
        match Config::from_header(&header, "m.gguf") {
            Ok(config) => {
                shaped += 1;
                let _ = SlicePlan::new(&header, 0..config.blocks);
            }
            Err(e) => assert!(e.to_string().starts_with("m.gguf: metadata "), "{e}"),
        }
    }
    // Most single-byte changes land in strings and values and still parse.
    assert!(
        parsed > 1_000 && shaped > 100,
        "{parsed} parsed, {shaped} shaped"
    );
}

/// stories260K with the u32 value of metadata `key` set to `value`.
fn stories_with(key: &str, value: u32) -> Vec<u8> {
    let mut bytes = std::fs::read(common::stories()).expect("stories260k");
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .expect("the key")
        + key.len();
    // The value's type, then the value: 4 is UINT32.
    assert_eq!(bytes[at..at + 4], 4u32.to_le_bytes(), "{key} is a u32");
    bytes[at + 4..at + 8].copy_from_slice(&value.to_le_bytes());
    bytes
}

#[test]
fn a_hostile_block_count_or_context_is_named_not_obeyed() {
    use workers::model::{Config, Stage};
    let dir = common::scratch("gguf-hostile-model");
    // 4 billion blocks: refused before a single tensor name is made.
    let b = stories_with("llama.block_count", u32::MAX);
    let header = parse_header(&b, "blocks.gguf").expect("the header parses");
    let e = Config::from_header(&header, "blocks.gguf").expect_err("refused");
    assert_eq!(
        e.to_string(),
        "blocks.gguf: metadata \"llama.block_count\": 4294967295 blocks, but the file holds 48 tensors"
    );
    // A context of 4 billion positions: 512 GiB of keys a block. Where the
    // kernel refuses obvious overcommits (its default, `overcommit_memory`
    // 0, and the strict 2) the cache's mapping is refused and the error
    // names the context; where it allows every mapping (1) the cache is
    // taken lazily and the stage opens. Never an abort.
    let path = dir.join("context.gguf");
    std::fs::write(&path, stories_with("llama.context_length", u32::MAX)).expect("write");
    let overcommit = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    match (Stage::open(&path, 0..5, 0), overcommit.trim()) {
        (Ok(stage), "1") => assert_eq!(stage.context(), u32::MAX as usize),
        (Ok(_), mode) => panic!("a 4-billion-position cache was mapped (overcommit {mode:?})"),
        (Err(e), _) => {
            let e = e.to_string();
            assert!(
                e.starts_with(&format!(
                    "{}: a context of 4294967295 positions (32 key and as many value floats each, blocks 0..5): ",
                    path.display()
                )) && e.contains("could not be mapped")
                    && e.ends_with("ask for a shorter one (`--ctx`, or the plan's `[pipeline] ctx`)"),
                "{e}"
            );
        }
    }
    // Asked for a context that fits, the same file serves.
    let stage = Stage::open(&path, 0..5, 256).expect("a context of 256");
    assert_eq!(stage.context(), 256);
}

#[test]
fn hostile_fields_are_named_with_their_offsets() {
    let good = small_file(3);
    // Bad magic.
    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(format_error(&b).1, "magic");
    // Version 4.
    let mut b = good.clone();
    b[4] = 4;
    let (offset, field, _) = format_error(&b);
    assert_eq!((offset, field.as_str()), (4, "version"));
    // A tensor count of 2^60 must not allocate.
    let mut b = good.clone();
    b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let (offset, field, reason) = format_error(&b);
    assert_eq!((offset, field.as_str()), (8, "tensor_count"));
    assert!(reason.contains("cannot fit"), "{reason}");
    // A string length past the end of the file.
    let mut b = good.clone();
    b[24..32].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let (offset, field, _) = format_error(&b);
    assert_eq!((offset, field.as_str()), (24, "metadata[0] key"));
    // An unknown value type (the first key "u8" is 8+2 bytes; its type follows).
    let mut b = good.clone();
    b[34..38].copy_from_slice(&99u32.to_le_bytes());
    let (offset, field, reason) = format_error(&b);
    assert_eq!((offset, field.as_str()), (34, "metadata[0] \"u8\""));
    assert!(reason.contains("unknown value type 99"), "{reason}");
}

#[test]
fn tensors_outside_the_file_or_of_unknown_types_are_refused() {
    let mut out = GgufOut::new();
    out.tensors.push(TensorOut {
        name: "w".into(),
        dims: vec![4],
        ty: GgmlType::F32,
        data: vec![0; 16],
    });
    let mut bytes = Vec::new();
    out.write_to(&mut bytes).expect("write");
    let h = parse_header(&bytes, "ok").expect("parse");
    // The data runs past the end once the file is cut (past the 16 bytes
    // of padding that follow it).
    let (_, field, reason) = format_error(&bytes[..bytes.len() - 20]);
    assert_eq!(field, "tensor[0] \"w\"");
    assert!(reason.contains("outside the file"), "{reason}");
    // Type code 16 (an i-quant) is named and refused, and so are the types
    // that only encode activations (q8_1, q8_K). The type sits after the
    // name (8 + 1 bytes), n_dims (4) and one dim (8).
    let type_at = 24 + 9 + 4 + 8;
    for (code, name) in [
        (16u32, "an i-quant"),
        (29, "an i-quant"),
        (9, "q8_1, an activation type"),
        (15, "q8_K, an activation type"),
    ] {
        let mut b = bytes.clone();
        b[type_at..type_at + 4].copy_from_slice(&code.to_le_bytes());
        let (offset, field, reason) = format_error(&b);
        assert_eq!(
            (offset, field.as_str()),
            (type_at as u64, "tensor[0] \"w\" type")
        );
        assert!(
            reason.contains(&format!("ggml type {code} ({name}) is not supported")),
            "{reason}"
        );
    }
    // An offset that is not aligned.
    let mut b = bytes.clone();
    b[type_at + 4..type_at + 12].copy_from_slice(&4u64.to_le_bytes());
    assert!(format_error(&b).2.contains("not aligned"));
    assert_eq!(h.tensors[0].bytes(), 16);
}

#[test]
fn a_file_that_is_not_there_names_its_path() {
    let err = ModelFile::open(std::path::Path::new("/nonexistent/m.gguf")).expect_err("error");
    assert!(
        err.to_string().starts_with("/nonexistent/m.gguf: "),
        "{err}"
    );
}

#[test]
fn a_truncated_model_on_disk_is_an_error_not_a_panic() {
    let dir = common::scratch("gguf-truncated");
    let full = std::fs::read(common::stories()).expect("model");
    for (i, cut) in [10usize, 100, 5000, 14000, full.len() / 2, full.len() - 1]
        .into_iter()
        .enumerate()
    {
        let p = dir.join(format!("cut{i}.gguf"));
        std::fs::write(&p, &full[..cut]).expect("write");
        let err = ModelFile::open(&p).expect_err("a truncated file must not open");
        assert!(err.to_string().contains("offset"), "{err}");
    }
}
