//! [`Text`]: immutable text that is cheap to clone.
//!
//! Ids, host names and user names travel in almost every effect and input,
//! so they are cloned and dropped many times per node. Short text (up to
//! [`INLINE_MAX`] bytes: `workers-12`, `vastai:123456`, `127.0.0.1`) is kept
//! inline, so a clone is a copy of a few words with no allocation and no
//! reference count; longer text is shared behind an `Arc`, so a clone
//! copies a pointer. It compares, orders and hashes as its text does, and
//! serializes as a plain string.
//!
//! (A crate such as `smol_str` does this too; core-fsm depends on serde
//! only, so it is written out here, without `unsafe`.)

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU8;
use std::sync::Arc;

/// The longest text kept inline, in bytes.
pub const INLINE_MAX: usize = 23;

/// Immutable text, cheap to clone.
pub struct Text(Repr);

/// Written out rather than derived: the derived clone joined the inline
/// copy and the reference count's increment in one place, and the compiler
/// spilled the inline bytes there in odd-sized pieces that the effect
/// holding the clone then read back whole before they had left the store
/// buffer, a stall on every id in every effect. With the shared case out of
/// line, the inline copy is three plain words: the lifecycle benchmark ran
/// 7% to 11% faster (as built, and with functions aligned to 32 and 64
/// bytes).
impl Clone for Text {
    #[inline]
    fn clone(&self) -> Text {
        match &self.0 {
            Repr::Inline { len, bytes } => Text(Repr::Inline {
                len: *len,
                bytes: *bytes,
            }),
            Repr::Shared(text) => shared_clone(text),
        }
    }
}

/// A clone of shared text, out of the way of the inline copy.
#[cold]
#[inline(never)]
fn shared_clone(text: &Arc<str>) -> Text {
    Text(Repr::Shared(Arc::clone(text)))
}

const _: () = assert!(std::mem::size_of::<Text>() == 24, "a Text is three words");

enum Repr {
    /// `bytes[..len - 1]` is the text, valid UTF-8 (it came from a
    /// `&str`). The length is kept plus one, so that zero marks the other
    /// variant: a `Text` is three words with no separate tag, and holds
    /// one byte more inline. (Against a tag byte, the lifecycle benchmark
    /// runs 3% to 5% faster: +3% as built, +3% and +5% with functions
    /// aligned to 32 and 64 bytes.)
    Inline {
        len: NonZeroU8,
        bytes: [u8; INLINE_MAX],
    },
    /// Longer text, shared.
    Shared(Arc<str>),
}

impl Text {
    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => std::str::from_utf8(&bytes[..inline_len(*len)])
                .expect("inline text is copied from a str"),
            Repr::Shared(text) => text,
        }
    }

    /// The text's bytes (no UTF-8 check, so cheaper than `as_str` where
    /// bytes will do: comparisons, digests).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..inline_len(*len)],
            Repr::Shared(text) => text.as_bytes(),
        }
    }

    /// The text's length in bytes.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Text {
    /// The concatenation of `parts`, built without an intermediate string.
    pub fn concat(parts: &[&str]) -> Text {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > INLINE_MAX {
            return Text(Repr::Shared(Arc::from(parts.concat())));
        }
        let mut bytes = [0u8; INLINE_MAX];
        let mut at = 0;
        for part in parts {
            bytes[at..at + part.len()].copy_from_slice(part.as_bytes());
            at += part.len();
        }
        Text(Repr::Inline {
            len: stored_len(len),
            bytes,
        })
    }
}

impl Text {
    /// `self` followed by `parts`, which must be ASCII: unlike
    /// [`Text::concat`], nothing is re-validated as UTF-8 (text followed by
    /// ASCII is valid UTF-8).
    pub(crate) fn join_ascii(&self, parts: &[&[u8]]) -> Text {
        assert!(parts.iter().all(|p| p.is_ascii()), "join_ascii takes ASCII");
        let head = self.as_bytes();
        let len = head.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        if len > INLINE_MAX {
            let mut text = String::with_capacity(len);
            text.push_str(self);
            for part in parts {
                text.extend(part.iter().map(|b| char::from(*b)));
            }
            return Text(Repr::Shared(Arc::from(text)));
        }
        let mut bytes = [0u8; INLINE_MAX];
        bytes[..head.len()].copy_from_slice(head);
        let mut at = head.len();
        for part in parts {
            bytes[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        Text(Repr::Inline {
            len: stored_len(len),
            bytes,
        })
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        if text.len() <= INLINE_MAX {
            let mut bytes = [0u8; INLINE_MAX];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            Text(Repr::Inline {
                len: stored_len(text.len()),
                bytes,
            })
        } else {
            Text(Repr::Shared(Arc::from(text)))
        }
    }
}

impl From<String> for Text {
    fn from(text: String) -> Text {
        if text.len() <= INLINE_MAX {
            Text::from(text.as_str())
        } else {
            Text(Repr::Shared(Arc::from(text)))
        }
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::ops::Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        match (&self.0, &other.0) {
            // Unused inline bytes are zero, so equal text is equal arrays.
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => {
                a == b && x == y
            }
            _ => self.as_bytes() == other.as_bytes(),
        }
    }
}

impl Eq for Text {}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Text) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    /// Byte order, which is the order of `str`.
    fn cmp(&self, other: &Text) -> Ordering {
        match (&self.0, &other.0) {
            // Unused inline bytes are zero: comparing the arrays as big-endian
            // words, then the lengths, is byte order (a prefix sorts first;
            // text ending in zero bytes ties with its prefix on the arrays
            // and is longer).
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => {
                words(x).cmp(&words(y)).then(a.cmp(b))
            }
            _ => self.as_bytes().cmp(other.as_bytes()),
        }
    }
}

/// An inline length as stored: plus one.
fn stored_len(len: usize) -> NonZeroU8 {
    let len = u8::try_from(len + 1).expect("INLINE_MAX fits a u8");
    NonZeroU8::new(len).expect("plus one is not zero")
}

/// An inline length as stored, as a length.
fn inline_len(stored: NonZeroU8) -> usize {
    usize::from(stored.get() - 1)
}

/// Inline bytes as big-endian words: their order is the bytes' order.
/// The last word overlaps the middle one by a byte (23 bytes, three
/// words): where the first two are equal that byte is too, so the order
/// still is the bytes' order, and nothing is copied to compare.
#[inline]
fn words(bytes: &[u8; INLINE_MAX]) -> (u64, u64, u64) {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_be_bytes(w)
    };
    (word(0), word(8), word(INLINE_MAX - 8))
}

impl Hash for Text {
    /// As `str` hashes.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so that tables can align text with `{:<24}`.
        f.pad(self.as_str())
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Text, E> {
                Ok(Text::from(text))
            }
            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Text, E> {
                Ok(Text::from(text))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_text_behave_alike() {
        let short = Text::from("workers-12");
        let edge = Text::from("x".repeat(INLINE_MAX));
        let long = Text::from("x".repeat(INLINE_MAX + 1));
        assert!(matches!(short.0, Repr::Inline { .. }));
        assert!(matches!(edge.0, Repr::Inline { .. }));
        assert!(matches!(long.0, Repr::Shared(_)));
        assert_eq!(short.as_str(), "workers-12");
        assert_eq!(edge.len(), INLINE_MAX);
        assert_eq!(long.as_str(), "x".repeat(INLINE_MAX + 1));
        assert_eq!(short.clone(), short);
        assert_eq!(Text::from(String::from("workers-12")), short);
        assert_eq!(format!("{short:?}"), "\"workers-12\"");
        assert_eq!(format!("{short:<12}|"), "workers-12  |");
        assert!(Text::from("").is_empty());
        assert_eq!(Text::concat(&["workers", "-", "12"]), short);
        let joined = Text::concat(&["x".repeat(INLINE_MAX).as_str(), "-1"]);
        assert_eq!(joined.as_str(), format!("{}-1", "x".repeat(INLINE_MAX)));
        assert_eq!(Text::from("workers").join_ascii(&[b"-", b"12"]), short);
        let long_join = Text::from("x".repeat(INLINE_MAX)).join_ascii(&[b"-", b"1"]);
        assert_eq!(long_join, joined);
        assert!(matches!(long_join.0, Repr::Shared(_)));
        assert_eq!(Text::from("é").join_ascii(&[b"-0"]).as_str(), "é-0");
    }

    #[test]
    fn orders_as_str_orders() {
        let mut words = vec!["workers-2", "workers-10", "é", "a", "", "workers-1"];
        words.extend([
            "a\0",
            "a\0\0",
            "a\u{1}",
            "b",
            "\u{7f}",
            "x".repeat(INLINE_MAX).leak(),
            // Equal in the first words, different in the last (which
            // overlaps the middle one by a byte) or only in length.
            "aaaaaaaaaaaaaaaab",
            "aaaaaaaaaaaaaaaac",
            "aaaaaaaaaaaaaaaabz",
            "aaaaaaaaaaaaaaaabzzzzz",
            "aaaaaaaaaaaaaaaabzzzzy",
            "aaaaaaaaaaaaaaaa",
        ]);
        words.push("a-rather-long-node-id-that-is-shared-0");
        words.push("a-rather-long-node-id-that-is-shared-1");
        let mut texts: Vec<Text> = words.iter().map(|w| Text::from(*w)).collect();
        words.sort();
        texts.sort();
        let sorted: Vec<&str> = texts.iter().map(Text::as_str).collect();
        assert_eq!(sorted, words);
        // Equality and order agree with `str`'s for every pair.
        for (a, x) in words.iter().zip(&texts) {
            for (b, y) in words.iter().zip(&texts) {
                assert_eq!(x.cmp(y), Text::from(*a).cmp(&Text::from(*b)));
                assert_eq!(x.cmp(y), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(x == y, a == b, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn multibyte_text_round_trips() {
        // 23 bytes, the last character 2 bytes: inline, and valid.
        let text = format!("{}é", "a".repeat(INLINE_MAX - 2));
        let inline = Text::from(text.as_str());
        assert!(matches!(inline.0, Repr::Inline { .. }));
        assert_eq!(inline.as_str(), text);
        // One byte more: shared.
        let text = format!("{}é", "a".repeat(INLINE_MAX - 1));
        let shared = Text::from(text.as_str());
        assert!(matches!(shared.0, Repr::Shared(_)));
        assert_eq!(shared.as_str(), text);
    }
}
