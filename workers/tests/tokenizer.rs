//! The tokenizer against llama.cpp's own test vectors, and on the real
//! stories260k model.
//!
//! llama.cpp ships vocabulary-only GGUF files with inputs (`.gguf.inp`,
//! cases separated by a marker line) and the ids its `llama_tokenize`
//! gives them (`.gguf.out`, one line of space-separated ids per case, with
//! `add_special = false, parse_special = false`); see its
//! `tests/test-tokenizer-0.cpp`. They come from the PyPI sdist of
//! llama-cpp-python 0.3.36, downloaded once with pip into
//! `target/test-cache/` and never committed. Without them the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;
use workers::gguf::file::ModelFile;
use workers::tokenizer::{Tokenizer, Utf8Stream, Vocab, attr, pretokenize};

const SDIST: &str = "llama-cpp-python==0.3.36";
const SDIST_DIR: &str = "llama_cpp_python-0.3.36/vendor/llama.cpp/models";
const SDIST_SRC: &str = "llama_cpp_python-0.3.36/vendor/llama.cpp/src";
const VOCABS: &[&str] = &["llama-spm", "llama-bpe", "qwen2"];

fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-cache/llama-cpp-python-0.3.36")
}

fn stories_path() -> &'static str {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/models/stories260k.gguf"
    )
}

/// llama.cpp's Unicode classes, beside the vocab files in the cache.
const UNICODE_DATA: &str = "unicode-data.cpp";

fn vocab_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![dir.join(UNICODE_DATA)];
    for name in VOCABS {
        for ext in ["gguf", "gguf.inp", "gguf.out"] {
            files.push(dir.join(format!("ggml-vocab-{name}.{ext}")));
        }
    }
    files
}

/// The directory holding the vocab files, fetched on first use. Tests run
/// in parallel threads, so the fetch is done under a lock.
fn vocab_dir() -> PathBuf {
    static FETCH: Mutex<()> = Mutex::new(());
    let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let dir = cache_dir();
    if vocab_files(&dir).iter().all(|f| f.is_file()) {
        return dir;
    }
    if let Err(why) = fetch(&dir) {
        panic!(
            "cannot get llama.cpp's tokenizer test vectors: {why}\n\
             They come from the PyPI sdist {SDIST}: `python3 -m pip download --no-deps \
             --no-binary llama-cpp-python {SDIST} -d {}` and its {SDIST_DIR}/ggml-vocab-*.gguf*.",
            dir.display()
        );
    }
    dir
}

fn fetch(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let sdist = dir.join("llama_cpp_python-0.3.36.tar.gz");
    if !sdist.is_file() {
        // Only this package is taken as source: `--no-binary :all:` would
        // also build pip's build tools (cmake) from source to read metadata.
        let args = [
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
            SDIST,
            "-d",
        ];
        let mut tried = Vec::new();
        let mut done = false;
        for (program, pre) in [
            ("python3", &["-m", "pip"][..]),
            ("pip3", &[][..]),
            ("pip", &[][..]),
        ] {
            let status = Command::new(program).args(pre).args(args).arg(dir).status();
            match status {
                Ok(s) if s.success() && sdist.is_file() => {
                    done = true;
                    break;
                }
                Ok(s) => tried.push(format!("{program}: {s}")),
                Err(e) => tried.push(format!("{program}: {e}")),
            }
        }
        if !done {
            return Err(format!("pip download failed ({})", tried.join("; ")));
        }
    }
    let mut members: Vec<String> = vocab_files(Path::new(SDIST_DIR))
        .iter()
        .skip(1)
        .map(|p| p.display().to_string())
        .collect();
    members.push(format!("{SDIST_SRC}/{UNICODE_DATA}"));
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&sdist)
        .arg("-C")
        .arg(dir)
        .arg("--strip-components=4")
        .args(&members)
        .status()
        .map_err(|e| format!("tar: {e}"))?;
    if !status.success() {
        return Err(format!("tar -xzf {} failed: {status}", sdist.display()));
    }
    match vocab_files(dir).iter().find(|f| !f.is_file()) {
        Some(f) => Err(format!("{} is missing after extraction", f.display())),
        None => Ok(()),
    }
}

fn load_file(path: &Path) -> Tokenizer {
    let file = ModelFile::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let vocab =
        Vocab::from_gguf(file.header()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::new(vocab).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The tokenizer of `name` ("llama-spm", "llama-bpe", "qwen2" or
/// "stories260k"), loaded once for all the tests.
fn load(name: &str) -> &'static Tokenizer {
    static LOADED: [OnceLock<Tokenizer>; 4] = [const { OnceLock::new() }; 4];
    let (slot, path) = match name {
        "stories260k" => (&LOADED[3], PathBuf::from(stories_path())),
        _ => {
            let i = VOCABS
                .iter()
                .position(|v| *v == name)
                .unwrap_or_else(|| panic!("no vocab {name}"));
            (
                &LOADED[i],
                vocab_dir().join(format!("ggml-vocab-{name}.gguf")),
            )
        }
    };
    slot.get_or_init(|| load_file(&path))
}

/// The cases of `test-tokenizer-0.cpp`'s `read_tests`.
fn cases(inp: &Path, out: &Path) -> Vec<(String, Vec<u32>)> {
    let raw = std::fs::read_to_string(inp).unwrap_or_else(|e| panic!("{}: {e}", inp.display()));
    let expected =
        std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let mut inputs: Vec<&str> = raw.split("\n__ggml_vocab_test__\n").collect();
    if inputs.last() == Some(&"") {
        inputs.pop();
    }
    let outputs: Vec<Vec<u32>> = expected
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(|t| t.parse().unwrap_or(u32::MAX))
                .collect()
        })
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{}: inputs and outputs differ in count",
        inp.display()
    );
    inputs
        .into_iter()
        .map(str::to_string)
        .zip(outputs)
        .collect()
}

fn check_vocab(name: &str) {
    let dir = vocab_dir();
    let t = load(name);
    let cases = cases(
        &dir.join(format!("ggml-vocab-{name}.gguf.inp")),
        &dir.join(format!("ggml-vocab-{name}.gguf.out")),
    );
    let mut failures = Vec::new();
    for (text, expected) in &cases {
        let got = t.encode(text, false);
        if &got != expected {
            failures.push(format!(
                "  {text:?}\n    llama.cpp {expected:?}\n    ours      {got:?}"
            ));
        }
        // add_special puts BOS (and EOS) around the same ids.
        let v = t.vocab();
        let mut framed: Vec<u32> = v.bos.filter(|_| v.add_bos).into_iter().collect();
        framed.extend(expected);
        framed.extend(v.eos.filter(|_| v.add_eos));
        assert_eq!(
            t.encode(text, true),
            framed,
            "{name}: {text:?} with add_special"
        );
    }
    println!(
        "{name}: {}/{} llama.cpp cases match",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn llama_spm_vocab_matches_llama_cpp() {
    check_vocab("llama-spm");
}

#[test]
fn llama_bpe_vocab_matches_llama_cpp() {
    check_vocab("llama-bpe");
}

#[test]
fn qwen2_vocab_matches_llama_cpp() {
    check_vocab("qwen2");
}

#[test]
fn vocab_defaults_are_llama_cpps() {
    let spm = load("llama-spm");
    let v = spm.vocab();
    assert_eq!(
        (
            v.model.as_str(),
            v.bos,
            v.eos,
            v.add_bos,
            v.add_eos,
            v.add_space_prefix
        ),
        ("llama", Some(1), Some(2), true, false, true)
    );
    assert!(spm.is_eog(2));
    let bpe = load("llama-bpe");
    assert_eq!(bpe.vocab().pre.as_deref(), Some("llama-bpe"));
    assert!(bpe.vocab().add_bos);
    let eot = bpe.token_id("<|eot_id|>").unwrap_or(u32::MAX);
    assert!(bpe.is_eog(eot), "<|eot_id|> ends a generation");
    // Control tokens in the text are text, unless parsed as special.
    assert_ne!(bpe.encode("<|eot_id|>", false), [eot]);
    assert_eq!(bpe.tokenize("<|eot_id|>", false, true), [eot]);
    let qwen = load("qwen2");
    assert!(!qwen.vocab().add_bos, "qwen2 adds no BOS");
    let im_end = qwen.token_id("<|im_end|>").unwrap_or(u32::MAX);
    assert!(qwen.is_eog(im_end) && qwen.attr(im_end) & attr::CONTROL != 0);
}

#[test]
fn decode_inverts_encode_on_the_vectors() {
    let dir = vocab_dir();
    for name in VOCABS {
        let t = load(name);
        let cases = cases(
            &dir.join(format!("ggml-vocab-{name}.gguf.inp")),
            &dir.join(format!("ggml-vocab-{name}.gguf.out")),
        );
        for (text, _) in cases {
            let decoded = t.decode(&t.encode(&text, false), false);
            // SentencePiece adds one leading space; BPE adds nothing.
            let want = if *name == "llama-spm" && !text.is_empty() {
                format!(" {text}")
            } else {
                text.clone()
            };
            assert_eq!(decoded, want, "{name}: {text:?}");
        }
    }
}

#[test]
fn stories260k_is_a_512_token_sentencepiece() {
    let t = load("stories260k");
    let v = t.vocab();
    assert_eq!(
        (v.model.as_str(), t.n_tokens(), v.bos, v.eos),
        ("llama", 512, Some(1), Some(2))
    );
    let text = "Once upon a time, there was a little girl named Lily. She loved to play outside!";
    let ids = t.encode(text, true);
    assert_eq!(ids.first(), Some(&1));
    assert!(ids.len() < text.len(), "{ids:?}");
    assert_eq!(t.decode(&ids, false), format!(" {text}"));
    // Characters outside the vocabulary fall back to their bytes.
    let odd = "naïve 🦙";
    assert_eq!(t.decode(&t.encode(odd, false), false), format!(" {odd}"));
}

/// xorshift64*: a seeded generator, so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn streaming_random_byte_tokens_never_splits_a_character() {
    for name in ["llama-spm", "llama-bpe", "stories260k"] {
        let t = load(name);
        let bytes: Vec<u32> = (0..t.n_tokens() as u32)
            .filter(|&id| t.piece(id, false).len() == 1)
            .collect();
        assert!(
            bytes.len() >= 200,
            "{name}: {} one-byte tokens",
            bytes.len()
        );
        for seed in 1..=200u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let len = rng.below(40);
            // Mostly one-byte tokens (high bytes split characters), some whole tokens.
            let ids: Vec<u32> = (0..len)
                .map(|_| {
                    if rng.below(4) == 0 {
                        rng.below(t.n_tokens()) as u32
                    } else {
                        bytes[rng.below(bytes.len())]
                    }
                })
                .collect();
            let mut decoder = t.decoder();
            let mut streamed = String::new();
            let mut all = Vec::new();
            for &id in &ids {
                all.extend_from_slice(t.piece(id, false));
                let piece = decoder.push(id);
                // What is out never changes: it is a prefix of the final text.
                streamed.push_str(&piece);
                assert!(
                    String::from_utf8_lossy(&all).starts_with(&streamed),
                    "seed {seed}: {ids:?}"
                );
            }
            streamed.push_str(&decoder.finish());
            assert_eq!(
                streamed,
                String::from_utf8_lossy(&all),
                "{name}: seed {seed}: {ids:?}"
            );
        }
    }
}

#[test]
fn utf8_stream_matches_lossy_decoding_on_random_bytes() {
    for seed in 1..=2000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let all: Vec<u8> = (0..rng.below(24))
            .map(|_| [0x41, 0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0x9F, 0xFF][rng.below(8)])
            .collect();
        let mut s = Utf8Stream::new();
        let mut out = String::new();
        let mut at = 0;
        while at < all.len() {
            let step = 1 + rng.below(3);
            let end = (at + step).min(all.len());
            out.push_str(&s.push(&all[at..end]));
            at = end;
        }
        out.push_str(&s.finish());
        assert_eq!(out, String::from_utf8_lossy(&all), "seed {seed}: {all:x?}");
    }
}

#[test]
fn long_inputs_take_linear_time() {
    for name in VOCABS {
        let t = load(name);
        // One 64 KiB word: a quadratic merge loop would take minutes here.
        let word = "ab".repeat(32 * 1024);
        let prose = "The quick brown fox jumps over the lazy dog, 1234567 times! ".repeat(40);
        let start = Instant::now();
        let ids = t.encode(&word, false);
        let long_ms = start.elapsed().as_millis();
        let start = Instant::now();
        let prompt = t.encode(&prose, true);
        let prompt_us = start.elapsed().as_micros();
        println!(
            "{name}: 64 KiB word {long_ms} ms ({} ids); {}-token prompt {prompt_us} us",
            ids.len(),
            prompt.len()
        );
        assert_eq!(t.decode(&ids, false).trim_start(), word);
        assert!(long_ms < 20_000, "{name}: {long_ms} ms for one 64 KiB word");
    }
}

/// llama.cpp's `unicode_ranges_flags` (start, flags) and whitespace set.
fn llama_cpp_unicode(path: &Path) -> (Vec<(u32, u16)>, Vec<u32>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let table = |name: &str| {
        let start = text
            .find(name)
            .unwrap_or_else(|| panic!("{name} not in {}", path.display()));
        let body = &text[start..];
        let body = &body[body.find('{').unwrap_or(0) + 1..body.find("};").unwrap_or(0)];
        let hex = |t: &str| u32::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok();
        body.lines().filter_map(move |line| {
            let fields: Vec<&str> = line
                .trim()
                .trim_matches(|c| c == '{' || c == '}' || c == ',')
                .split(',')
                .collect();
            match fields.as_slice() {
                [a, b] => Some((hex(a)?, hex(b)?)),
                [a] => Some((hex(a)?, 0)),
                _ => None,
            }
        })
    };
    let ranges = table("unicode_ranges_flags")
        .map(|(a, b)| (a, b as u16))
        .collect();
    let spaces = table("unicode_set_whitespace").map(|(a, _)| a).collect();
    (ranges, spaces)
}

#[test]
fn unicode_classes_are_llama_cpps() {
    let (ranges, spaces) = llama_cpp_unicode(&vocab_dir().join(UNICODE_DATA));
    assert!(
        ranges.len() > 1000 && spaces.len() > 20,
        "{} ranges, {} spaces",
        ranges.len(),
        spaces.len()
    );
    let mut differ = Vec::new();
    for pair in ranges.windows(2) {
        let ((start, flags), (end, _)) = (pair[0], pair[1]);
        for code in start..end {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let ours = (
                pretokenize::is_letter(c),
                pretokenize::is_number(c),
                pretokenize::is_space(c),
            );
            let theirs = (flags & 0x4 != 0, flags & 0x2 != 0, spaces.contains(&code));
            if ours != theirs {
                differ.push(format!("U+{code:04X} ours {ours:?} llama.cpp {theirs:?}"));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} code points differ (letter, number, space):\n{}",
        differ.len(),
        differ
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// llama.cpp's ids (llama-cpp-python 0.3.36, `add_special = true`) for texts
/// with special tokens in them, parsed as text and as special tokens; the
/// vectors above cover only `parse_special = false`.
const GOLDENS: &[(&str, &str, bool, &[u32])] = &[
    (
        "stories260k",
        "Once upon a time, there was a little girl named Lily.",
        false,
        &[
            1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
        ],
    ),
    (
        "stories260k",
        "Once upon a time, there was a little girl named Lily.",
        true,
        &[
            1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
        ],
    ),
    (
        "stories260k",
        " leading  and   inner spaces\n\nnewlines\ttab",
        false,
        &[
            1, 410, 278, 411, 380, 299, 410, 269, 410, 410, 322, 416, 285, 262, 427, 412, 331, 419,
            13, 13, 416, 411, 424, 421, 271, 406, 12, 413, 412, 430,
        ],
    ),
    (
        "stories260k",
        " leading  and   inner spaces\n\nnewlines\ttab",
        true,
        &[
            1, 410, 278, 411, 380, 299, 410, 269, 410, 410, 322, 416, 285, 262, 427, 412, 331, 419,
            13, 13, 416, 411, 424, 421, 271, 406, 12, 413, 412, 430,
        ],
    ),
    (
        "stories260k",
        "naïve café 🦙 ½",
        false,
        &[
            1, 297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 243, 162, 169, 156, 410, 197, 192,
        ],
    ),
    (
        "stories260k",
        "naïve café 🦙 ½",
        true,
        &[
            1, 297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 243, 162, 169, 156, 410, 197, 192,
        ],
    ),
    (
        "stories260k",
        "<s>Tom said: \"Hi!\"</s>",
        false,
        &[
            1, 410, 504, 419, 505, 434, 287, 336, 467, 313, 440, 417, 443, 436, 504, 492, 419, 505,
        ],
    ),
    (
        "stories260k",
        "<s>Tom said: \"Hi!\"</s>",
        true,
        &[1, 1, 274, 287, 336, 467, 313, 440, 417, 443, 436, 2],
    ),
    ("stories260k", "", false, &[1]),
    ("stories260k", "", true, &[1]),
    (
        "llama-bpe",
        "<|begin_of_text|>Hello<|eot_id|> world",
        false,
        &[
            128000, 27, 91, 7413, 3659, 4424, 91, 29, 9906, 27, 91, 68, 354, 851, 91, 29, 1917,
        ],
    ),
    (
        "llama-bpe",
        "<|begin_of_text|>Hello<|eot_id|> world",
        true,
        &[128000, 128000, 9906, 128009, 1917],
    ),
    (
        "llama-bpe",
        "<|start_header_id|>user<|end_header_id|>\n\nHi 12345!",
        false,
        &[
            128000, 27, 91, 2527, 8932, 851, 91, 29, 882, 27, 91, 408, 8932, 851, 91, 1363, 13347,
            220, 4513, 1774, 0,
        ],
    ),
    (
        "llama-bpe",
        "<|start_header_id|>user<|end_header_id|>\n\nHi 12345!",
        true,
        &[128000, 128006, 882, 128007, 271, 13347, 220, 4513, 1774, 0],
    ),
    (
        "llama-bpe",
        "I'VE  \n\n  got 'em",
        false,
        &[128000, 40, 6, 4592, 19124, 220, 2751, 364, 336],
    ),
    (
        "llama-bpe",
        "I'VE  \n\n  got 'em",
        true,
        &[128000, 40, 6, 4592, 19124, 220, 2751, 364, 336],
    ),
    (
        "qwen2",
        "<|im_start|>user\nHello 2024<|im_end|>\n",
        false,
        &[
            27, 91, 318, 4906, 91, 29, 872, 198, 9707, 220, 17, 15, 17, 19, 27, 91, 318, 6213, 91,
            397,
        ],
    ),
    (
        "qwen2",
        "<|im_start|>user\nHello 2024<|im_end|>\n",
        true,
        &[151644, 872, 198, 9707, 220, 17, 15, 17, 19, 151645, 198],
    ),
    (
        "qwen2",
        "<|endoftext|>x<|im_end|>",
        false,
        &[
            27, 91, 8691, 723, 427, 91, 29, 87, 27, 91, 318, 6213, 91, 29,
        ],
    ),
    (
        "qwen2",
        "<|endoftext|>x<|im_end|>",
        true,
        &[151643, 87, 151645],
    ),
    (
        "qwen2",
        "naïve  中文 　 end  ",
        false,
        &[3376, 37572, 586, 220, 72858, 16744, 220, 22441, 835, 256],
    ),
    (
        "qwen2",
        "naïve  中文 　 end  ",
        true,
        &[3376, 37572, 586, 220, 72858, 16744, 220, 22441, 835, 256],
    ),
];

#[test]
fn special_token_goldens_match_llama_cpp() {
    for name in ["stories260k", "llama-bpe", "qwen2"] {
        let t = load(name);
        for &(_, text, parse_special, expected) in GOLDENS.iter().filter(|g| g.0 == name) {
            assert_eq!(
                t.tokenize(text, true, parse_special),
                expected,
                "{name}: {text:?} parse_special {parse_special}"
            );
        }
    }
}
