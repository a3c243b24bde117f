//! The pre-tokenizer of byte-level BPE: the text is cut into words before
//! any merge, and each word's bytes are spelled in GPT-2's byte alphabet.
//!
//! The llama-3 and qwen2 splits are the regular expression
//!
//! ```text
//! (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! (qwen2 takes one digit, `\p{N}`, where llama-3 takes up to three). It is
//! written out by hand, alternative by alternative, as llama.cpp's
//! `unicode_regex_split_custom_llama3` does, because the regex crate has no
//! look-ahead and a hand-written scan is linear in the text.

use std::sync::OnceLock;

/// Which split a byte-level BPE vocabulary uses (`tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// llama-3: digits in runs of up to three.
    Llama3,
    /// qwen2: every digit alone.
    Qwen2,
}

impl Split {
    fn digits_max(self) -> usize {
        match self {
            Split::Llama3 => 3,
            Split::Qwen2 => 1,
        }
    }
}

/// The classes of one code point that the split looks at. Past the end of
/// the text every flag is false, as llama.cpp's out-of-range flags are.
#[derive(Clone, Copy, Default)]
struct Class {
    present: bool,
    letter: bool,
    number: bool,
    space: bool,
}

/// llama.cpp's classes are generated from Unicode 15.1 (`unicode-data.cpp`):
/// a code point assigned later is neither letter nor number there.
const UNICODE_AGE: &str = "15.1";

/// The sorted ranges of a regex-syntax class, e.g. `[\p{L}&&\p{age:15.1}]`.
/// The tables are regex-syntax's Unicode data, so this crate carries none.
fn class_ranges(class: &str) -> Vec<(char, char)> {
    use regex_syntax::hir::{Class as HirClass, HirKind};
    match regex_syntax::parse(class).map(|hir| hir.into_kind()) {
        Ok(HirKind::Class(HirClass::Unicode(class))) => class
            .ranges()
            .iter()
            .map(|r| (r.start(), r.end()))
            .collect(),
        // Only a build without regex-syntax's Unicode tables lands here; a
        // unit test asserts the tables are full, and ASCII still works.
        _ => Vec::new(),
    }
}

fn in_ranges(ranges: &[(char, char)], c: char) -> bool {
    let i = ranges.partition_point(|&(_, end)| end < c);
    i < ranges.len() && ranges[i].0 <= c
}

fn letter_ranges() -> &'static [(char, char)] {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    RANGES.get_or_init(|| class_ranges(&format!(r"[\p{{L}}&&\p{{age:{UNICODE_AGE}}}]")))
}

fn number_ranges() -> &'static [(char, char)] {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    RANGES.get_or_init(|| class_ranges(&format!(r"[\p{{N}}&&\p{{age:{UNICODE_AGE}}}]")))
}

/// Whether `c` is a letter (`\p{L}`) as llama.cpp classifies it.
pub fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(letter_ranges(), c)
}

/// Whether `c` is a number (`\p{N}`) as llama.cpp classifies it.
pub fn is_number(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    in_ranges(number_ranges(), c)
}

/// Whether `c` is white space (`\s`): Rust's `is_whitespace` is the
/// White_Space property, llama.cpp's list exactly.
pub fn is_space(c: char) -> bool {
    c.is_whitespace()
}

fn class(c: char) -> Class {
    Class {
        present: true,
        letter: is_letter(c),
        number: is_number(c),
        space: is_space(c),
    }
}

/// Cuts `text` into the words of the `split` pre-tokenizer, in order. The
/// words are slices of `text` and together are all of it.
pub fn split(text: &str, split: Split) -> Vec<&str> {
    let mut starts: Vec<usize> = Vec::with_capacity(text.len() + 1);
    let mut chars: Vec<char> = Vec::with_capacity(text.len());
    for (at, c) in text.char_indices() {
        starts.push(at);
        chars.push(c);
    }
    starts.push(text.len());
    let ends = word_ends(&chars, split.digits_max());
    let mut words = Vec::with_capacity(ends.len());
    let mut from = 0;
    for end in ends {
        words.push(&text[starts[from]..starts[end]]);
        from = end;
    }
    words
}

/// The end (in code points) of each word of `chars`, ascending; the last is
/// `chars.len()`.
fn word_ends(chars: &[char], digits_max: usize) -> Vec<usize> {
    let n = chars.len();
    let at = |pos: usize| chars.get(pos).copied();
    let class_at = |pos: usize| at(pos).map(class).unwrap_or_default();
    let is_newline = |pos: usize| matches!(at(pos), Some('\r' | '\n'));
    let mut ends = Vec::new();
    let mut pos = 0;
    while pos < n {
        let c = chars[pos];
        let here = class_at(pos);

        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if c == '\'' && pos + 1 < n {
            let next = chars[pos + 1].to_ascii_lowercase();
            if matches!(next, 's' | 't' | 'm' | 'd') {
                pos += 2;
                ends.push(pos);
                continue;
            }
            if pos + 2 < n {
                let pair = (next, chars[pos + 2].to_ascii_lowercase());
                if matches!(pair, ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                    pos += 3;
                    ends.push(pos);
                    continue;
                }
            }
        }

        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(c == '\r' || c == '\n' || here.number) && (here.letter || class_at(pos + 1).letter) {
            pos += 1;
            while class_at(pos).letter {
                pos += 1;
            }
            ends.push(pos);
            continue;
        }

        // \p{N}{1,3} (llama-3) or \p{N} (qwen2): a run of digits is cut
        // into pieces of at most `digits_max`.
        if here.number {
            let mut piece_start = pos;
            while class_at(pos).number {
                pos += 1;
                if pos - piece_start >= digits_max {
                    ends.push(pos);
                    piece_start = pos;
                }
            }
            if pos > piece_start {
                ends.push(pos);
            }
            continue;
        }

        // " ?[^\s\p{L}\p{N}]+[\r\n]*"
        let is_other = |k: Class| !(k.space || k.letter || k.number);
        let mut after_space = if c == ' ' { class_at(pos + 1) } else { here };
        if is_other(after_space) && here.present {
            if c == ' ' {
                pos += 1;
            }
            while is_other(after_space) && after_space.present {
                pos += 1;
                after_space = class_at(pos);
            }
            while is_newline(pos) {
                pos += 1;
            }
            ends.push(pos);
            continue;
        }

        let mut spaces = 0;
        let mut past_last_newline = None;
        while class_at(pos + spaces).space {
            if is_newline(pos + spaces) {
                past_last_newline = Some(pos + spaces + 1);
            }
            spaces += 1;
        }
        // \s*[\r\n]+
        if let Some(end) = past_last_newline {
            pos = end;
        // \s+(?!\S): all but the last space when a non-space follows.
        } else if spaces > 1 && pos + spaces < n {
            pos += spaces - 1;
        // \s+
        } else if spaces > 0 {
            pos += spaces;
        } else {
            pos += 1;
        }
        ends.push(pos);
    }
    ends
}

/// GPT-2's byte alphabet: each byte as a printable code point. The printable
/// Latin-1 bytes stand for themselves; the rest take U+0100 on, in order.
fn byte_chars() -> &'static [char; 256] {
    static CHARS: OnceLock<[char; 256]> = OnceLock::new();
    CHARS.get_or_init(|| {
        let mut chars = ['\0'; 256];
        let mut next = 256u32;
        for (byte, slot) in chars.iter_mut().enumerate() {
            let b = byte as u32;
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            let code = if printable {
                b
            } else {
                next += 1;
                next - 1
            };
            *slot = char::from_u32(code).unwrap_or('\u{FFFD}');
        }
        chars
    })
}

/// `bytes` spelled in GPT-2's byte alphabet.
pub fn byte_encode(bytes: &[u8], out: &mut String) {
    let chars = byte_chars();
    for &b in bytes {
        out.push(chars[usize::from(b)]);
    }
}

/// The byte that `c` spells in GPT-2's byte alphabet, if any.
pub fn byte_of_char(c: char) -> Option<u8> {
    let code = u32::from(c);
    let printable = (0x21..=0x7E).contains(&code)
        || (0xA1..=0xAC).contains(&code)
        || (0xAE..=0xFF).contains(&code);
    if printable {
        return u8::try_from(code).ok();
    }
    if !(256..256 + 68).contains(&code) {
        return None;
    }
    byte_chars()
        .iter()
        .position(|&x| x == c)
        .and_then(|i| u8::try_from(i).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, s: Split) -> Vec<&str> {
        split(text, s)
    }

    #[test]
    fn letter_table_is_full() {
        assert!(letter_ranges().len() > 500 && number_ranges().len() > 100);
        assert!(is_number('٣') && !is_number('a'));
        assert!(is_letter('é') && is_letter('ж') && is_letter('中'));
        assert!(!is_letter('\u{0301}') && !is_letter('1') && !is_letter('🦙'));
    }

    #[test]
    fn llama3_split_follows_the_regex() {
        let s = Split::Llama3;
        assert_eq!(words("Hello world", s), ["Hello", " world"]);
        assert_eq!(words("I'm here  now", s), ["I", "'m", " here", " ", " now"]);
        assert_eq!(words("12345 x", s), ["123", "45", " x"]);
        assert_eq!(words("a \n\n b", s), ["a", " \n\n", " b"]);
        assert_eq!(words("end   ", s), ["end", "   "]);
        assert_eq!(words(" ...!!\n", s), [" ...!!\n"]);
        assert_eq!(words("\tword", s), ["\tword"]);
        assert_eq!(words("I'VE", s), ["I", "'VE"]);
    }

    #[test]
    fn qwen2_split_takes_single_digits() {
        assert_eq!(
            words("x 2024", Split::Qwen2),
            ["x", " ", "2", "0", "2", "4"]
        );
    }

    #[test]
    fn split_covers_the_text() {
        let text = "Ünïcödé ☃ 3.14159\r\n\t  tabs\u{3000}and 'll 中文字";
        for s in [Split::Llama3, Split::Qwen2] {
            assert_eq!(split(text, s).concat(), text);
        }
    }

    #[test]
    fn byte_alphabet_round_trips() {
        let mut s = String::new();
        byte_encode(&[b' ', b'A', 0, 0xFF, b'\n'], &mut s);
        assert_eq!(s, "ĠA\u{100}ÿĊ");
        for b in 0..=255u8 {
            let mut s = String::new();
            byte_encode(&[b], &mut s);
            let c = s.chars().next().unwrap_or_default();
            assert_eq!(byte_of_char(c), Some(b));
        }
        assert_eq!(byte_of_char('中'), None);
    }
}
