//! Streaming detokenization. A token's piece may end inside a UTF-8
//! character (byte tokens, byte-level BPE), so the text of a generation is
//! released only where a character is complete. The concatenation of all
//! the pieces yielded equals `String::from_utf8_lossy` of all the tokens'
//! bytes, i.e. of llama.cpp's `token_to_piece` outputs laid end to end: a
//! U+FFFD comes out only for bytes that no continuation could make valid.

use super::Tokenizer;

/// UTF-8 text from a stream of bytes, released at character boundaries.
#[derive(Clone, Debug, Default)]
pub struct Utf8Stream {
    /// The bytes of a character not yet complete (at most 3).
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// A stream with nothing held back.
    pub fn new() -> Utf8Stream {
        Utf8Stream::default()
    }

    /// Takes `bytes` and returns the text that is now certain: everything up
    /// to the last character boundary, invalid sequences as U+FFFD. The
    /// bytes of a character still incomplete are held for the next call.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // The prefix was just checked; this cannot fail.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // Certainly invalid: as from_utf8_lossy, one U+FFFD
                        // for the maximal invalid prefix, then go on.
                        Some(len) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[len..];
                        }
                        // A character that more bytes may complete.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let held = rest.len();
        let drop_to = self.pending.len() - held;
        self.pending.drain(..drop_to);
        out
    }

    /// Whether bytes of an incomplete character are held back.
    pub fn is_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Ends the stream: a character left incomplete comes out as one U+FFFD,
    /// as `from_utf8_lossy` writes a truncated sequence at the end.
    pub fn finish(&mut self) -> String {
        let out = if self.pending.is_empty() {
            String::new()
        } else {
            char::REPLACEMENT_CHARACTER.to_string()
        };
        self.pending.clear();
        out
    }
}

/// Token ids in, text pieces out, never splitting a character. Made by
/// [`Tokenizer::decoder`].
#[derive(Clone, Debug)]
pub struct StreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    special: bool,
    bytes: Utf8Stream,
}

impl<'t> StreamDecoder<'t> {
    /// A decoder of `tokenizer`'s ids. With `special`, control and unknown
    /// tokens are written as their text (llama.cpp's `special = true`);
    /// without, they write nothing.
    pub fn new(tokenizer: &'t Tokenizer, special: bool) -> StreamDecoder<'t> {
        StreamDecoder {
            tokenizer,
            special,
            bytes: Utf8Stream::new(),
        }
    }

    /// The text that token `id` completes (possibly empty). An id outside
    /// the vocabulary writes nothing.
    pub fn push(&mut self, id: u32) -> String {
        self.bytes.push(self.tokenizer.piece(id, self.special))
    }

    /// Ends the stream (see [`Utf8Stream::finish`]).
    pub fn finish(&mut self) -> String {
        self.bytes.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = Utf8Stream::new();
        let mut out: Vec<String> = chunks.iter().map(|c| s.push(c)).collect();
        out.push(s.finish());
        out
    }

    #[test]
    fn holds_a_split_character() {
        let euro = "€".as_bytes();
        assert_eq!(
            stream(&[&euro[..1], &euro[1..2], &euro[2..], b"!"]),
            ["", "", "€", "!", ""]
        );
    }

    #[test]
    fn invalid_bytes_come_out_at_once() {
        assert_eq!(
            stream(&[b"a\xFFb", b"\xE2\x82", b"c"]),
            ["a\u{FFFD}b", "", "\u{FFFD}c", ""]
        );
    }

    #[test]
    fn a_truncated_end_is_one_replacement() {
        assert_eq!(stream(&[b"ok\xF0\x9F"]), ["ok", "\u{FFFD}"]);
    }
}
