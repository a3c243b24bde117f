//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`), as llama.cpp's
//! `llm_tokenizer_bpe_session`: the pre-tokenizer cuts the text into words,
//! each word is spelled in GPT-2's byte alphabet and its characters are
//! merged pair by pair, the pair of lowest merge rank first (the leftmost
//! among equals), until no listed pair is left.

use super::pretokenize::{self, Split};
use super::{Error, TokenMap};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// What one merge makes: its rank (its line in `tokenizer.ggml.merges`) and
/// the token it spells, if the vocabulary has one.
#[derive(Clone, Copy, Debug)]
struct Merge {
    rank: u32,
    merged: Option<u32>,
}

/// The merge table and pre-tokenizer of one vocabulary.
#[derive(Debug)]
pub(super) struct Bpe {
    merges: HashMap<(u32, u32), Merge>,
    split: Split,
    /// llama-3 looks a whole word up in the vocabulary before merging.
    ignore_merges: bool,
}

impl Bpe {
    /// Reads `merges` ("left right" per line, rank = index) against the
    /// vocabulary. A merge whose left or right side is not a token is an
    /// error, as in Hugging Face's tokenizers; the first of duplicates wins,
    /// as in llama.cpp.
    pub(super) fn new(
        merges: &[String],
        tokens: &TokenMap,
        split: Split,
        ignore_merges: bool,
    ) -> Result<Bpe, Error> {
        if merges.is_empty() {
            return Err(Error::MissingMerges);
        }
        let mut table = HashMap::with_capacity(merges.len());
        for (index, line) in merges.iter().enumerate() {
            // llama.cpp looks for the separating space from the second byte
            // on, so a merge may start with a space.
            let Some(space) = line.bytes().skip(1).position(|b| b == b' ').map(|i| i + 1) else {
                return Err(Error::BadMerge {
                    index,
                    merge: line.clone(),
                });
            };
            let (left, right) = (&line[..space], &line[space + 1..]);
            let id = |text: &str| {
                tokens
                    .get(text.as_bytes())
                    .copied()
                    .ok_or_else(|| Error::MergeUnknownToken {
                        index,
                        merge: line.clone(),
                        token: text.to_string(),
                    })
            };
            let pair = (id(left)?, id(right)?);
            let merged = tokens.get(format!("{left}{right}").as_bytes()).copied();
            let rank = u32::try_from(index).unwrap_or(u32::MAX);
            table.entry(pair).or_insert(Merge { rank, merged });
        }
        Ok(Bpe {
            merges: table,
            split,
            ignore_merges,
        })
    }

    /// Appends the tokens of `text` (a fragment with no special token in it).
    pub(super) fn encode(&self, text: &str, tokens: &TokenMap, out: &mut Vec<u32>) {
        let mut session = Session::default();
        let mut word = String::new();
        for piece in pretokenize::split(text, self.split) {
            word.clear();
            pretokenize::byte_encode(piece.as_bytes(), &mut word);
            if self.ignore_merges
                && let Some(&id) = tokens.get(word.as_bytes())
            {
                out.push(id);
                continue;
            }
            session.merge(self, &word, tokens);
            session.emit(&word, tokens, out);
        }
    }
}

/// One symbol of a word: a run of its bytes, linked to its neighbours.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
    id: Option<u32>,
}

/// A candidate merge of two neighbouring symbols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bigram {
    rank: u32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Bigram {
    // The heap pops the greatest: the lowest rank, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        other.rank.cmp(&self.rank).then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The buffers of one encode, kept from word to word.
#[derive(Default)]
struct Session {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

impl Session {
    fn merge(&mut self, bpe: &Bpe, word: &str, tokens: &TokenMap) {
        self.symbols.clear();
        self.queue.clear();
        let count = word.chars().count();
        for (i, (start, c)) in word.char_indices().enumerate() {
            let len = c.len_utf8();
            let id = tokens.get(&word.as_bytes()[start..start + len]).copied();
            let prev = i.checked_sub(1);
            let next = (i + 1 < count).then_some(i + 1);
            self.symbols.push(Symbol {
                start,
                len,
                prev,
                next,
                id,
            });
        }
        for i in 1..self.symbols.len() {
            self.push_bigram(bpe, i - 1, i);
        }
        while let Some(bigram) = self.queue.pop() {
            let (left, right) = (self.symbols[bigram.left], self.symbols[bigram.right]);
            // A bigram whose symbols have changed since it was queued is stale.
            if left.len == 0
                || right.len == 0
                || left.len + right.len != bigram.len
                || left.next != Some(bigram.right)
            {
                continue;
            }
            let merged = left
                .id
                .and_then(|l| right.id.and_then(|r| bpe.merges.get(&(l, r))));
            let symbol = &mut self.symbols[bigram.left];
            symbol.len += right.len;
            symbol.next = right.next;
            symbol.id = merged.and_then(|m| m.merged);
            self.symbols[bigram.right].len = 0;
            if let Some(next) = right.next {
                self.symbols[next].prev = Some(bigram.left);
            }
            if let Some(prev) = left.prev {
                self.push_bigram(bpe, prev, bigram.left);
            }
            if let Some(next) = right.next {
                self.push_bigram(bpe, bigram.left, next);
            }
        }
    }

    fn push_bigram(&mut self, bpe: &Bpe, left: usize, right: usize) {
        let (l, r) = (self.symbols[left], self.symbols[right]);
        let Some(merge) =
            l.id.and_then(|l| r.id.and_then(|r| bpe.merges.get(&(l, r))))
        else {
            return;
        };
        self.queue.push(Bigram {
            rank: merge.rank,
            left,
            right,
            len: l.len + r.len,
        });
    }

    /// Appends the word's final symbols. A symbol that is not a token (a
    /// merge whose result the vocabulary lacks) falls back to its single
    /// bytes that are tokens, as llama.cpp does.
    fn emit(&self, word: &str, tokens: &TokenMap, out: &mut Vec<u32>) {
        let mut at = if self.symbols.is_empty() {
            None
        } else {
            Some(0)
        };
        while let Some(i) = at {
            let symbol = self.symbols[i];
            match symbol.id {
                Some(id) => out.push(id),
                None => {
                    let bytes = &word.as_bytes()[symbol.start..symbol.start + symbol.len];
                    out.extend(
                        bytes
                            .iter()
                            .filter_map(|b| tokens.get(std::slice::from_ref(b)).copied()),
                    );
                }
            }
            at = symbol.next;
        }
    }
}
