//! Why a vocabulary cannot make a tokenizer.

use std::fmt;

/// Why a vocabulary cannot make a tokenizer.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// `tokenizer.ggml.model` is neither "llama" nor "gpt2".
    UnknownModel(String),
    /// A byte-level BPE vocabulary without `tokenizer.ggml.pre`.
    MissingPre,
    /// A pre-tokenizer this crate does not implement.
    UnknownPre(String),
    /// A byte-level BPE vocabulary without merges.
    MissingMerges,
    /// A merge that is not two texts separated by a space.
    BadMerge {
        /// Its rank.
        index: usize,
        /// Its text.
        merge: String,
    },
    /// A merge one side of which is not a token.
    MergeUnknownToken {
        /// Its rank.
        index: usize,
        /// Its text.
        merge: String,
        /// The side that is not in the vocabulary.
        token: String,
    },
    /// No tokens at all.
    EmptyVocab,
    /// Scores or token types present but fewer than the tokens.
    ShortArray {
        /// "scores" or "token_types".
        what: &'static str,
        /// How many there are.
        found: usize,
        /// How many tokens there are.
        tokens: usize,
    },
    /// A special token id past the end of the vocabulary.
    IdOutOfRange {
        /// Which one ("bos", "eos", ...).
        what: &'static str,
        /// The id.
        id: u32,
        /// How many tokens there are.
        tokens: usize,
    },
    /// `add_bos` or `add_eos` is set but the token is absent.
    MissingSpecial(&'static str),
    /// A metadata key of the wrong type or missing (reading a GGUF file).
    Metadata {
        /// The key.
        key: String,
        /// What was expected of it.
        expected: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownModel(m) => write!(
                f,
                "unknown tokenizer model {m:?} (expected \"llama\" or \"gpt2\")"
            ),
            Error::MissingPre => write!(f, "byte-level BPE vocabulary without tokenizer.ggml.pre"),
            Error::UnknownPre(p) => write!(f, "unsupported BPE pre-tokenizer {p:?}"),
            Error::MissingMerges => {
                write!(f, "byte-level BPE vocabulary without tokenizer.ggml.merges")
            }
            Error::BadMerge { index, merge } => {
                write!(f, "merge {index} {merge:?} is not \"left right\"")
            }
            Error::MergeUnknownToken {
                index,
                merge,
                token,
            } => {
                write!(
                    f,
                    "merge {index} {merge:?} names {token:?}, which is not a token"
                )
            }
            Error::EmptyVocab => write!(f, "the vocabulary has no tokens"),
            Error::ShortArray {
                what,
                found,
                tokens,
            } => write!(f, "{found} {what} for {tokens} tokens"),
            Error::IdOutOfRange { what, id, tokens } => {
                write!(f, "{what} token {id} is past the {tokens} tokens")
            }
            Error::MissingSpecial(what) => {
                write!(f, "add_{what} is set but there is no {what} token")
            }
            Error::Metadata { key, expected } => write!(f, "metadata {key}: expected {expected}"),
        }
    }
}

impl std::error::Error for Error {}
