//! SentencePiece (`tokenizer.ggml.model = "llama"`), as llama.cpp's
//! `llm_tokenizer_spm_session`: the text (spaces already written as U+2581)
//! starts as one symbol per character; the neighbouring pair whose joined
//! text is the token of highest score is joined first (the leftmost among
//! equals), until no pair is a token. A symbol left that is not a token is
//! written as its bytes' `<0xNN>` tokens.

use super::TokenMap;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Bigram {
    // The heap pops the greatest: the highest score, then the leftmost.
    // Scores are compared as llama.cpp's `<` does (a NaN ties).
    fn cmp(&self, other: &Self) -> Ordering {
        let by_score = self
            .score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal);
        by_score.then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

/// Appends the tokens of `text`. `scores` is indexed by token id;
/// `byte_tokens[b]` is the token that stands for byte `b`, where there is one.
pub(super) fn encode(
    text: &str,
    tokens: &TokenMap,
    scores: &[f32],
    byte_tokens: &[Option<u32>; 256],
    out: &mut Vec<u32>,
) {
    let bytes = text.as_bytes();
    let count = text.chars().count();
    let mut symbols: Vec<Symbol> = Vec::with_capacity(count);
    for (i, (start, c)) in text.char_indices().enumerate() {
        let prev = i.checked_sub(1);
        let next = (i + 1 < count).then_some(i + 1);
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev,
            next,
        });
    }
    let mut queue = BinaryHeap::with_capacity(count);
    let push = |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize, right: usize| {
        let (l, r) = (symbols[left], symbols[right]);
        let len = l.len + r.len;
        if let Some(&id) = tokens.get(&bytes[l.start..l.start + len]) {
            let score = scores.get(id as usize).copied().unwrap_or(0.0);
            queue.push(Bigram {
                score,
                left,
                right,
                len,
            });
        }
    };
    for i in 1..symbols.len() {
        push(&mut queue, &symbols, i - 1, i);
    }
    while let Some(bigram) = queue.pop() {
        let (left, right) = (symbols[bigram.left], symbols[bigram.right]);
        // A bigram whose symbols have changed since it was queued is stale.
        if left.len == 0 || right.len == 0 || left.len + right.len != bigram.len {
            continue;
        }
        symbols[bigram.left].len += right.len;
        symbols[bigram.left].next = right.next;
        symbols[bigram.right].len = 0;
        if let Some(next) = right.next {
            symbols[next].prev = Some(bigram.left);
        }
        if let Some(prev) = left.prev {
            push(&mut queue, &symbols, prev, bigram.left);
        }
        if let Some(next) = right.next {
            push(&mut queue, &symbols, bigram.left, next);
        }
    }

    let mut at = if symbols.is_empty() { None } else { Some(0) };
    while let Some(i) = at {
        let symbol = symbols[i];
        let piece = &bytes[symbol.start..symbol.start + symbol.len];
        match tokens.get(piece) {
            Some(&id) => out.push(id),
            // A byte with no token of its own is the unknown token, or
            // nothing without one: llama.cpp would throw here, and a
            // vocabulary with byte fallback has all 256.
            None => out.extend(piece.iter().filter_map(|&b| byte_tokens[usize::from(b)])),
        }
        at = symbol.next;
    }
}
