//! The Vast.ai API key, kept out of every log, error, trace and `Debug` output.

use std::fmt;

/// The account's API key. `Debug` and `Display` print `***`; the only way to
/// the text is [`ApiKey::expose`], used where the key goes on the wire.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

/// The environment variable the key is read from.
pub const API_KEY_ENV: &str = "VAST_API_KEY";

impl ApiKey {
    /// Wraps a key. An empty key is allowed (the fake's search needs none).
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The key from `VAST_API_KEY`, if set and not empty.
    pub fn from_env() -> Option<ApiKey> {
        std::env::var(API_KEY_ENV)
            .ok()
            .filter(|key| !key.trim().is_empty())
            .map(|key| ApiKey(key.trim().to_owned()))
    }

    /// The key's text, for the `Authorization` header or the `api_key` query.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Removes the key, and any `api_key=` query value, from `text`.
    pub fn redact(&self, text: &str) -> String {
        let without_key = if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.0, "***")
        };
        redact_query_key(&without_key)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Replaces the value of every `api_key=` in `text` (a URL, an error) by `***`,
/// so a key sent in the legacy query style never leaks through a URL.
pub fn redact_query_key(text: &str) -> String {
    const NEEDLE: &str = "api_key=";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(NEEDLE) {
        out.push_str(&rest[..at + NEEDLE.len()]);
        out.push_str("***");
        let value = &rest[at + NEEDLE.len()..];
        let end = value
            .find(|c: char| c == '&' || c == '#' || c == '"' || c == '\'' || c.is_whitespace())
            .unwrap_or(value.len());
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_key() {
        let key = ApiKey::new("sekrit-0123");
        assert_eq!(format!("{key:?}"), "***");
        assert_eq!(format!("{key}"), "***");
        assert_eq!(key.expose(), "sekrit-0123");
    }

    #[test]
    fn redact_removes_key_and_query_values() {
        let key = ApiKey::new("sekrit-0123");
        let text =
            "GET http://x/api/v0/instances/1/?api_key=other-key&owner=me failed: sekrit-0123";
        let redacted = key.redact(text);
        assert_eq!(
            redacted,
            "GET http://x/api/v0/instances/1/?api_key=***&owner=me failed: ***"
        );
        assert_eq!(redact_query_key("a api_key=zz"), "a api_key=***");
    }
}
