//! Text to token ids and back, byte for byte as llama.cpp does it.
//!
//! A [`Vocab`] (the `tokenizer.ggml.*` metadata of a GGUF file) becomes a
//! [`Tokenizer`] once checked. Two models are supported:
//!
//! - SentencePiece (`"llama"`, `spm.rs`): spaces written as U+2581, a
//!   leading space, pairs joined by score, byte fallback `<0xNN>`.
//! - Byte-level BPE (`"gpt2"`, `bpe.rs`): the llama-3 or qwen2 pre-tokenizer
//!   split ([`pretokenize`]), GPT-2's byte alphabet, merges by rank.
//!
//! [`Tokenizer::tokenize`] is `llama_tokenize(vocab, text, add_special,
//! parse_special)`: user-defined tokens written in the text are always
//! taken whole, control tokens only with `parse_special`. Decoding is per
//! token ([`Tokenizer::piece`], llama.cpp's `token_to_piece`) and streams
//! through a [`StreamDecoder`], which never splits a UTF-8 character.

mod bpe;
mod error;
pub mod pretokenize;
mod special;
mod spm;
pub mod stream;
mod vocab;

pub use error::Error;
pub use special::attr;
pub use stream::{StreamDecoder, Utf8Stream};
pub use vocab::{Defaults, Vocab};

use special::Fragment;
use std::collections::{BTreeSet, HashMap};

/// Token text (as bytes) to id; the last of equal texts wins, as in llama.cpp.
type TokenMap = HashMap<Vec<u8>, u32>;

#[derive(Debug)]
enum Model {
    Spm {
        byte_tokens: Box<[Option<u32>; 256]>,
    },
    Bpe(bpe::Bpe),
}

/// A checked vocabulary, ready to encode and decode.
#[derive(Debug)]
pub struct Tokenizer {
    model: Model,
    vocab: Vocab,
    token_ids: TokenMap,
    scores: Vec<f32>,
    attrs: Vec<u32>,
    /// Each token's bytes as llama.cpp's `token_to_piece(.., special = true)`.
    pieces: Vec<Vec<u8>>,
    /// The special tokens looked for in a text, in the order looked for.
    specials: Vec<u32>,
    eog: BTreeSet<u32>,
}

impl Tokenizer {
    /// Checks `vocab` and builds the lookup tables. Never panics: every
    /// inconsistency is an [`Error`].
    pub fn new(mut vocab: Vocab) -> Result<Tokenizer, Error> {
        check(&vocab)?;
        let n = vocab.tokens.len();
        // llama.cpp renames empty tokens so that each text is findable.
        for (i, text) in vocab.tokens.iter_mut().enumerate() {
            if text.is_empty() {
                *text = format!("[EMPTY_{i}]");
            }
        }
        let mut token_ids = TokenMap::with_capacity(n);
        for (i, text) in vocab.tokens.iter().enumerate() {
            token_ids.insert(
                text.as_bytes().to_vec(),
                u32::try_from(i).unwrap_or(u32::MAX),
            );
        }
        let scores = if vocab.scores.is_empty() {
            vec![0.0; n]
        } else {
            vocab.scores[..n].to_vec()
        };
        let mut attrs: Vec<u32> = if vocab.token_types.is_empty() {
            vec![attr::NORMAL; n]
        } else {
            vocab.token_types[..n]
                .iter()
                .map(|&t| special::attr_of_type(t))
                .collect()
        };
        let eog = special::adjust(
            &vocab.tokens,
            &mut attrs,
            &[vocab.eos, vocab.eot, vocab.eom],
        );
        let model = model(&vocab, &token_ids)?;
        let pieces = (0..n)
            .map(|i| piece_bytes(&model, &vocab.tokens[i], attrs[i]))
            .collect();
        let specials = special::special_order(&vocab.tokens, &attrs);
        Ok(Tokenizer {
            model,
            vocab,
            token_ids,
            scores,
            attrs,
            pieces,
            specials,
            eog,
        })
    }

    /// [`Vocab::from_gguf`] then [`Tokenizer::new`].
    pub fn from_gguf(header: &crate::gguf::Header) -> Result<Tokenizer, Error> {
        Tokenizer::new(Vocab::from_gguf(header)?)
    }

    /// `llama_tokenize(vocab, text, add_special, parse_special = false)`:
    /// control tokens written in the text are tokenized as text.
    pub fn encode(&self, text: &str, add_special: bool) -> Vec<u32> {
        self.tokenize(text, add_special, false)
    }

    /// `llama_tokenize(vocab, text, add_special, parse_special)`. With
    /// `add_special`, BOS and EOS are added as the vocabulary says.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let fragments = special::partition(
            text,
            &self.specials,
            &self.vocab.tokens,
            &self.attrs,
            parse_special,
        );
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.vocab.add_bos {
            out.extend(self.vocab.bos);
        }
        match &self.model {
            Model::Spm { byte_tokens } => {
                // A space goes before the text and after each special token.
                let mut after_special = true;
                let mut escaped = String::new();
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            escaped.clear();
                            if self.vocab.add_space_prefix && after_special {
                                escaped.push('\u{2581}');
                            }
                            escaped.push_str(&text[range].replace(' ', "\u{2581}"));
                            spm::encode(
                                &escaped,
                                &self.token_ids,
                                &self.scores,
                                byte_tokens,
                                &mut out,
                            );
                            after_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                    }
                }
            }
            Model::Bpe(bpe) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            bpe.encode(&text[range], &self.token_ids, &mut out)
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.vocab.add_eos {
            out.extend(self.vocab.eos);
        }
        out
    }

    /// The bytes token `id` stands for (llama.cpp's `token_to_piece` with no
    /// left strip). Control and unknown tokens write their text only with
    /// `special`; an id outside the vocabulary writes nothing.
    pub fn piece(&self, id: u32, special: bool) -> &[u8] {
        let i = id as usize;
        match (self.pieces.get(i), self.attrs.get(i)) {
            (Some(_), Some(&a)) if !special && a & (attr::CONTROL | attr::UNKNOWN) != 0 => &[],
            (Some(piece), _) => piece,
            _ => &[],
        }
    }

    /// The text of `ids` laid end to end, invalid UTF-8 as U+FFFD.
    pub fn decode(&self, ids: &[u32], special: bool) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| self.piece(id, special).iter().copied())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A streaming decoder that leaves control tokens out.
    pub fn decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self, false)
    }

    /// Whether `id` ends a generation (EOS, EOT, `<|im_end|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The end-of-generation tokens.
    pub fn eog_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.eog.iter().copied()
    }

    /// The attribute bits of token `id` (see [`attr`]); 0 outside the vocabulary.
    pub fn attr(&self, id: u32) -> u32 {
        self.attrs
            .get(id as usize)
            .copied()
            .unwrap_or(attr::UNDEFINED)
    }

    /// The checked vocabulary (empty token texts renamed `[EMPTY_i]`).
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// How many tokens there are.
    pub fn n_tokens(&self) -> usize {
        self.vocab.tokens.len()
    }

    /// The id of the token whose text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_ids.get(text.as_bytes()).copied()
    }
}

/// The checks of array lengths and special ids that need no tables.
fn check(vocab: &Vocab) -> Result<(), Error> {
    let n = vocab.tokens.len();
    if n == 0 {
        return Err(Error::EmptyVocab);
    }
    check_len("scores", vocab.scores.len(), n)?;
    check_len("token_types", vocab.token_types.len(), n)?;
    let ids = [
        ("bos", vocab.bos),
        ("eos", vocab.eos),
        ("unk", vocab.unk),
        ("eot", vocab.eot),
        ("eom", vocab.eom),
    ];
    for (what, id) in ids {
        if let Some(id) = id.filter(|&id| id as usize >= n) {
            return Err(Error::IdOutOfRange {
                what,
                id,
                tokens: n,
            });
        }
    }
    if vocab.add_bos && vocab.bos.is_none() {
        return Err(Error::MissingSpecial("bos"));
    }
    if vocab.add_eos && vocab.eos.is_none() {
        return Err(Error::MissingSpecial("eos"));
    }
    Ok(())
}

/// The model-specific tables: byte tokens, or merges and pre-tokenizer.
fn model(vocab: &Vocab, token_ids: &TokenMap) -> Result<Model, Error> {
    match vocab.model.as_str() {
        "llama" => Ok(Model::Spm {
            byte_tokens: Box::new(byte_tokens(token_ids, vocab.unk)),
        }),
        "gpt2" => {
            let pre = vocab.pre.as_deref().ok_or(Error::MissingPre)?;
            // llama-3 looks whole words up before merging (`ignore_merges`).
            let (split, ignore_merges) = if vocab::LLAMA3_PRES.contains(&pre) {
                (pretokenize::Split::Llama3, true)
            } else if vocab::QWEN2_PRES.contains(&pre) {
                (pretokenize::Split::Qwen2, false)
            } else {
                return Err(Error::UnknownPre(pre.to_string()));
            };
            Ok(Model::Bpe(bpe::Bpe::new(
                &vocab.merges,
                token_ids,
                split,
                ignore_merges,
            )?))
        }
        other => Err(Error::UnknownModel(other.to_string())),
    }
}

fn check_len(what: &'static str, found: usize, tokens: usize) -> Result<(), Error> {
    if found != 0 && found < tokens {
        return Err(Error::ShortArray {
            what,
            found,
            tokens,
        });
    }
    Ok(())
}

/// SentencePiece's token for each byte: `<0xNN>`, else the byte itself as a
/// text (llama.cpp's `byte_to_token`), else the unknown token.
fn byte_tokens(token_ids: &TokenMap, unk: Option<u32>) -> [Option<u32>; 256] {
    let mut out = [None; 256];
    for (b, slot) in out.iter_mut().enumerate() {
        let hex = format!("<0x{b:02X}>");
        *slot = token_ids
            .get(hex.as_bytes())
            .or_else(|| token_ids.get(&[b as u8][..]))
            .copied()
            .or(unk);
    }
    out
}

/// llama.cpp's `token_to_piece(.., special = true)` of one token.
fn piece_bytes(model: &Model, text: &str, attr: u32) -> Vec<u8> {
    if attr & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
        return text.as_bytes().to_vec();
    }
    if attr & attr::NORMAL != 0 {
        return match model {
            Model::Spm { .. } => text.replace('\u{2581}', " ").into_bytes(),
            Model::Bpe(_) => gpt2_decode(text),
        };
    }
    if attr & attr::BYTE != 0 {
        // "<0xNN>": llama.cpp reads the two hex digits with strtol.
        let digits = text.get(3..5).unwrap_or("");
        let end = digits
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(digits.len());
        return vec![u8::from_str_radix(&digits[..end], 16).unwrap_or(0)];
    }
    Vec::new()
}

/// A byte-level BPE token's bytes. A character outside GPT-2's byte
/// alphabet is written as llama.cpp writes it: `[UNK_BYTE_0x..<text>]`.
fn gpt2_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match pretokenize::byte_of_char(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
