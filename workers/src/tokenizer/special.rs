//! Token attributes and special tokens: what llama.cpp derives from the
//! token types and a few well-known token texts, and the partition of a
//! text around the special tokens written in it (`tokenizer_st_partition`).

use std::collections::BTreeSet;
use std::ops::Range;

/// Token attribute bits, as llama.cpp's `llama_token_attr`.
pub mod attr {
    /// A type outside 1..=6.
    pub const UNDEFINED: u32 = 0;
    /// Type 2.
    pub const UNKNOWN: u32 = 1 << 0;
    /// Type 5.
    pub const UNUSED: u32 = 1 << 1;
    /// Type 1.
    pub const NORMAL: u32 = 1 << 2;
    /// Type 3.
    pub const CONTROL: u32 = 1 << 3;
    /// Type 4.
    pub const USER_DEFINED: u32 = 1 << 4;
    /// Type 6.
    pub const BYTE: u32 = 1 << 5;
}

/// The attribute of GGUF token type `ty` (`tokenizer.ggml.token_type`).
pub fn attr_of_type(ty: i32) -> u32 {
    match ty {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => attr::UNDEFINED,
    }
}

/// Texts that end a generation; llama.cpp marks them control tokens too,
/// whatever their type says (`special_eog_ids`).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Fill-in-the-middle texts that end a generation (pad, repo, file sep).
const FIM_EOG_TEXTS: &[&str] = &[
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
];

/// Fill-in-the-middle texts that llama.cpp makes control tokens.
const FIM_CONTROL_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];

/// gpt-oss tokens that llama.cpp always renders (user-defined).
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// Applies llama.cpp's adjustments by token text to `attrs` and returns
/// the end-of-generation set: the EOG and FIM texts above, `extra_eog`
/// (eos, eot, eom), and two model-family exceptions (gpt-oss's `<|end|>`
/// and gemma-4's `</s>` are not EOG).
pub fn adjust(texts: &[String], attrs: &mut [u32], extra_eog: &[Option<u32>]) -> BTreeSet<u32> {
    let mut eog = BTreeSet::new();
    for (id, text) in texts.iter().enumerate() {
        let id32 = u32::try_from(id).unwrap_or(u32::MAX);
        let text = text.as_str();
        if EOG_TEXTS.contains(&text) || FIM_EOG_TEXTS.contains(&text) {
            eog.insert(id32);
            attrs[id] |= attr::CONTROL;
        } else if FIM_CONTROL_TEXTS.contains(&text) {
            attrs[id] |= attr::CONTROL;
        }
        if ALWAYS_RENDERED.contains(&text) {
            attrs[id] = attr::USER_DEFINED;
        }
    }
    eog.extend(extra_eog.iter().flatten().copied());
    let find = |eog: &BTreeSet<u32>, wanted: &[&str]| {
        eog.iter().copied().find(|&id| {
            texts
                .get(id as usize)
                .is_some_and(|t| wanted.contains(&t.as_str()))
        })
    };
    let has = |eog: &BTreeSet<u32>, wanted: &[&str]| find(eog, wanted).is_some();
    let has_call = has(&eog, &["<|call|>", "<|calls|>"]);
    if let Some(end) = find(&eog, &["<|end|>"])
        && has_call
        && (has(&eog, &["<|return|>"]) || has(&eog, &["<|flush|>"]))
    {
        eog.remove(&end);
        attrs[end as usize] = attr::USER_DEFINED;
    }
    if let Some(s) = find(&eog, &["</s>"])
        && has(&eog, &["<|tool_response>", "<|plamo:eos|>"])
    {
        eog.remove(&s);
        attrs[s as usize] = attr::NORMAL;
    }
    eog
}

/// The tokens looked for in a text, longest first (ties by id, where
/// llama.cpp's unstable sort leaves the order open): control, user-defined
/// and unknown tokens.
pub fn special_order(texts: &[String], attrs: &[u32]) -> Vec<u32> {
    let mask = attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN;
    let mut ids: Vec<u32> = (0..texts.len())
        .filter(|&i| attrs[i] & mask != 0)
        .filter_map(|i| u32::try_from(i).ok())
        .collect();
    ids.sort_by_key(|&id| std::cmp::Reverse(texts[id as usize].len()));
    ids
}

/// A piece of a text being tokenized: plain text, or a special token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// A byte range of the text.
    Text(Range<usize>),
    /// A special token found in the text.
    Token(u32),
}

/// Cuts `text` at each occurrence of the special tokens `specials` (in
/// that order: each token is looked for in what the earlier ones left).
/// Without `parse_special`, control and unknown tokens are not looked for,
/// user-defined ones still are.
pub fn partition(
    text: &str,
    specials: &[u32],
    texts: &[String],
    attrs: &[u32],
    parse_special: bool,
) -> Vec<Fragment> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut present = [false; 256];
    for &b in text.as_bytes() {
        present[usize::from(b)] = true;
    }
    let mut fragments = vec![Fragment::Text(0..text.len())];
    for &id in specials {
        if !parse_special && attrs[id as usize] & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let needle = texts[id as usize].as_str();
        match needle.as_bytes().first() {
            Some(&b) if present[usize::from(b)] => {}
            _ => continue,
        }
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            let Fragment::Text(range) = fragment else {
                next.push(fragment);
                continue;
            };
            let mut from = range.start;
            while let Some(found) = text[from..range.end].find(needle) {
                let at = from + found;
                if at > from {
                    next.push(Fragment::Text(from..at));
                }
                next.push(Fragment::Token(id));
                from = at + needle.len();
            }
            if from < range.end {
                next.push(Fragment::Text(from..range.end));
            }
        }
        fragments = next;
    }
    fragments
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_finds_user_defined_but_not_control_tokens() {
        let texts: Vec<String> = ["a", "<ctl>", "<user>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let attrs = [attr::NORMAL, attr::CONTROL, attr::USER_DEFINED];
        let order = special_order(&texts, &attrs);
        assert_eq!(order, [2, 1], "longest first");
        let text = "x<user>y<ctl><user>";
        assert_eq!(
            partition(text, &order, &texts, &attrs, false),
            [
                Fragment::Text(0..1),
                Fragment::Token(2),
                Fragment::Text(7..13),
                Fragment::Token(2)
            ]
        );
        assert_eq!(
            partition(text, &order, &texts, &attrs, true),
            [
                Fragment::Text(0..1),
                Fragment::Token(2),
                Fragment::Text(7..8),
                Fragment::Token(1),
                Fragment::Token(2)
            ]
        );
    }

    #[test]
    fn eog_texts_become_control() {
        let texts: Vec<String> = ["<|endoftext|>", "b", "<|im_end|>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut attrs = vec![attr::USER_DEFINED, attr::NORMAL, attr::NORMAL];
        let eog = adjust(&texts, &mut attrs, &[Some(1)]);
        assert_eq!(eog.into_iter().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(
            attrs,
            [
                attr::USER_DEFINED | attr::CONTROL,
                attr::NORMAL,
                attr::NORMAL | attr::CONTROL
            ]
        );
    }
}
