//! Small hand-made vocabularies; the real ones are in `tests/tokenizer.rs`.

use super::*;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A SentencePiece vocabulary: `<unk> <s> </s>`, the 256 byte tokens, then
/// a few pieces with scores.
fn spm_vocab() -> Vocab {
    let mut tokens = strings(&["<unk>", "<s>", "</s>"]);
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let pieces = [
        ("▁", -1.0),
        ("a", -2.0),
        ("b", -2.0),
        ("▁a", -1.5),
        ("ab", -0.5),
        ("▁ab", -3.0),
        ("<user>", 0.0),
    ];
    let mut scores = vec![0.0; tokens.len()];
    for (text, score) in pieces {
        tokens.push(text.to_string());
        scores.push(score);
        types.push(if text == "<user>" { 4 } else { 1 });
    }
    Vocab {
        model: "llama".into(),
        tokens,
        scores,
        token_types: types,
        bos: Some(1),
        eos: Some(2),
        unk: Some(0),
        add_bos: true,
        add_space_prefix: true,
        ..Vocab::default()
    }
}

fn id(t: &Tokenizer, text: &str) -> u32 {
    t.token_id(text).unwrap_or(u32::MAX)
}

#[test]
fn spm_joins_the_best_pair_first() {
    let t = Tokenizer::new(spm_vocab()).expect("vocab");
    // "▁ab": "ab" (-0.5) beats "▁a" (-1.5), then "▁"+"ab" = "▁ab".
    assert_eq!(t.encode("ab", true), [1, id(&t, "▁ab")]);
    assert_eq!(t.encode("ab", false), [id(&t, "▁ab")]);
    assert_eq!(t.encode("", true), [1]);
    assert_eq!(t.encode("", false), Vec::<u32>::new());
}

#[test]
fn spm_falls_back_to_bytes() {
    let t = Tokenizer::new(spm_vocab()).expect("vocab");
    let e = "é".as_bytes();
    let expected = [
        id(&t, "▁a"),
        id(&t, &format!("<0x{:02X}>", e[0])),
        id(&t, &format!("<0x{:02X}>", e[1])),
    ];
    assert_eq!(t.encode("aé", false), expected);
    assert_eq!(t.decode(&t.encode("aé", true), false), " aé");
}

#[test]
fn spm_user_defined_tokens_are_found_and_followed_by_a_space() {
    let t = Tokenizer::new(spm_vocab()).expect("vocab");
    let user = id(&t, "<user>");
    assert_eq!(
        t.encode("a<user>a", false),
        [id(&t, "▁a"), user, id(&t, "▁a")]
    );
    // Control tokens are text unless parse_special.
    assert_ne!(t.encode("<s>", false), [1]);
    assert_eq!(t.tokenize("<s>", false, true), [1]);
}

#[test]
fn pieces_and_eog() {
    let t = Tokenizer::new(spm_vocab()).expect("vocab");
    assert_eq!(t.piece(id(&t, "▁ab"), false), b" ab");
    assert_eq!(t.piece(id(&t, "<0x41>"), false), b"A");
    assert_eq!(t.piece(2, false), b"");
    assert_eq!(t.piece(2, true), b"</s>");
    assert_eq!(t.piece(99_999, true), b"");
    assert!(t.is_eog(2) && !t.is_eog(1));
}

/// A byte-level BPE vocabulary: the 256 byte characters, then merges.
fn bpe_vocab(pre: &str) -> Vocab {
    let mut tokens = Vec::new();
    for b in 0..=255u8 {
        let mut s = String::new();
        pretokenize::byte_encode(&[b], &mut s);
        tokens.push(s);
    }
    let merges = strings(&[
        "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "h e", "he l", "hel l", "hell o",
    ]);
    for m in &merges {
        tokens.push(m.replace(' ', ""));
    }
    tokens.push("<|endoftext|>".into());
    let mut types = vec![1; tokens.len()];
    types[tokens.len() - 1] = 3;
    Vocab {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        tokens,
        token_types: types,
        merges,
        bos: Some(11),
        eos: Some(11),
        ..Vocab::default()
    }
}

#[test]
fn bpe_merges_by_rank() {
    let t = Tokenizer::new(bpe_vocab("qwen2")).expect("vocab");
    assert_eq!(
        t.encode("hello world", false),
        [id(&t, "hello"), id(&t, "Ġworld")]
    );
    assert_eq!(
        t.decode(&t.encode("hello world!\n", false), false),
        "hello world!\n"
    );
    // A control token in the text is text without parse_special.
    let eot = id(&t, "<|endoftext|>");
    assert_ne!(t.encode("<|endoftext|>", false), [eot]);
    assert_eq!(t.tokenize("<|endoftext|>", false, true), [eot]);
    assert!(t.is_eog(eot));
}

#[test]
fn bpe_llama3_adds_bos_as_told() {
    let mut v = bpe_vocab("llama-bpe");
    v.add_bos = true;
    let t = Tokenizer::new(v).expect("vocab");
    assert_eq!(t.encode("hello", true), [11, id(&t, "hello")]);
}

#[test]
fn bad_vocabularies_are_errors() {
    let mut v = bpe_vocab("qwen2");
    v.merges.push("nope x".into());
    assert!(
        matches!(Tokenizer::new(v), Err(Error::MergeUnknownToken { token, .. }) if token == "nope")
    );
    let mut v = bpe_vocab("qwen2");
    v.merges.push("nospace".into());
    assert!(matches!(Tokenizer::new(v), Err(Error::BadMerge { .. })));
    let mut v = bpe_vocab("qwen2");
    v.merges.clear();
    assert_eq!(Tokenizer::new(v).err(), Some(Error::MissingMerges));
    assert_eq!(
        Tokenizer::new(bpe_vocab("gpt-9")).err(),
        Some(Error::UnknownPre("gpt-9".into()))
    );
    let mut v = bpe_vocab("qwen2");
    v.pre = None;
    assert_eq!(Tokenizer::new(v).err(), Some(Error::MissingPre));
    let mut v = spm_vocab();
    v.model = "wordpiece".into();
    assert_eq!(
        Tokenizer::new(v).err(),
        Some(Error::UnknownModel("wordpiece".into()))
    );
    let mut v = spm_vocab();
    v.bos = Some(1 << 20);
    assert!(matches!(
        Tokenizer::new(v),
        Err(Error::IdOutOfRange { what: "bos", .. })
    ));
    let mut v = spm_vocab();
    v.scores.truncate(3);
    assert!(matches!(
        Tokenizer::new(v),
        Err(Error::ShortArray { what: "scores", .. })
    ));
    let mut v = spm_vocab();
    v.bos = None;
    assert_eq!(Tokenizer::new(v).err(), Some(Error::MissingSpecial("bos")));
    assert_eq!(
        Tokenizer::new(Vocab::default()).err(),
        Some(Error::EmptyVocab)
    );
}

#[test]
fn decoder_streams_byte_tokens() {
    let t = Tokenizer::new(spm_vocab()).expect("vocab");
    let mut d = t.decoder();
    let ids = t.encode("a€", false);
    let pieces: Vec<String> = ids.iter().map(|&i| d.push(i)).collect();
    assert_eq!(pieces.concat() + &d.finish(), " a€");
    assert_eq!(pieces.last().map(String::as_str), Some("€"));
}
